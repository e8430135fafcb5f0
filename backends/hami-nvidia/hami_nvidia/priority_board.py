"""Cleaning the per-GPU task-priority boards (shim/src/priority.h, docs/sharing-modes.md).

Allocate gives a container of ``nvidia.com/priority: 0`` its own entry
``<hook>/priority/<GPU UUID>/<pod UID>_<container>/`` (``allocate.priority_mounts``); the
low-priority shims read at most 256 entries of a board per look, so entries of pods that
are gone must not pile up. ``release`` (the backend's ``hami_release``) removes them.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.backend import DeviceInfo, VendorConfig

from .allocate import priority_board

log = logging.getLogger(__name__)

#: An entry younger than this is kept even if no listed pod owns it: the pod list may
#: trail the Allocate that made it (seconds; the entry's or its beat's mtime).
GRACE_S = 120.0
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
    next round tries again); links and other files in a board are left alone.
    """
    live = {
        str((p.get("metadata") or {}).get("uid") or "")
        for p in pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    }
    hook = str(config.options["hookPath"])
    now = clock()
    out: list[str] = []
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
                    beat = os.stat(f"{name}/beat", dir_fd=fd, follow_symlinks=False).st_mtime
                except FileNotFoundError:
                    beat = 0.0
                except OSError:
                    continue
                if not stat.S_ISDIR(st.st_mode) or now - max(st.st_mtime, beat) < GRACE_S:
                    continue
                try:
                    # descriptor-based: never follows a link the tenant left inside
                    shutil.rmtree(name, dir_fd=fd)
                except OSError as exc:
                    log.warning("cannot remove %s/%s: %s", board, name, exc)
                    continue
                out.append(f"priority board entry {board}/{name} (pod gone)")
        finally:
            os.close(fd)
    return out
