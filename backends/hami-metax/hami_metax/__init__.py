"""hami-metax: the MetaX backend of hami (entry point ``metax``).

Two vendor keys, as HAMi 2.10 (``pkg/device/metax``): ``Metax-GPU`` (whole GPUs,
``metax-tech.com/gpu``, inventory from node capacity, node scores from
``metax-tech.com/gpu.topology.losses`` / ``.scores``) and ``Metax-SGPU`` (shared GPUs,
``metax-tech.com/sgpu`` / ``vmemory`` in GiB / ``vcore`` percent, inventory from
``metax-tech.com/node-gpu-devices``, QoS policies and app classes as pod annotations).
"""

from hami_core.backend import package_version

__version__ = package_version("hami-metax")

BACKEND_NAME = "metax"
#: The vendor keys: whole GPUs (``Metax-GPU``) and shared GPUs (``Metax-SGPU``).
VENDORS = (GPU, SGPU) = ("Metax-GPU", "Metax-SGPU")

__all__ = ["BACKEND_NAME", "GPU", "SGPU", "VENDORS", "__version__"]
