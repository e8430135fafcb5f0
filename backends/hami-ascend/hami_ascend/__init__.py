"""hami-ascend: the Huawei Ascend NPU backend of hami (entry point ``ascend`` in
``hami.backends``).

One vendor key per chip model (``Ascend910A``, ``Ascend910B2``, ``Ascend910B3``,
``Ascend910B4``, ``Ascend910B4-1``, ``Ascend310P``, ``Ascend910C``), as HAMi's Ascend
support registers them (PROTOCOL.md §1-3). The vendor logic lives in plain modules
(``models``, ``requests``, ``admission``, ``fit``, ``score``, ``npusmi``, ``discover``,
``allocate``, ``runtime_info``) that tests use without pluggy; ``plugin`` holds only thin hook
implementations.
"""

from hami_core.backend import package_version

__version__ = package_version("hami-ascend")

BACKEND_NAME = "ascend"

__all__ = ["BACKEND_NAME", "__version__"]
