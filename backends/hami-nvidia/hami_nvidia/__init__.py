"""hami-nvidia: the NVIDIA GPU backend of hami (entry point ``nvidia`` in ``hami.backends``).

The vendor logic lives in plain classes (``requests``, ``fit``, ``allocate``) that tests
use without pluggy; ``plugin`` holds only thin hook implementations.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hami-nvidia")
except PackageNotFoundError:
    __version__ = "0.0.0+unknown"

VENDOR = "NVIDIA"

__all__ = ["VENDOR", "__version__"]
