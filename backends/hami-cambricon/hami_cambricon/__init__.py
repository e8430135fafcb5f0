"""hami-cambricon: the Cambricon MLU backend of hami (entry point ``cambricon`` in
``hami.backends``).

The vendor logic lives in plain modules (``requests``, ``admission``, ``fit``, ``score``,
``allocate``, ``discover``) that tests use without pluggy; ``plugin`` holds only thin
hook implementations. Vendor key ``MLU`` (PROTOCOL.md §1), memory in units of 256 MiB.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hami-cambricon")
except PackageNotFoundError:
    __version__ = "0.0.0+unknown"

VENDOR = "MLU"

__all__ = ["VENDOR", "__version__"]
