"""MLUs of a node run by Cambricon's own device plugin: read from the node's capacity.

HAMi 2.10 (``pkg/device/cambricon/device.go`` ``GetNodeDevices``) does not read an
annotation for Cambricon: the vendor's device plugin advertises the sMLU resources in
``status.capacity`` and HAMi derives the cards from them: 100 ``vcore`` make one card;
card ``i`` has id ``<node>-cambricon-mlu-<i>``, 100 slices, 100 % cores, NUMA 0, healthy,
and ``vmemory x 256 MiB x 100 / vcore`` of memory. HAMi's test
``pkg/device/cambricon/device_test.go::Test_GetNodeDevices`` expects, for capacity
``vcore 1, vmemory 1`` on node ``test``, one card ``test-cambricon-mlu-0`` of 25600 MiB.

HAMi's older code read the annotation ``hami.io/node-mlu-register``; a node carrying it
is read from it (the core does that when this module answers None), so both work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    INT32_MAX,
    DeviceInfo,
    VendorConfig,
    capacity_quantities,
    numbered_devices,
    resource_names,
)

from . import VENDOR
from .names import DEFAULT_RESOURCES, DEVICE_TYPE, MEMORY_UNIT_MIB

#: Slices per card and cores per card, as HAMi registers capacity-read MLUs.
SLICES_PER_CARD = 100
CORES_PER_CARD = 100


def node_devices(node: Mapping[str, Any], config: VendorConfig) -> list[DeviceInfo] | None:
    """The MLUs of ``node`` from its capacity, or None where the register annotation is
    present (the core decodes it) or the node advertises no sMLU cores.

    Raises:
        AnnotationError: a capacity value is not a whole non-negative quantity (the node is
            then unregistered for MLU; other nodes are unaffected).
    """
    meta = node.get("metadata") or {}
    if DEVICE_TYPE.register_annotation in (meta.get("annotations") or {}):
        return None
    names = resource_names(DEFAULT_RESOURCES, config)
    stated = capacity_quantities(node, {names.cores: INT32_MAX, names.memory: INT32_MAX})
    if stated is None:
        return None
    cores, memory = stated
    if cores == 0:
        return []
    return numbered_devices(
        node,
        VENDOR,
        -(-cores // CORES_PER_CARD),  # HAMi: for i*100 < cores
        word="cambricon-mlu",
        split_count=SLICES_PER_CARD,
        memory_mib=memory * MEMORY_UNIT_MIB * CORES_PER_CARD // cores,
        cores_pct=CORES_PER_CARD,
    )
