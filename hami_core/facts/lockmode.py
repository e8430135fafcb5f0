"""Does a bind on this node need the node lock? (PROTOCOL.md §4)

The lock tells a device plugin which pod an ``Allocate`` (which names no pod) is for.
A device plugin that tells the pods apart itself, through kubelet's PodResources API
(kubelet admits pods one at a time and lists the one being admitted with no devices
yet for the container being allocated), says so on the Node beside its handshake
answer (``protocol.handshake.identifies_pods``). A pod binds without a lock only when
every vendor it asks for on the node has such a device plugin; anywhere else (HAMi's
device plugin, ours without kubelet's socket, a capability gone stale) the bind takes
the lock exactly as HAMi does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hami_core.model import DeviceTypeInfo
from hami_core.protocol.handshake import identifies_pods, podresources_key


def needs_node_lock(node: Mapping[str, Any], device_types: Iterable[DeviceTypeInfo]) -> bool:
    """True unless the device plugin of every one of ``device_types`` (the vendors the
    pod is given devices of) on ``node`` (a Node object) identifies pods through
    PodResources. No vendor at all: False (nothing to allocate)."""
    ann: Mapping[str, str] = (node.get("metadata") or {}).get("annotations") or {}
    return any(
        not identifies_pods(
            ann.get(podresources_key(t.handshake_annotation)), ann.get(t.handshake_annotation)
        )
        for t in device_types
    )


__all__ = ["needs_node_lock"]
