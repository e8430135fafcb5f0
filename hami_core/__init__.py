"""hami-core: the vendor-neutral core of hami, GPU sharing for Kubernetes.

The core defines the hook specifications every vendor backend implements
(``hami_core.plugin``), the domain model (``hami_core.model``), the wire codecs of
HAMi's annotation protocol (``hami_core.protocol``) and the components built on them.
It never imports a vendor package: backends are found through the ``hami.backends``
entry-point group.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hami-core")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
