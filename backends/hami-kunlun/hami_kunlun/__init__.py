"""hami-kunlun: the Kunlunxin XPU backend of hami (entry point ``kunlun`` in
``hami.backends``).

The vendor logic lives in plain modules (``requests``, ``admission``, ``fit``,
``topology``, ``score``, ``allocate``, ``discover``) that tests use without pluggy;
``plugin`` holds only thin hook implementations. Vendor key ``XPU`` (PROTOCOL.md §1).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hami-kunlun")
except PackageNotFoundError:
    __version__ = "0.0.0+unknown"

VENDOR = "XPU"

__all__ = ["VENDOR", "__version__"]
