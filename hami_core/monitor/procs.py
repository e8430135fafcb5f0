"""Which processes are alive, as ``(pid in its own PID namespace, start time)`` pairs.

The shim records each process by the pid it has in the container's PID namespace and
its start time in clock ticks after boot (``/proc/<pid>/stat`` field 22, the same in
every namespace). The monitor runs with the host's PID namespace (``hostPID``), so it
sees every process and its innermost pid in the last field of ``NSpid`` in
``/proc/<pid>/status`` (Linux >= 4.1, proc(5)). A slot is live when both match a
running, non-zombie process: a dead process whose pid was reused does not count.
"""

from __future__ import annotations

import os


def live_processes(proc_root: str = "/proc") -> frozenset[tuple[int, int]]:
    """Every running process as ``(innermost pid, start time in ticks)``.

    Zombies (``Z``) and dead (``X``) processes are left out; processes that exit during
    the scan are skipped. Never raises for one unreadable process.
    """
    out: set[tuple[int, int]] = set()
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return frozenset()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc_root}/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"{proc_root}/{entry}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) < 20 or fields[0] in (b"Z", b"X"):
            continue
        try:
            start = int(fields[19])
        except ValueError:
            continue
        pid = int(entry)
        for line in status.splitlines():
            if line.startswith(b"NSpid:"):
                parts = line.split()[1:]
                if parts and parts[-1].isdigit():
                    pid = int(parts[-1])
                break
        out.add((pid, start))
    return frozenset(out)
