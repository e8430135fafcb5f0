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
    AnnotationError,
    DeviceInfo,
    QuantityError,
    VendorConfig,
    parse_quantity_int,
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
    capacity = (node.get("status") or {}).get("capacity") or {}
    if names.cores not in capacity:
        return None
    try:
        cores = parse_quantity_int(capacity[names.cores], resource=names.cores)
        memory = parse_quantity_int(capacity.get(names.memory, 0), resource=names.memory)
    except QuantityError as exc:
        raise AnnotationError(f"status.capacity: {exc}") from None
    if cores == 0:
        return []
    per_card_mib = memory * MEMORY_UNIT_MIB * CORES_PER_CARD // cores
    name = str(meta.get("name", ""))
    cards = -(-cores // CORES_PER_CARD)  # HAMi: for i*100 < cores
    return [
        DeviceInfo(
            uuid=f"{name}-cambricon-mlu-{i}",
            vendor=VENDOR,
            model=VENDOR,
            index=i,
            split_count=SLICES_PER_CARD,
            memory_mib=per_card_mib,
            cores_pct=CORES_PER_CARD,
            numa=0,
            healthy=True,
        )
        for i in range(cards)
    ]
