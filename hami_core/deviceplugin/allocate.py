"""The end of a pod's allocation: its ``hami.io/bind-phase`` and the node lock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.cluster.base import ClusterStore
from hami_core.facts.nodelock import release_node_lock
from hami_core.protocol import annotations as keys


def finish_allocation(
    store: ClusterStore, pod: Mapping[str, Any], *, node: str, success: bool
) -> None:
    """Set ``hami.io/bind-phase`` to ``success`` / ``failed`` and release the node lock,
    as the device plugin does after ``Allocate`` (PROTOCOL.md §3, §4)."""
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
    phase = keys.BIND_PHASE_SUCCESS if success else keys.BIND_PHASE_FAILED
    try:
        store.patch_pod_metadata(namespace, name, annotations={keys.BIND_PHASE: phase})
    finally:
        # Whatever became of the phase, the node must not stay locked for 5 minutes.
        release_node_lock(store, node, namespace=namespace, pod=name)
