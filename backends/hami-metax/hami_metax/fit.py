"""Fit, score and bind annotations for MetaX devices (HAMi 2.10 ``pkg/device/metax``).

Fit is the core's (``hami_core.backend.fit``) with MetaX's rules:

- UUID filters ``metax-tech.com/use-gpuuuid`` / ``nouse-gpuuuid`` (HAMi applies them to
  sGPUs; we apply them to whole GPUs too);
- an sGPU already shared runs its sharers' QoS policy (``qosPolicy`` of
  ``metax-tech.com/node-gpu-devices``): a pod with another policy gets
  ``CardQosPolicyMismatch`` there, unless it takes the whole GPU (vcore 100) or the GPU's
  policy is empty (``checkDeviceQos``);
- an ``online`` pod's compute is not accounted (cores not checked);
- several exclusive sGPUs (vcore 100) come from one link zone when one can hold them
  (``prioritizeExclusiveDevices``).

Scores: whole GPUs from MetaX's topology annotations, ``2000 - losses[n]`` under binpack
and ``2000 - scores[n]`` under spread for a pod of ``n`` GPUs (``ScoreNode``), scaled
to 0..100 (/ 20); exclusive sGPUs, when ``sgpuTopologyAware`` is on, by
``10 x allocated - loss`` link-zone pair scores (``scoreExclusiveDevices``), centred on
50 and clamped to 0..100; otherwise the core's node score.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.backend import (
    ContainerDevices,
    DeviceFilters,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    FitRules,
    NodeInfo,
    NodePolicy,
    PodDevices,
    ReasonCode,
    annotations_of,
    fit_devices,
    node_score,
)

from . import GPU, SGPU
from .names import (
    ALLOCATED_SDEVICES,
    APP_CLASS,
    NOUSE_UUID,
    PREDICATE_TIME,
    QOS_POLICY,
    TOPOLOGY_LOSSES,
    TOPOLOGY_SCORES,
    USE_UUID,
)

#: Pair score of two sGPUs in one link zone (HAMi ``DirectLinkScore``).
DIRECT_LINK_SCORE = 10


def qos_check(pod_qos: str) -> Callable[[DeviceUsage, DeviceRequest], ReasonCode | None]:
    """HAMi's ``checkDeviceQos`` for one pod's QoS policy."""

    def check(usage: DeviceUsage, request: DeviceRequest) -> ReasonCode | None:
        if usage.used_count == 0 or request.cores_pct == 100:
            return None
        current = usage.device.info("qosPolicy")
        if current in ("", pod_qos):
            return None
        return ReasonCode.CARD_QOS_POLICY_MISMATCH

    return check


def link_zone(usage: DeviceUsage) -> int:
    """The device's link zone; devices outside any zone (0) are each their own group."""
    zone = int(usage.device.info("linkZone", "0") or 0)
    return zone if zone > 0 else -1 - usage.device.index


def fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult:
    """Choose ``request.count`` distinct MetaX devices, or say per device why not."""
    ann = annotations_of(pod)
    filters = DeviceFilters.from_annotations(ann, use_uuid=(USE_UUID,), nouse_uuid=(NOUSE_UUID,))
    if request.vendor == GPU:
        return fit_devices(request, node, usage, filters, policy)
    online = ann.get(APP_CLASS) == "online"
    rules = FitRules(
        cores_capacity=(lambda u: None) if online else (lambda u: u.device.cores_pct),
        extra_check=None if online else qos_check(ann.get(QOS_POLICY, "")),
        link_group=link_zone if request.cores_pct == 100 else None,
    )
    return fit_devices(request, node, usage, filters, policy, rules)


def _table(value: str, n: int) -> float:
    try:
        table = json.loads(value)
        return float(table.get(str(n), 0)) if isinstance(table, dict) else 0.0
    except (ValueError, TypeError, AttributeError):
        return 0.0


def gpu_score(usage: Sequence[DeviceUsage], devices: ContainerDevices, policy: NodePolicy) -> float:
    """Whole GPUs: MetaX's topology tables for a pod of ``len(devices)`` GPUs, 0..100;
    the core's node score when the node has no tables."""
    key = TOPOLOGY_LOSSES if policy is NodePolicy.BINPACK else TOPOLOGY_SCORES
    value = usage[0].device.info(key) if usage else ""
    if not value:
        return node_score(usage, devices, policy)
    return max(0.0, min(100.0, (2000 - _table(value, len(devices))) / 20))


def _pairs(zones: Sequence[int]) -> int:
    return sum(DIRECT_LINK_SCORE for a, b in itertools.combinations(zones, 2) if a > 0 and a == b)


def exclusive_score(usage: Sequence[DeviceUsage], devices: ContainerDevices) -> float:
    """HAMi's ``scoreExclusiveDevices``: ``10 x allocated - (available - allocated -
    rest)`` over link-zone pairs of free GPUs, centred on 50 and clamped to 0..100."""
    zone = {u.device.uuid: int(u.device.info("linkZone", "0") or 0) for u in usage}
    taken = [d.uuid for d in devices if d.cores_pct == 100]
    free = [u.device.uuid for u in usage if u.used_count == 0]
    available = _pairs([zone[u] for u in free])
    allocated = _pairs([zone.get(u, 0) for u in taken])
    rest = _pairs([zone[u] for u in free if u not in taken])
    result = 10 * allocated - (available - allocated - rest)
    return max(0.0, min(100.0, 50.0 + result))


def score(
    vendor: str,
    usage: Sequence[DeviceUsage],
    devices: ContainerDevices,
    policy: NodePolicy,
    *,
    topology_aware: bool,
) -> float:
    """0..100 for a placement of ``vendor`` devices (see the module docstring)."""
    if vendor == GPU:
        return gpu_score(usage, devices, policy)
    if topology_aware and any(d.cores_pct == 100 for d in devices):
        return exclusive_score(usage, devices)
    return node_score(usage, devices, policy)


def bind_annotations(
    vendor: str, devices: PodDevices, *, clock_ns: Callable[[], int] = time.time_ns
) -> dict[str, str]:
    """For sGPUs what MetaX's sgpu-device plugin reads: ``metax-tech.com/gpu-devices-allocated``
    (JSON, one list per container, init containers first: ``{"uuid", "compute", "vRam"}``
    with zero values omitted, as HAMi's ``convertHAMIPodDeviceToMetaxPodDevice``) and
    ``metax-tech.com/predicate-time`` (unix ns). Whole GPUs need none."""
    if vendor != SGPU or not any(devices):
        return {}
    pod_devices = [
        [
            {
                k: v
                for k, v in (("uuid", d.uuid), ("compute", d.cores_pct), ("vRam", d.memory_mib))
                if v
            }
            for d in container
        ]
        for container in devices
    ]
    return {
        ALLOCATED_SDEVICES: json.dumps(pod_devices, separators=(",", ":")),
        PREDICATE_TIME: str(clock_ns()),
    }
