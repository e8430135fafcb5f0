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

from collections.abc import Mapping
from typing import Any, Final

from hami_core.backend import (
    SGPU_CORES,
    ConfigError,
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
#: ``mthreads.com/sgpu-memory`` units of a whole MTT S4000 (48 GiB), HAMi's
#: ``defaultMemoryPerMthreadsGPU`` and the default of ``memoryPerCard``.
MEMORY_UNITS_PER_GPU: Final = 96
#: The section's key (HAMi after 2.10, ``MthreadsConfig.MemoryPerCard``, chart value
#: ``devices.mthreads.memoryPerCard``): the memory of one card, in 512 MiB units, of each
#: card model in the cluster, e.g. ``[96, 160]`` for MTT S4000 and MTT S5000 (80 GiB).
MEMORY_PER_CARD: Final = "memoryPerCard"
OPTION_DEFAULTS: Final[Mapping[str, Any]] = {MEMORY_PER_CARD: [MEMORY_UNITS_PER_GPU]}
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


def memory_per_card(config: VendorConfig) -> tuple[int, ...]:
    """The card sizes ``memoryPerCard`` states, 512 MiB units, ascending.

    Raises:
        ConfigError: ``mthreads.memoryPerCard`` is not a non-empty list of whole numbers
            above 0 (HAMi reads it as ``[]int64``).
    """
    raw = config.options.get(MEMORY_PER_CARD, [MEMORY_UNITS_PER_GPU])
    if (
        not isinstance(raw, list)
        or not raw
        or not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**22 for v in raw)
    ):
        raise ConfigError(
            f"mthreads.{MEMORY_PER_CARD}: expected a non-empty list of card memory sizes in "
            f"{MEMORY_UNIT_MIB} MiB units, each a whole number above 0 (e.g. [96, 160]), "
            f"got {str(raw)[:80]}"
        )
    return tuple(sorted(set(raw)))


def legal_memory_units(capacities: tuple[int, ...]) -> tuple[int, ...]:
    """The memory values a one-GPU request may state: for each card size, the powers of
    two from 2 below it and the size itself, over all sizes (HAMi's
    ``buildLegalMemorySliceUnion``: a mixed cluster admits what any model takes, and fit
    then holds the request to the chosen GPU's real memory). ``(96,)`` -> 2, 4, 8, 16,
    32, 64, 96; ``(160,)`` -> 2, ..., 128, 160."""
    legal: set[int] = set()
    for size in capacities:
        legal.add(size)
        power = 2
        while power < size:
            legal.add(power)
            power *= 2
    return tuple(sorted(legal))


def resources(config: VendorConfig) -> ResourceNames:
    """The resource names in force: the defaults with the section's overrides."""
    return resource_names(DEFAULT_RESOURCES, config)
