"""Removing host directory trees a tenant wrote, with bounded resources.

A container's writable host directory (a priority-board entry, an old-layout region
directory) may hold anything its author made: links to host files, FIFOs, millions of
files, or a chain of directories thousands deep. ``shutil.rmtree`` recurses once per
level and holds a descriptor per level, so a tree 1200 deep raises ``RecursionError``
(or ``EMFILE``) on every try, and whatever removes it fails for good (issue 24 item 16).
``remove_tree`` never recurses, holds at most ``max_depth`` descriptors, never follows a
link, and does at most ``max_entries`` operations per call; a later call resumes.
"""

from __future__ import annotations

import itertools
import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: Names a subtree that was too deep gets when moved up to the top of the tree.
_FLAT_PREFIX = ".hami-flattened-"


def remove_tree(
    name: str,
    *,
    dir_fd: int,
    max_depth: int = 32,
    max_entries: int = 100_000,
    spent: list[int] | None = None,
) -> bool:
    """Remove ``name`` (inside the directory ``dir_fd``) and everything under it.

    Links are removed, never followed; a directory deeper than ``max_depth`` below
    ``name`` is first renamed up into ``name`` itself (same filesystem, so a rename),
    which keeps the descriptors held at ``max_depth`` whatever the tree's depth.

    Args:
        name: a file, link or directory name inside ``dir_fd`` (no ``/``).
        dir_fd: descriptor of the directory that holds it.
        max_depth: most directory descriptors held at once (>= 1).
        max_entries: most unlink / rmdir / rename operations this call makes (>= 1);
            the bound on one call's time however many files the tree holds.
        spent: when given, its first item is increased by the operations this call
            made (a caller sharing one budget among several trees).
    Returns: True when ``name`` is gone (or was not there); False when the budget ran
        out first (what was removed stays removed; call again to go on).
    Raises:
        ValueError: ``max_depth`` or ``max_entries`` below 1.
        OSError: an entry cannot be removed (permissions, a read-only filesystem).
    """
    if max_depth < 1 or max_entries < 1:
        raise ValueError(f"max_depth and max_entries must be >= 1, got {max_depth}, {max_entries}")
    try:
        top = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    except OSError:
        st = os.lstat(name, dir_fd=dir_fd)
        if stat.S_ISDIR(st.st_mode):
            raise
        os.unlink(name, dir_fd=dir_fd)  # a link, FIFO or file where a directory was
        return True
    # (descriptor, its name in the directory below it on the stack)
    stack: list[tuple[int, str]] = [(top, name)]
    budget = max_entries
    moved = 0
    if spent is None:
        spent = [0]
    try:
        while stack:
            fd = stack[-1][0]
            with os.scandir(fd) as it:
                batch = list(itertools.islice(it, 256))
            if not batch:
                os.close(fd)
                _, done = stack.pop()
                os.rmdir(done, dir_fd=stack[-1][0] if stack else dir_fd)
                budget -= 1
                if budget <= 0 and stack:
                    return False
                continue
            for entry in batch:
                if budget <= 0:
                    return False
                if entry.is_dir(follow_symlinks=False):
                    if len(stack) < max_depth:
                        stack.append((os.open(entry.name, _DIR_FLAGS, dir_fd=fd), entry.name))
                        break
                    moved = _move_up(entry.name, fd, top, moved)
                else:
                    os.unlink(entry.name, dir_fd=fd)
                budget -= 1
        return True
    finally:
        spent[0] += max_entries - budget
        for fd, _ in stack:
            os.close(fd)


def _move_up(name: str, src_fd: int, top_fd: int, counter: int) -> int:
    """Rename directory ``name`` of ``src_fd`` into ``top_fd`` under a free name;
    returns the counter to use next."""
    while True:
        counter += 1
        target = f"{_FLAT_PREFIX}{counter}"
        try:
            os.lstat(target, dir_fd=top_fd)
        except FileNotFoundError:
            os.rename(name, target, src_dir_fd=src_fd, dst_dir_fd=top_fd)
            return counter
