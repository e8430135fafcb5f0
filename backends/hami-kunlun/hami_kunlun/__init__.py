"""hami-kunlun: the Kunlunxin XPU backend of hami (entry point ``kunlun`` in
``hami.backends``).

The vendor logic lives in plain modules (``requests``, ``admission``, ``fit``,
``topology``, ``score``, ``allocate``, ``discover``) that tests use without pluggy;
``plugin`` holds only thin hook implementations. Vendor key ``XPU`` (PROTOCOL.md §1).
"""

from hami_core.backend import package_version

__version__ = package_version("hami-kunlun")

VENDOR = "XPU"

__all__ = ["VENDOR", "__version__"]
