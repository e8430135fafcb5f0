"""A node's devices as the scheduler sees them, read from its annotations (PROTOCOL.md §2)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.errors import AnnotationError, QuantityError
from hami_core.model import DeviceInfo, DeviceTypeInfo, NodeInfo
from hami_core.protocol.annotations import DEVICE_CORDON
from hami_core.protocol.handshake import decode_handshake
from hami_core.protocol.inventory import MAX_NODE_ANNOTATION_BYTES, decode_inventory
from hami_core.protocol.quantity import parse_quantity_int
from hami_core.protocol.topology import decode_link_scores

#: ``(vendor, node) -> devices``, or None to decode the register annotation
#: (``BackendManager.node_devices``, the ``hami_node_devices`` hook).
NodeDevicesReader = Callable[[str, Mapping[str, Any]], "list[DeviceInfo] | None"]

#: Largest link-score annotation decoded: the API server's cap on all of an object's
#: annotations, 256 KiB. Every pair of GPUs is listed both ways, about 47 bytes each with
#: NVIDIA's UUIDs: 64 KiB held 37 GPUs, and a larger node's devices were all unusable.
MAX_LINK_SCORE_BYTES = 256 * 1024

#: What a decoder may raise on hostile input besides ``AnnotationError``: Python's
#: int-string limit (``ValueError``, 4300 digits), nesting (``RecursionError``), and the
#: like. Any of them marks that one node's vendor unusable, never the whole request.
DECODE_ERRORS = (AnnotationError, ValueError, TypeError, RecursionError, MemoryError)


def _too_large(key: str, value: object, limit: int = MAX_NODE_ANNOTATION_BYTES) -> str | None:
    if not isinstance(value, str):
        return f"{key}: expected a string, got {type(value).__name__}"
    if len(value) > limit:
        return f"{key}: {len(value)} bytes, more than the {limit} read"
    return None


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

    A malformed inventory (anything a backend's ``reader`` raises included), or a
    handshake left ``Requesting_`` for over 60 s while the node's allocatable count is 0,
    marks that vendor unregistered on that node with the reason
    (``NodeInfo.unregistered``); the scheduler keeps serving other nodes.

    An unreadable *optional* annotation costs only what it describes (PROTOCOL.md §2):
    link scores are then left out (topology-aware placement ranks that vendor's devices
    by spread) and named in ``NodeInfo.ignored``; an unreadable handshake is no evidence
    of a dead device plugin; an unreadable node lock protects nothing. The one exception
    is ``hami.io/device-cordon`` too large to read: it may name any device, so none of
    the node's is handed out.
    """
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    ann: Mapping[str, str] = meta.get("annotations") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    devices: list[DeviceInfo] = []
    unregistered: dict[str, str] = {}
    ignored: dict[str, str] = {}
    for dtype in device_types:
        if reader is not None:
            try:
                own = reader(dtype.vendor, node)
            except Exception as exc:  # a backend's reading (BackendError wraps what it
                # raised on this node's garbage) marks that vendor here, never the caller
                unregistered[dtype.vendor] = _reason(exc)
                continue
            if own is not None:
                # The handshake liveness rule holds whoever decoded the devices (HAMi's
                # CheckHealth runs for every vendor: vastai/device_test.go Test_CheckHealth).
                stale = _stale_handshake(ann.get(dtype.handshake_annotation), now)
                if own and stale and _allocatable_zero(allocatable, dtype.resources.count):
                    unregistered[dtype.vendor] = f"{dtype.handshake_annotation}: {stale}"
                    continue
                repeated = _repeated(own, devices)
                if repeated:
                    unregistered[dtype.vendor] = f"{dtype.register_annotation}: {repeated}"
                    continue
                devices.extend(own)
                continue
        value = ann.get(dtype.register_annotation)
        if value is None:
            continue
        problem = _too_large(dtype.register_annotation, value)
        if problem:
            unregistered[dtype.vendor] = problem
            continue
        try:
            found = decode_inventory(value, node=name, vendor=dtype.vendor)
        except DECODE_ERRORS as exc:
            unregistered[dtype.vendor] = f"{dtype.register_annotation}: {_reason(exc)}"
            continue
        stale = _stale_handshake(ann.get(dtype.handshake_annotation), now)
        if stale and _allocatable_zero(allocatable, dtype.resources.count):
            unregistered[dtype.vendor] = f"{dtype.handshake_annotation}: {stale}"
            continue
        repeated = _repeated(found, devices)
        if repeated:
            unregistered[dtype.vendor] = f"{dtype.register_annotation}: {repeated}"
            continue
        devices.extend(found)
    link_scores: dict[str, dict[str, int]] = {}
    for dtype in device_types:
        key = dtype.link_score_annotation
        if not key or key not in ann or key in ignored:
            continue
        score_problem = _too_large(key, ann[key], MAX_LINK_SCORE_BYTES)
        if score_problem:
            ignored[key] = score_problem
            continue
        try:
            scores = decode_link_scores(ann[key], node=name)
        except DECODE_ERRORS as exc:
            # Optional: an unreadable one costs what it describes (topology-aware
            # placement on this node, which falls back to spread), never the devices.
            ignored[key] = _reason(exc)
            continue
        if dtype.vendor not in unregistered:
            link_scores.update(scores)
    cordon = ann.get(DEVICE_CORDON, "")
    if _too_large(DEVICE_CORDON, cordon):
        cordon = ""
        devices = []  # every device may be cordoned: none is safe to hand out
        for dtype in device_types:
            unregistered.setdefault(
                dtype.vendor, str(_too_large(DEVICE_CORDON, ann[DEVICE_CORDON]))
            )
    cordoned = frozenset(u.strip() for u in cordon.split(",") if u.strip())
    return NodeInfo(
        name=name,
        devices=tuple(devices),
        cordoned_uuids=cordoned,
        link_scores=link_scores,
        unregistered=unregistered,
        ignored=ignored,
    )


def _repeated(found: Sequence[DeviceInfo], before: Sequence[DeviceInfo]) -> str | None:
    """Why ``found`` cannot join a node's devices ``before``: a device ID listed twice
    (in ``found``, or already another vendor's on the node). Usage, allocations and
    the device plugin's IDs are all keyed by it, so the second device would be
    counted as the first (a pod of two devices could be given one GPU twice): the
    vendor is marked unregistered on that node rather than guessed at. None when
    every ID is new."""
    seen = {d.uuid for d in before}
    for d in found:
        if d.uuid in seen:
            return f"device {d.uuid} is listed twice"
        seen.add(d.uuid)
    return None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, AnnotationError):
        return str(exc)
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:200] + "..."
    return f"unreadable ({type(exc).__name__}: {text})"


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
