"""hami-enflame: the Enflame backend of hami (entry point ``enflame``).

Two vendor keys, as HAMi 2.10 (``pkg/device/enflame``): ``GCU`` (whole GCUs,
``enflame.com/gcu``, from node capacity, ``gcu.go``) and ``Enflame`` (DRS slices,
``enflame.com/drs-gcu`` or ``enflame.com/gcu-memory`` / ``enflame.com/gcu-core``, matched
to the DRS profiles of ``enflame.com/gcu-drs-capacity``, ``device.go``).
"""

from hami_core.backend import package_version

__version__ = package_version("hami-enflame")

BACKEND_NAME = "enflame"
#: The vendor keys: whole GCUs (``GCU``) and DRS slices (``Enflame``).
VENDORS = (GCU, DRS) = ("GCU", "Enflame")

__all__ = ["BACKEND_NAME", "DRS", "GCU", "VENDORS", "__version__"]
