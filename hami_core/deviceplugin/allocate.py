"""From a bound pod's allocation annotations to what kubelet adds to each container."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.cluster.base import ClusterStore
from hami_core.errors import AnnotationError
from hami_core.model import ContainerAllocation, DeviceInfo
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.pods import containers
from hami_core.scheduling.nodelock import release_node_lock


def container_allocations(
    pod: Mapping[str, Any],
    manager: BackendManager,
    vendor: str,
    *,
    node_devices: Sequence[DeviceInfo] = (),
) -> list[tuple[str, ContainerAllocation]]:
    """``(container name, allocation)`` for every container of ``pod``, in wire order
    (init containers first), from its ``<vendor>`` ``*-devices-to-allocate`` annotation.

    Args:
        node_devices: the node's devices as ``hami_allocate`` receives them (the device
            plugin: discovered; ``hami simulate``: the inventory, without node-local facts).

    Raises:
        AnnotationError: the annotation is missing, malformed, or has another number of
            entries than the pod has containers.
    """
    dtype = manager.device_type(vendor)
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(dtype.to_allocate_annotation)
    if value is None:
        raise AnnotationError(f"pod has no {dtype.to_allocate_annotation} annotation")
    per_container = decode_pod_devices(value)
    specs = list(containers(pod))
    if len(per_container) != len(specs):
        raise AnnotationError(
            f"{dtype.to_allocate_annotation} has {len(per_container)} entries for {len(specs)} containers"
        )
    return [
        (
            str(spec.get("name", "")),
            manager.allocate(vendor, pod, spec, devices, node_devices=node_devices),
        )
        for (spec, _, _), devices in zip(specs, per_container, strict=True)
    ]


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
