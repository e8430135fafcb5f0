"""hami-nvidia: the NVIDIA GPU backend of hami (entry point ``nvidia`` in ``hami.backends``).

The vendor logic lives in plain classes (``requests``, ``fit``, ``allocate``) that tests
use without pluggy; ``plugin`` holds only thin hook implementations.
"""

from hami_core.backend import package_version

__version__ = package_version("hami-nvidia")

VENDOR = "NVIDIA"

__all__ = ["VENDOR", "__version__"]
