"""hami-amd: the AMD ROCm backend of hami (entry point ``amd``).

Vendor key ``AMD``; resources ``amd.com/gpu``, ``amd.com/gpumem`` (MiB),
``amd.com/gpucores`` (percent of the GPU's compute units, 1..100, default 100);
inventory ``hami.io/node-amd-register`` (JSON, ``devcore`` = the GPU's CU count). Device
lists carry CU counts, which the device plugin turns into ``HSA_CU_MASK`` ranges
(PROTOCOL.md §1b; HAMi 2.10 ``pkg/device/amd/device.go``, ``docs/develop/amd-vgpu.md``).
"""

from hami_core.backend import package_version

__version__ = package_version("hami-amd")

BACKEND_NAME = "amd"
VENDOR = "AMD"

__all__ = ["BACKEND_NAME", "VENDOR", "__version__"]
