"""What discovery states in the inventory: scaled capacity (PROTOCOL.md §2); the devices
a node's register annotation states, read as the core reads them (for a backend's
``hami_node_devices`` that adds facts of its own); and the devices HAMi reads from a
node's ``status.capacity`` for vendors whose own device plugin publishes no inventory
annotation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import attrs

from hami_core.errors import AnnotationError, QuantityError
from hami_core.model import DeviceInfo
from hami_core.protocol.config import VendorConfig
from hami_core.protocol.inventory import MAX_NODE_ANNOTATION_BYTES, decode_inventory
from hami_core.protocol.quantity import parse_quantity_int

from .requests import annotations_of

__all__ = [
    "MAX_NODE_ANNOTATION_BYTES",
    "WHOLE_CORES_PCT",
    "capacity_quantities",
    "decode_inventory",
    "inventory_device",
    "numbered_devices",
    "registered_devices",
    "scaled",
]

#: The compute of one whole device before scaling, percent.
WHOLE_CORES_PCT = 100


def scaled(value: int, factor: float) -> int:
    """``value`` x ``factor``, rounded down: the one rounding of every backend's scaling.

    HAMi converts the scaled float to an integer with Go's conversion, which truncates
    (``uint64(float64(total) * memoryScaling)``, ``pkg/device/nvidia``); a factor of
    1.257 on 100 % therefore gives 125 on every node and vendor. The product is taken on
    the factor's decimal form (``1.1`` x 100 is 110, not 110.00000000000001, and ``0.29``
    x 100 is 29, not 28) so the configuration means what it says.
    """
    return math.floor(Decimal(value) * Decimal(repr(factor)))


def inventory_device(
    config: VendorConfig,
    *,
    uuid: str,
    vendor: str,
    memory_mib: int,
    cores_pct: int = WHOLE_CORES_PCT,
    split_count: int | None = None,
    model: str = "",
    index: int = 0,
    numa: int = 0,
    mode: str = "hami-core",
    healthy: bool = True,
    node_local: Mapping[str, str] | None = None,
) -> DeviceInfo:
    """A discovered device as the inventory states it: ``memory_mib`` (physical MiB) and
    ``cores_pct`` (physical percent) scaled by ``deviceMemoryScaling`` /
    ``deviceCoreScaling``, ``split_count`` defaulting to ``deviceSplitCount``."""
    return DeviceInfo(
        uuid=uuid,
        vendor=vendor,
        model=model,
        index=index,
        split_count=config.split_count if split_count is None else split_count,
        memory_mib=scaled(memory_mib, config.memory_scaling),
        cores_pct=scaled(cores_pct, config.core_scaling),
        numa=numa,
        mode=mode,
        healthy=healthy,
        node_local=dict(node_local or {}),
    )


def capacity_quantities(node: Mapping[str, Any], maxima: Mapping[str, int]) -> list[int] | None:
    """The node's ``status.capacity`` values of the resources named in ``maxima``, in its
    order, as whole numbers: what a vendor's own device plugin advertises and HAMi 2.10
    reads as the node's devices (``GetNodeDevices`` of Cambricon, Moore Threads, AWS
    Neuron, Enflame ``GCU``, MetaX ``Metax-GPU``).

    Args:
        node: a v1.Node.
        maxima: resource name -> the largest value accepted (a device count is bounded
            so that a bad capacity cannot make millions of devices).

    Returns:
        The values (a resource after the first that is absent reads 0); None when the
        node's capacity does not name the first resource (the node has none of them):
        ``{"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4"}`` -> ``[2, 4]``.

    Raises:
        AnnotationError: a value is not a whole number from 0 to its maximum; the
            message names the node and the resource (the node is then unregistered for
            the vendor, other nodes unaffected).
    """
    capacity = (node.get("status") or {}).get("capacity") or {}
    names = list(maxima)
    if not names or names[0] not in capacity:
        return None
    try:
        return [
            parse_quantity_int(capacity.get(n, 0), resource=n, maximum=maxima[n]) for n in names
        ]
    except QuantityError as exc:
        name = (node.get("metadata") or {}).get("name", "")
        raise AnnotationError(f"node {name}: status.capacity {exc}") from None


def numbered_devices(
    node: Mapping[str, Any],
    vendor: str,
    count: int,
    *,
    word: str = "",
    split_count: int,
    memory_mib: int,
    cores_pct: int,
    custom: tuple[tuple[str, str], ...] = (),
) -> list[DeviceInfo]:
    """``count`` alike devices of ``vendor`` as HAMi registers the devices it reads from a
    node's capacity: device ``i`` is ``<node>-<word>-<i>`` (``word`` defaults to the vendor
    key: ``n1-GCU-0``; Cambricon's ``n1-cambricon-mlu-0``), model the vendor key, index
    ``i``, NUMA 0, healthy, with the given sharers, memory (MiB), compute (in the vendor's
    cores unit) and custom facts."""
    prefix = f"{(node.get('metadata') or {}).get('name', '')}-{word or vendor}"
    first = DeviceInfo(uuid=f"{prefix}-0", vendor=vendor, model=vendor, custom=custom)
    first = attrs.evolve(first, split_count=split_count, memory_mib=memory_mib, cores_pct=cores_pct)
    return [attrs.evolve(first, index=i, uuid=f"{prefix}-{i}") for i in range(count)]


def registered_devices(
    node: Mapping[str, Any], register_annotation: str, *, vendor: str
) -> tuple[DeviceInfo, ...] | None:
    """The devices of ``vendor`` that ``node``'s ``register_annotation`` states
    (``hami.io/node-<x>-register``, PROTOCOL.md §2, JSON or legacy form), decoded as the
    core decodes them; None without the annotation, or with one that is not a string or
    is over ``MAX_NODE_ANNOTATION_BYTES`` (the core then reads it and reports why).

    Raises:
        AnnotationError: a malformed inventory (the decoder's message names the node).
    """
    value = annotations_of(node).get(register_annotation)
    if not isinstance(value, str) or len(value) > MAX_NODE_ANNOTATION_BYTES:
        return None
    name = str((node.get("metadata") or {}).get("name", ""))
    return decode_inventory(value, node=name, vendor=vendor)
