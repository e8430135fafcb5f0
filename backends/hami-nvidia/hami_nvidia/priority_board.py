"""Cleaning the per-GPU task-priority boards (shim/src/priority.h, docs/sharing-modes.md).

Allocate gives a container of ``nvidia.com/priority: 0`` its own entry
``<hook>/priority/<GPU UUID>/<pod UID>_<container>/`` (``allocate.priority_mounts``); the
low-priority shims read at most 256 entries of a board per look, so entries of pods that
are gone must not pile up. ``release`` (the backend's ``hami_release``) removes them.

An entry is host-owned (only its ``beat`` file is mounted writable, ``allocate``), but
entries made by an older version were writable directories a tenant could fill with
anything: removal is bounded (``remove_tree``: no recursion, a bounded number of
descriptors and operations per round) and one entry never fails the round.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.backend import DeviceInfo, VendorConfig, remove_tree

from .allocate import priority_board

log = logging.getLogger(__name__)

#: An entry younger than this is kept even if no listed pod owns it: the pod list may
#: trail the Allocate that made it (seconds; the entry's or its beat's mtime).
GRACE_S = 120.0
#: Most unlink / rmdir / rename operations one round spends removing entries; a huge
#: entry is finished in later rounds.
REMOVAL_BUDGET = 20_000
#: ``<pod UID>_<container name>`` as Allocate names entries.
ENTRY = re.compile(r"^([0-9a-fA-F-]{1,64})_([a-z0-9]([-a-z0-9]*[a-z0-9])?)$")


def release(
    pods: Sequence[Mapping[str, Any]],
    devices: Sequence[DeviceInfo],
    config: VendorConfig,
    clock: Callable[[], float] = time.time,
) -> list[str]:
    """Remove the board entries of pods that have finished or are gone.

    Args:
        pods: every pod bound to this node (``hami_release``'s list; finished ones count
            as gone).
        devices: the node's devices; their UUIDs name the boards.
    Returns: one line per entry removed (for the device plugin's log).
    Never raises for a board it cannot read or an entry it cannot remove (logged; the
    next round tries again); links and other files in a board are left alone. At most
    ``REMOVAL_BUDGET`` removals per call, whatever the entries hold (a tree thousands
    deep, millions of files): the rest is removed in later rounds.
    """
    live = {
        str((p.get("metadata") or {}).get("uid") or "")
        for p in pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    }
    hook = str(config.options["hookPath"])
    now = clock()
    out: list[str] = []
    budget = [REMOVAL_BUDGET]
    for dev in devices:
        board = priority_board(hook, dev.uuid)
        try:
            fd = os.open(board, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("priority board %s unreadable: %s", board, exc)
            continue
        try:
            for name in os.listdir(fd):
                m = ENTRY.match(name)
                if m is None or m.group(1) in live:
                    continue
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                try:
                    beat = os.stat(f"{name}/beat", dir_fd=fd, follow_symlinks=False).st_mtime
                except OSError:
                    beat = 0.0
                if not stat.S_ISDIR(st.st_mode) or now - max(st.st_mtime, beat) < GRACE_S:
                    continue
                if budget[0] <= 0:
                    break
                if _remove(fd, f"{board}/{name}", name, budget):
                    out.append(f"priority board entry {board}/{name} (pod gone)")
        finally:
            os.close(fd)
    return out


def _remove(board_fd: int, path: str, name: str, budget: list[int]) -> bool:
    """Remove one entry within what is left of ``budget`` (decremented); True when it
    is gone. Never raises."""
    spent = [0]
    try:
        # descriptor-based, bounded, never follows a link the tenant left inside
        done = remove_tree(name, dir_fd=board_fd, max_entries=budget[0], spent=spent)
    except Exception as exc:  # one entry must not fail the round
        log.warning("cannot remove %s: %s", path, exc)
        done = False
    finally:
        budget[0] -= spent[0]
    if not done and budget[0] <= 0:
        log.info("removing the large entry %s; going on in the next round", path)
    return done
