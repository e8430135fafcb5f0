"""Moore Threads resource names, annotation keys and constants.

From HAMi 2.10 ``pkg/device/mthreads/device.go``: resources ``mthreads.com/vgpu``,
``mthreads.com/sgpu-memory`` (``MemoryFactor`` 512 MiB per unit), ``mthreads.com/sgpu-core``
(``coresPerMthreadsGPU`` 16 per GPU, ``memoryPerMthreadsGPU`` 96 units per GPU); pod
device lists ``hami.io/mthreads-vgpu-devices-to-allocate`` / ``-allocated``; UUID filters
``mthreads.ai/use-gpuuuid`` / ``mthreads.ai/nouse-gpuuuid``; bind annotations
``mthreads.com/gpu-index``, ``mthreads.com/predicate-node``, ``mthreads.com/predicate-time``
that Moore Threads' device plugin reads. HAMi has no register annotation for this vendor
(it reads node capacity); ``hami.io/node-mthreads-register`` is where our own device
plugin publishes, and is read only when the capacity is absent.
"""

from __future__ import annotations

from typing import Final

from hami_core.backend import (
    SGPU_CORES,
    DeviceTypeInfo,
    ResourceNames,
    VendorConfig,
    hami_annotation_keys,
    resource_names,
    uuid_filter_keys,
)

from . import VENDOR

#: MiB per unit of ``mthreads.com/sgpu-memory``.
MEMORY_UNIT_MIB: Final = 512
#: sGPU cores of one GPU (``mthreads.com/sgpu-core`` of a whole GPU).
CORES_PER_GPU: Final = 16
#: ``mthreads.com/sgpu-memory`` units of a whole GPU, as HAMi's webhook writes them.
MEMORY_UNITS_PER_GPU: Final = 96
#: The only memory values a one-GPU request may state (HAMi ``legalMemoryslices``).
LEGAL_MEMORY_UNITS: Final = (2, 4, 8, 16, 32, 64, 96)
#: Containers that may share one GPU (HAMi registers ``Count`` 100).
SPLIT_COUNT: Final = 100

DEFAULT_RESOURCES: Final = ResourceNames(
    count="mthreads.com/vgpu",
    memory="mthreads.com/sgpu-memory",
    cores="mthreads.com/sgpu-core",
    memory_unit_mib=MEMORY_UNIT_MIB,
)

DEVICE_TYPE: Final = DeviceTypeInfo(
    vendor=VENDOR,
    resources=DEFAULT_RESOURCES,
    **hami_annotation_keys("mthreads", "mthreads-vgpu"),
    cores_unit=SGPU_CORES,  # 16 to a GPU, not percent
    # what allocate.py sets: the GPUs Moore Threads' container toolkit exposes
    allocate_env=("MTHREADS_VISIBLE_DEVICES",),
    # Moore Threads' container toolkit (runtime "mthreads") exposes the GPUs this names
    # from the container's env (its "GPU Enumeration"); no value for none is documented:
    # denied in a container asking for no Moore Threads GPU
    visible_devices_env=(("MTHREADS_VISIBLE_DEVICES", None),),
)

USE_UUID, NOUSE_UUID = uuid_filter_keys("mthreads.ai")
ASSIGNED_INDEX: Final = "mthreads.com/gpu-index"
ASSIGNED_NODE: Final = "mthreads.com/predicate-node"
PREDICATE_TIME: Final = "mthreads.com/predicate-time"
REQUEST_GPU_NUM: Final = "mthreads.com/request-gpu-num"


def resources(config: VendorConfig) -> ResourceNames:
    """The resource names in force: the defaults with the section's overrides."""
    return resource_names(DEFAULT_RESOURCES, config)
