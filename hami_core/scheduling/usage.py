"""Device usage recomputed from the allocations of live pods (never a drifting counter).

A pod's charge per device follows the init-container rule of ``hami_core.model.charge``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from hami_core.errors import AnnotationError
from hami_core.model import (
    DeviceTypeInfo,
    DeviceUsage,
    NodeInfo,
    PodDevices,
    device_charges,
)
from hami_core.protocol.devicelist import decode_pod_devices

#: Pods in these phases hold no devices.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def is_live(pod: Mapping[str, Any]) -> bool:
    """True unless the pod has finished (Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def pod_allocation(
    pod: Mapping[str, Any], device_types: Iterable[DeviceTypeInfo]
) -> dict[str, PodDevices]:
    """Vendor key -> the pod's device list, from its ``*-devices-allocated`` annotations.

    Raises:
        AnnotationError: a device list is malformed (names the pod and the key).
    """
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") or {}
    out = {}
    for dtype in device_types:
        value = ann.get(dtype.allocated_annotation)
        if value is None:
            continue
        try:
            out[dtype.vendor] = decode_pod_devices(value)
        except AnnotationError as exc:
            raise AnnotationError(
                f"pod {meta.get('namespace')}/{meta.get('name')}: {dtype.allocated_annotation}: {exc}"
            ) from None
    return out


def node_usage(
    node: NodeInfo,
    pods: Iterable[Mapping[str, Any]],
    device_types: Iterable[DeviceTypeInfo],
    *,
    exclude_uid: str | None = None,
    broken: list[str] | None = None,
) -> dict[str, DeviceUsage]:
    """Usage of every device of ``node`` by the live pods given.

    Args:
        pods: pods assigned to the node (others are ignored by device uuid anyway).
        exclude_uid: a pod whose own allocation must not count (re-fitting at bind).
        broken: when given, messages about pods whose allocation could not be read
            are appended (such a pod is skipped, never crashes the scheduler).

    Returns:
        uuid -> ``DeviceUsage``, for every device of the node.
    """
    types = tuple(device_types)
    usage = {
        d.uuid: DeviceUsage(device=d, cordoned=d.uuid in node.cordoned_uuids) for d in node.devices
    }
    for pod in pods:
        if not is_live(pod) or (pod.get("metadata") or {}).get("uid") == exclude_uid:
            continue
        try:
            allocation = pod_allocation(pod, types)
        except AnnotationError as exc:
            if broken is not None:
                broken.append(str(exc))
            continue
        for per_pod in allocation.values():
            for uuid, charge in device_charges(pod, per_pod).items():
                u = usage.get(uuid)
                if u is not None:
                    usage[uuid] = attrs.evolve(
                        u,
                        used_count=u.used_count + charge.count,
                        used_memory_mib=u.used_memory_mib + charge.memory_mib,
                        used_cores_pct=u.used_cores_pct + charge.cores_pct,
                    )
    return usage
