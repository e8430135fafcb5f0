"""The node monitor's domain logic, without an HTTP server (PROTOCOL.md §9, node part).

- ``files``: reading tenant-written files without following links or blocking.
- ``procs``: which processes are alive (``/proc``), by PID-namespace pid and start time.
- ``node``: ``NodeMonitor``, one scan of a node's container directories and host
  devices into metric families, and removal of the directories of gone pods.
- ``families``: the metric families as plain data (the servers layer renders them).

The HTTP edge is ``hami_core.servers.monitor``.
"""

from .families import Family
from .files import UntrustedFileError, read_tenant_file
from .node import MonitorStats, NodeMonitor, Scan
from .procs import live_processes

__all__ = [
    "Family",
    "MonitorStats",
    "NodeMonitor",
    "Scan",
    "UntrustedFileError",
    "live_processes",
    "read_tenant_file",
]
