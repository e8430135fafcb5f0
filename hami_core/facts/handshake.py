"""The scheduler's side of the node handshake (PROTOCOL.md §2).

Every period the leader writes ``Requesting_<now>`` (UTC) on each node whose device
plugin has answered (``Reported_...``) or that has none yet; a device plugin that is
alive answers ``Reported_<time>`` within seconds. A node still ``Requesting_`` after
60 s with an allocatable count of 0 is then reported unregistered by ``read_node``.
"""

from __future__ import annotations

import datetime as dt
import logging

from hami_core.cluster.base import ClusterStore
from hami_core.errors import AnnotationError, HamiError
from hami_core.model import DeviceTypeInfo
from hami_core.protocol.handshake import HandshakeState, decode_handshake, encode_handshake

log = logging.getLogger(__name__)


def request_handshakes(
    store: ClusterStore, device_types: tuple[DeviceTypeInfo, ...], *, now: dt.datetime
) -> list[tuple[str, str]]:
    """Write ``Requesting_<now>`` where the last answer was ``Reported_`` (or absent).

    A node already ``Requesting_`` keeps its older time (that is the evidence of a dead
    plugin); a node marked ``Deleted_`` is left alone. Only nodes carrying the vendor's
    inventory annotation are touched.

    Returns:
        ``(node, annotation key)`` for every write made.
    """
    written = []
    for node in store.list_nodes():
        meta = node.get("metadata") or {}
        ann = meta.get("annotations") or {}
        changes: dict[str, str | None] = {}
        for dtype in device_types:
            if dtype.register_annotation not in ann:
                continue
            current = ann.get(dtype.handshake_annotation)
            state = None
            if current:
                try:
                    state = decode_handshake(current).state
                except AnnotationError:
                    state = None  # HAMi's local-time values and the like: ask again
            if state in (HandshakeState.REQUESTING, HandshakeState.DELETED):
                continue
            changes[dtype.handshake_annotation] = encode_handshake(HandshakeState.REQUESTING, now)
        if changes:
            try:
                store.patch_node_annotations(str(meta.get("name")), changes)
                written += [(str(meta.get("name")), k) for k in changes]
            except HamiError as exc:
                log.warning("handshake on node %s: %s", meta.get("name"), exc)
    return written
