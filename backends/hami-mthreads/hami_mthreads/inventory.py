"""A node's Moore Threads GPUs from its capacity, as HAMi 2.10 reads them.

HAMi's ``GetNodeDevices`` (``pkg/device/mthreads/device.go``) reads the node's
``status.capacity`` that Moore Threads' device plugin advertises: ``mthreads.com/sgpu-core``
(16 per GPU) and ``mthreads.com/sgpu-memory`` (512 MiB units, all GPUs). GPU ``i`` of
``ceil(cores / 16)`` is ``<node>-mthreads-<i>`` with ``count`` 100, ``devcore`` 16 and
``devmem`` = memory units x 512 x 16 / cores MiB (HAMi's test: 1 core, 1 unit -> 8192).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import DeviceInfo, VendorConfig, capacity_quantities, numbered_devices

from . import VENDOR
from .names import CORES_PER_GPU, MEMORY_UNIT_MIB, SPLIT_COUNT, resources


def node_devices(node: Mapping[str, Any], config: VendorConfig) -> list[DeviceInfo] | None:
    """The GPUs the node's capacity states, or None when it states no sGPU cores (then
    our own device plugin's register annotation is read instead).

    Raises:
        AnnotationError: a capacity value is not a whole number.
    """
    names = resources(config)
    stated = capacity_quantities(node, {names.cores: 2**40, names.memory: 2**40})
    if not stated or not stated[0]:
        return None
    cores, memory = stated
    return numbered_devices(
        node,
        VENDOR,
        -(-cores // CORES_PER_GPU),
        word="mthreads",
        split_count=SPLIT_COUNT,
        memory_mib=memory * MEMORY_UNIT_MIB * CORES_PER_GPU // cores,
        cores_pct=CORES_PER_GPU,
    )
