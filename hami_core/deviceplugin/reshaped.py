"""Devices live pods hold in a shape the device plugin no longer publishes: the guard that
stops a device plugin from starting after the node's ``migstrategy`` changed under pods.

A MIG instance is published either inside its GPU (``none``/``mixed`` strategy, dynamic
MIG: the GPU's UUID, its instances as ``migProfiles``) or as a device of its own
(``single``: the instance's MIG UUID, ``PARENT_UUID`` its GPU's). A pod's device list
names the device as it was published when the pod was bound. After the strategy changes
the node publishes the same memory under other UUIDs, and the scheduler's usage (which
matches a pod's list to the inventory by UUID, PROTOCOL.md §3) no longer counts the pod:
the instance it runs on would be handed out again (and, on a dynamic MIG node, an
instance no live pod names by its GPU is destroyed under the pod). HAMi 2.10 meets the
same hazard when it upgrades a node to dynamic MIG with pods it cannot map to a placement,
and refuses to guess (``docs/develop/dynamic-mig-migration.md``: "fails safely instead of
guessing and risking overlapping slice allocations"; its device plugin's
``primeMigManagerFromAnnotations`` fails the start on an active pod without a runtime
identity).

So at start the device plugin compares what live pods hold with what it is about to
publish; a pod holding a device that is now published in another shape stops the start,
the message naming the pods and devices (the previous inventory stays on the Node, so the
scheduler keeps counting those pods and kubelet admits nothing new without the plugin;
once the pods are gone the restarted plugin comes up).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hami_core.errors import AnnotationError
from hami_core.facts.usage import bound_here
from hami_core.model import PARENT_UUID, PART_UUIDS, DeviceInfo, DeviceTypeInfo
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.pods import is_live, pod_ref


def reshaped_holdings(
    pods: Iterable[Mapping[str, Any]],
    devices: Sequence[DeviceInfo],
    dtype: DeviceTypeInfo,
    *,
    node: str,
    scheduler_name: str,
) -> list[str]:
    """One line per (pod, device) where a live pod holds a device of ``devices`` under a
    UUID that is not published but names the same hardware in another shape.

    Args:
        pods: the pods bound to the node (Kubernetes ``v1.Pod`` JSON form).
        devices: what the device plugin is about to publish, one vendor's.
        dtype: that vendor's ``DeviceTypeInfo`` (its ``allocated_annotation``).
        node: the node's name; scheduler_name: ours. Only pods our scheduler placed on
            the node count (``bound_here``, PROTOCOL.md §6: the trust rule), finished
            ones not (``is_live``).

    Returns:
        Lines like ``pod default/a holds GPU-1 (now published as its MIG instances
        MIG-x, MIG-y)``, in pod order; empty when nothing is reshaped. An unreadable
        device list is skipped here (the scheduler holds its devices whole).
    """
    published = {d.uuid for d in devices}
    parts_of: dict[str, list[str]] = {}
    whole_of: dict[str, str] = {}
    for d in devices:
        parent = d.node_local.get(PARENT_UUID)
        if parent:
            parts_of.setdefault(parent, []).append(d.uuid)
        for part in filter(None, d.node_local.get(PART_UUIDS, "").split(",")):
            whole_of[part] = d.uuid
    lines = []
    for pod in pods:
        if not is_live(pod) or not bound_here(pod, node, scheduler_name=scheduler_name):
            continue
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        try:
            listed = decode_pod_devices(str(ann.get(dtype.allocated_annotation) or ""))
        except AnnotationError:
            continue
        held = dict.fromkeys(dev.uuid for ctr in listed for dev in ctr)
        for uuid in held:
            if uuid in published:
                continue
            if uuid in parts_of:
                lines.append(
                    f"pod {pod_ref(pod)} holds {uuid} (now published as its MIG instances "
                    f"{', '.join(sorted(parts_of[uuid]))})"
                )
            elif uuid in whole_of:
                lines.append(
                    f"pod {pod_ref(pod)} holds {uuid} (a MIG instance, now published "
                    f"inside its GPU {whole_of[uuid]})"
                )
    return lines
