"""Node scores under the node policy, normalised for kube-scheduler."""

from __future__ import annotations

from collections.abc import Mapping

from hami_core.model import Allocation, DeviceUsage, NodeInfo, NodePolicy
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
) -> float:
    """0..100: the mean over the pod's vendors of each backend's score (the pod's own
    request included); a backend without ``hami_score`` contributes 50."""
    scores = []
    for vendor, per_container in allocation.devices.items():
        devices = tuple(d for c in per_container for d in c)
        vendor_usage = tuple(u for u in usage.values() if u.device.vendor == vendor)
        value = manager.score(vendor, node, vendor_usage, devices, policy=policy)
        scores.append(50.0 if value is None else value)
    return sum(scores) / len(scores) if scores else 0.0


def extender_score(score: float) -> int:
    """0..100 -> 0..10, rounded half up."""
    return min(MAX_EXTENDER_SCORE, max(0, int(score * MAX_EXTENDER_SCORE / 100 + 0.5)))
