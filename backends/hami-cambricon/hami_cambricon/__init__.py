"""hami-cambricon: the Cambricon MLU backend of hami (entry point ``cambricon`` in
``hami.backends``).

The vendor logic lives in plain modules (``requests``, ``admission``, ``fit``, ``score``,
``allocate``, ``discover``) that tests use without pluggy; ``plugin`` holds only thin
hook implementations. Vendor key ``MLU`` (PROTOCOL.md §1), memory in units of 256 MiB.
"""

from hami_core.backend import package_version

__version__ = package_version("hami-cambricon")

VENDOR = "MLU"

__all__ = ["VENDOR", "__version__"]
