"""hami-enflame: the Enflame backend of hami (entry point ``enflame``).

Two vendor keys, as HAMi 2.10 (``pkg/device/enflame``): ``GCU`` (whole GCUs,
``enflame.com/gcu``, from node capacity, ``gcu.go``) and ``Enflame`` (DRS slices,
``enflame.com/drs-gcu`` or ``enflame.com/gcu-memory`` / ``enflame.com/gcu-core``, matched
to the DRS profiles of ``enflame.com/gcu-drs-capacity``, ``device.go``).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hami-enflame")
except PackageNotFoundError:
    __version__ = "0.0.0+unknown"

BACKEND_NAME = "enflame"
GCU = "GCU"
DRS = "Enflame"
VENDORS = (GCU, DRS)

__all__ = ["BACKEND_NAME", "DRS", "GCU", "VENDORS", "__version__"]
