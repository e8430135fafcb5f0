"""hami-biren: the Biren backend of hami (entry point ``biren``).

Vendor key ``Biren``; resource ``birentech.com/gpu`` (devices, shared by count); inventory
``hami.io/node-biren-register`` written by HAMi's biren-device-plugin (PROTOCOL.md §1b,
HAMi 2.10 ``pkg/device/biren/device.go``, ``docs/biren-support.md``).
"""

from hami_core.backend import package_version

__version__ = package_version("hami-biren")

BACKEND_NAME = "biren"
VENDOR = "Biren"

__all__ = ["BACKEND_NAME", "VENDOR", "__version__"]
