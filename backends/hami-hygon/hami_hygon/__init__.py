"""hami-hygon: the Hygon DCU backend of hami (entry point ``hygon`` in ``hami.backends``).

Vendor key ``DCU``, resources ``hygon.com/dcunum`` / ``hygon.com/dcumem`` (MiB) /
``hygon.com/dcucores`` (percent, default 100), inventory ``hami.io/node-dcu-register``
(PROTOCOL.md §1-3, HAMi 2.10 ``pkg/device/hygon``). The vendor logic lives in plain
modules (``requests``, ``admission``, ``fit``, ``score``, ``hysmi``, ``discover``, ``vdev``,
``allocate``) that tests use without pluggy; ``plugin`` holds only thin hook
implementations.
"""

from hami_core.backend import package_version

__version__ = package_version("hami-hygon")

BACKEND_NAME = "hygon"
VENDOR = "DCU"

__all__ = ["BACKEND_NAME", "VENDOR", "__version__"]
