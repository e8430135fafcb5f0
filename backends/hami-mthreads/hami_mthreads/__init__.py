"""hami-mthreads: the Moore Threads backend of hami (entry point ``mthreads``).

Vendor key ``Mthreads``, resources ``mthreads.com/vgpu`` / ``mthreads.com/sgpu-memory``
(unit 512 MiB; values 2, 4, 8, 16, 32, 64, 96 with the default ``memoryPerCard: [96]``) / ``mthreads.com/sgpu-core`` (of 16 per
GPU); inventory from the node's capacity as Moore Threads' device plugin advertises it
(PROTOCOL.md §1b, HAMi 2.10 ``pkg/device/mthreads/device.go``).
"""

from hami_core.backend import package_version

__version__ = package_version("hami-mthreads")

BACKEND_NAME = "mthreads"
VENDOR = "Mthreads"

__all__ = ["BACKEND_NAME", "VENDOR", "__version__"]
