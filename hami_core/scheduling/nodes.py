"""A node's devices as the scheduler sees them, read from its annotations (PROTOCOL.md §2)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.errors import AnnotationError, QuantityError
from hami_core.model import DeviceInfo, DeviceTypeInfo, NodeInfo
from hami_core.protocol.annotations import DEVICE_CORDON, NVIDIA_NODE_SCORE
from hami_core.protocol.handshake import decode_handshake
from hami_core.protocol.inventory import decode_inventory
from hami_core.protocol.quantity import parse_quantity_int
from hami_core.protocol.topology import decode_link_scores

#: ``(vendor, node) -> devices``, or None to decode the register annotation
#: (``BackendManager.node_devices``, the ``hami_node_devices`` hook).
NodeDevicesReader = Callable[[str, Mapping[str, Any]], "list[DeviceInfo] | None"]


def read_node(
    node: Mapping[str, Any],
    device_types: tuple[DeviceTypeInfo, ...],
    *,
    now: dt.datetime,
    reader: NodeDevicesReader | None = None,
) -> NodeInfo:
    """Decode a node's inventory for every vendor; never raises for bad annotations.

    ``reader`` (the backends' ``hami_node_devices``) is asked first for each vendor: a
    vendor HAMi reads from the node's capacity or from its own device plugin's
    annotation answers there; ``None`` means the register annotation is decoded.

    A malformed inventory, or a handshake left ``Requesting_`` for over 60 s while the
    node's allocatable count is 0, marks that vendor unregistered on that node with
    the reason (``NodeInfo.unregistered``); the scheduler keeps serving other nodes.
    """
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    ann: Mapping[str, str] = meta.get("annotations") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    devices: list[DeviceInfo] = []
    unregistered: dict[str, str] = {}
    for dtype in device_types:
        if reader is not None:
            try:
                own = reader(dtype.vendor, node)
            except AnnotationError as exc:
                unregistered[dtype.vendor] = str(exc)
                continue
            if own is not None:
                devices.extend(own)
                continue
        value = ann.get(dtype.register_annotation)
        if value is None:
            continue
        try:
            found = decode_inventory(value, node=name, vendor=dtype.vendor)
        except AnnotationError as exc:
            unregistered[dtype.vendor] = f"{dtype.register_annotation}: {exc}"
            continue
        stale = _stale_handshake(ann.get(dtype.handshake_annotation), now)
        if stale and _allocatable_zero(allocatable, dtype.resources.count):
            unregistered[dtype.vendor] = f"{dtype.handshake_annotation}: {stale}"
            continue
        devices.extend(found)
    link_scores: dict[str, dict[str, int]] = {}
    if NVIDIA_NODE_SCORE in ann:
        try:
            link_scores = decode_link_scores(ann[NVIDIA_NODE_SCORE], node=name)
        except AnnotationError:
            link_scores = {}  # topology is a preference: without it, fall back to spread
    cordoned = frozenset(u.strip() for u in ann.get(DEVICE_CORDON, "").split(",") if u.strip())
    return NodeInfo(
        name=name,
        devices=tuple(devices),
        cordoned_uuids=cordoned,
        link_scores=link_scores,
        unregistered=unregistered,
    )


def _stale_handshake(value: str | None, now: dt.datetime) -> str | None:
    if not value:
        return None
    try:
        hs = decode_handshake(value)
    except AnnotationError:
        return None  # HAMi's local-time or other writers: not evidence of a dead plugin
    return (
        f"device plugin has not answered since {hs.at:%Y-%m-%d %H:%M:%S} UTC"
        if hs.stale(now)
        else None
    )


def _allocatable_zero(allocatable: Mapping[str, Any], resource: str) -> bool:
    if resource not in allocatable:
        return True
    try:
        return parse_quantity_int(allocatable[resource], resource=resource, maximum=2**62) == 0
    except QuantityError:
        return True
