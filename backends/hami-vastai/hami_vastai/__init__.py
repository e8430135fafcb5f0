"""hami-vastai: the Vastai backend of hami (entry point ``vastai``).

Vendor key ``Vastai``; resource ``vastaitech.com/va`` (devices, shared by count);
inventory ``hami.io/node-va-register`` written by Vastai's device plugin; in die mode
(``customInfo.DeviceStrategy = die``) each device is a die of an AI card (``AIC``) and
several dies are taken from as few cards as possible (PROTOCOL.md §1b, HAMi 2.10
``pkg/device/vastai/device.go``).
"""

from hami_core.backend import package_version

__version__ = package_version("hami-vastai")

BACKEND_NAME = "vastai"
VENDOR = "Vastai"

__all__ = ["BACKEND_NAME", "VENDOR", "__version__"]
