"""Which files a block of code writes, seen through Python's audit events (PEP 578).

The conformance kit and the simulate tests use it to prove that a backend's
``hami_allocate`` and ``hami simulate`` write nothing on the host: what a backend keeps
goes to the core's ``NodeState``, what a container mounts to
``ContainerAllocation.files``. Every write made through Python is seen, whoever makes it
(``open`` for writing, ``os.open`` with a write flag, mkdir, rename/replace, remove,
chmod, links); a C extension writing through libc directly is not.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Final

_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: Audit events naming a path that is changed: event -> how many leading path arguments.
_PATH_EVENTS: Final = {
    "os.mkdir": 1,
    "os.rename": 2,
    "os.remove": 1,
    "os.rmdir": 1,
    "os.chmod": 1,
    "os.chown": 1,
    "os.symlink": 2,
    "os.link": 2,
    "os.truncate": 1,
    "os.utime": 1,
}

_lock = threading.Lock()
_recorders: list[list[str]] = []
_installed = False


def _as_path(value: Any) -> str | None:
    if isinstance(value, str | bytes | os.PathLike):
        return os.path.abspath(os.fsdecode(value))
    return None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _recorders:
        return
    paths: list[str | None] = []
    if event == "open":
        path, mode, flags = args
        if mode is not None:
            writes = any(c in str(mode) for c in "wax+")
        else:
            writes = isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
        if writes:
            paths.append(_as_path(path))
    elif event in _PATH_EVENTS:
        paths.extend(_as_path(a) for a in args[: _PATH_EVENTS[event]])
    found = [p for p in paths if p is not None]
    if found:
        for seen in _recorders:
            seen.extend(found)


@contextlib.contextmanager
def host_writes() -> Iterator[list[str]]:
    """The absolute paths written inside the block, in order (a list filled as it runs).

    Python's bytecode cache is off meanwhile (an import would write ``__pycache__``).
    The audit hook is installed once per process (hooks cannot be removed) and idles
    outside these blocks.
    """
    global _installed
    with _lock:
        if not _installed:
            sys.addaudithook(_audit)
            _installed = True
    seen: list[str] = []
    bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)
        sys.dont_write_bytecode = bytecode


def outside(paths: Sequence[str], root: str | os.PathLike[str]) -> list[str]:
    """The ``paths`` not below ``root`` (as given or with its links resolved)."""
    bases = tuple({os.path.abspath(root) + os.sep, os.path.realpath(root) + os.sep})
    return [p for p in paths if not os.path.abspath(p).startswith(bases)]
