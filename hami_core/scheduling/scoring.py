"""Node scores under the node policy, normalised for kube-scheduler."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import fit
from hami_core.model import Allocation, ContainerDevices, DeviceUsage, NodeInfo, NodePolicy
from hami_core.plugin import BackendManager

#: kube-scheduler's extender scores run 0..10 (``MaxExtenderPriority``, Kubernetes
#: ``pkg/scheduler/framework``); the scheduler multiplies them by the extender weight.
MAX_EXTENDER_SCORE = 10


def node_score(
    node: NodeInfo,
    usage: Mapping[str, DeviceUsage],
    allocation: Allocation,
    manager: BackendManager,
    *,
    policy: NodePolicy,
    pod: Mapping[str, Any] | None = None,
) -> float:
    """0..100: the mean over the pod's vendors of each vendor's ``vendor_score`` (the
    pod's own request included; ``pod`` for per-pod scoring annotations)."""
    scores = []
    for vendor, per_container in allocation.devices.items():
        devices = tuple(d for c in per_container for d in c)
        vendor_usage = tuple(u for u in usage.values() if u.device.vendor == vendor)
        scores.append(
            vendor_score(manager, vendor, node, vendor_usage, devices, policy=policy, pod=pod)
        )
    return sum(scores) / len(scores) if scores else 0.0


def vendor_score(
    manager: BackendManager,
    vendor: str,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    devices: ContainerDevices,
    *,
    policy: NodePolicy,
    pod: Mapping[str, Any] | None = None,
) -> float:
    """0..100 for placing ``devices`` (one vendor's slices, all containers) on ``node``.

    The backend's ``hami_score`` when it has one; else the core's binpack / spread score
    (``hami_core.backend.fit.node_score``) read with the vendor key's ``fit_rules``, so
    a backend need not write a scorer to get the real node policy.
    """
    value = manager.score(vendor, node, usage, devices, policy=policy, pod=pod)
    if value is not None:
        return value
    return fit.node_score(usage, devices, policy, manager.device_type(vendor).fit_rules)


def extender_score(score: float) -> int:
    """0..100 -> 0..10, rounded half up."""
    return min(MAX_EXTENDER_SCORE, max(0, int(score * MAX_EXTENDER_SCORE / 100 + 0.5)))
