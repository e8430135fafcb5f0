"""Fit, score and bind annotations for MetaX devices (HAMi 2.10 ``pkg/device/metax``).

Fit is the core's (``hami_core.backend.fit``) with MetaX's rules:

- UUID filters ``metax-tech.com/use-gpuuuid`` / ``nouse-gpuuuid`` (HAMi applies them to
  sGPUs; we apply them to whole GPUs too);
- whole GPUs: all containers of a pod on one GPU (``customFilterRule``);
- sGPU app classes (``checkAppClass``): a GPU in use serves either pods with an app
  class (``online`` / ``offline``) or pods without one, never both; an ``offline`` pod
  does not join a GPU that runs an ``online`` one (it would be suspended there); others
  get ``CardAppClassMismatch``. The kinds of sharers come from ``DeviceUsage.holders``;
- an sGPU already shared runs its sharers' QoS policy (that of the pods bound there,
  else ``qosPolicy`` of ``metax-tech.com/node-gpu-devices``): a pod with another policy gets
  ``CardQosPolicyMismatch`` there, unless it takes the whole GPU (vcore 100) or the GPU's
  policy is empty (``checkDeviceQos``; not checked for ``online`` pods);
- an ``online`` pod's compute is not accounted (cores not checked), and among the
  feasible GPUs it takes those with the fewest online sharers, GPUs running only offline
  pods last (``prioritizeOnlineDevices``);
- exclusive sGPUs (vcore 100) of a pod without app class come from the smallest link
  zone that holds them all, else zones smallest first, then unlinked GPUs
  (``prioritizeExclusiveDevices``).

Scores: whole GPUs from MetaX's topology annotations, ``2000 - losses[n]`` under binpack
and ``2000 - scores[n]`` under spread for a pod of ``n`` GPUs (``ScoreNode``), scaled
to 0..100 (/ 20). sGPUs, policy-neutral as HAMi's (higher is better under both
policies): an ``online`` pod by ``scoreOnlineDevices`` (0 for idle GPUs, -20 per online
and -2 per offline sharer, -100 per sharer of a GPU running only offline pods) mapped
onto 0..100 in the same order (0 -> 100); exclusive sGPUs, when topology-aware scoring is on
(option ``sgpuTopologyAware``, overridden per pod by ``metax-tech.com/sgpu-topology-aware``
read as Go's ``strconv.ParseBool``), by ``10 x allocated - loss`` link-zone pair scores
(``scoreExclusiveDevices``), mapped onto 0..100 in the same order (0 -> 50); otherwise
the core's node score. (HAMi adds these scores, weighted 10000, to its node score; a
logistic keeps their order within the extender's 0..100.)
"""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.backend import (
    ContainerDevices,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FilterKeys,
    FitCall,
    FitRules,
    NodePolicy,
    PodDevices,
    ReasonCode,
    VendorFit,
    annotations_of,
    node_score,
    same_device_rules,
)

from . import GPU, SGPU
from .names import (
    ALLOCATED_SDEVICES,
    APP_CLASS,
    NOUSE_UUID,
    OFFLINE,
    ONLINE,
    PREDICATE_TIME,
    QOS_POLICIES,
    QOS_POLICY,
    TOPOLOGY_AWARE,
    TOPOLOGY_LOSSES,
    TOPOLOGY_SCORES,
    USE_UUID,
)

#: Pair score of two sGPUs in one link zone (HAMi ``DirectLinkScore``).
DIRECT_LINK_SCORE = 10


def sharer_classes(usage: DeviceUsage) -> tuple[int, int]:
    """``(online, offline)``: how many of the device's holders carry each app class."""
    classes = [h.get(APP_CLASS) for h in usage.holders]
    return classes.count(ONLINE), classes.count(OFFLINE)


def app_class_fits(app_class: str, usage: DeviceUsage) -> bool:
    """HAMi's ``checkAppClass``: may a pod of ``app_class`` (``""`` for none) share the
    device with the pods already on it?"""
    if usage.used_count == 0:
        return True
    online, offline = sharer_classes(usage)
    classed_device = bool(online or offline)
    classed_pod = app_class in (ONLINE, OFFLINE)
    if classed_device != classed_pod:
        return False
    return not (online and app_class == OFFLINE)


def gpu_qos(usage: DeviceUsage) -> frozenset[str]:
    """The QoS policies a shared sGPU runs: those of the pods our scheduler bound there
    (``online`` ones excepted, whose policy is not read), else the ``qosPolicy`` MetaX's
    plugin reports (empty: none). HAMi keeps what a bind asked for in its jittery QoS
    cache until the plugin reports it (``addJitteryQos``, ``TestAddJitteryQos``); the live
    pods give the same answer without a cache, and do not forget it on a restart. A value
    that is no QoS policy (a pod's annotation edited after admission) is not read."""
    bound = frozenset(
        h.get(QOS_POLICY, "") for h in usage.holders if h.get(APP_CLASS) != ONLINE
    ) & frozenset(QOS_POLICIES)
    if bound:
        return bound
    reported = usage.device.info("qosPolicy")
    return frozenset({reported}) if reported else frozenset()


def qos_fits(
    pod_qos: str, usage: DeviceUsage, request: DeviceRequest, own: frozenset[str] = frozenset()
) -> bool:
    """HAMi's ``checkDeviceQos``: a used sGPU keeps its sharers' QoS policy (``gpu_qos``)
    unless the request takes it whole (vcore 100) or it has none. On a GPU an earlier
    container of the same pod took (``own``) the policy is the pod's own already (HAMi's
    ``AddResourceUsage`` switches it, to "" for an exclusive slice), so it fits."""
    if usage.used_count == 0 or request.cores_pct == 100 or usage.device.uuid in own:
        return True
    running = gpu_qos(usage)
    return not running or running == {pod_qos}


def sgpu_check(
    app_class: str, pod_qos: str, own: frozenset[str] = frozenset()
) -> Callable[[DeviceUsage, DeviceRequest], ReasonCode | None]:
    """The app-class check, then (pods not ``online``) the QoS check, as a ``FitRules``
    ``extra_check``; ``own``: the GPUs the pod's earlier containers took."""

    def check(usage: DeviceUsage, request: DeviceRequest) -> ReasonCode | None:
        if not app_class_fits(app_class, usage):
            return ReasonCode.CARD_APP_CLASS_MISMATCH
        if app_class != ONLINE and not qos_fits(pod_qos, usage, request, own):
            return ReasonCode.CARD_QOS_POLICY_MISMATCH
        return None

    return check


def online_rank(usage: DeviceUsage) -> tuple[int, int, int]:
    """Sort key of ``prioritizeOnlineDevices``: GPUs running only offline pods last (fewest
    offline first among them); the others by online sharers, then offline ones."""
    online, offline = sharer_classes(usage)
    if online == 0 and offline > 0:
        return (1, 0, offline)
    return (0, online, offline)


def choose_online(
    feasible: Sequence[DeviceUsage], count: int, policy: DevicePolicy
) -> Sequence[DeviceUsage]:
    """The ``count`` feasible GPUs an ``online`` pod takes (ties by index)."""
    ranked = sorted(feasible, key=lambda u: (*online_rank(u), u.device.index, u.device.uuid))
    return ranked[:count]


def _zone(usage: DeviceUsage) -> int:
    return int(usage.device.info("linkZone", "0") or 0)


def choose_exclusive(
    feasible: Sequence[DeviceUsage], count: int, policy: DevicePolicy
) -> Sequence[DeviceUsage] | None:
    """HAMi's ``prioritizeExclusiveDevices``: the smallest link zone (> 0) that holds all
    ``count`` GPUs (a big zone stays whole for a bigger pod); else the zones smallest
    first, then GPUs outside any zone; by index within each. None (the policy decides)
    when no more GPUs are feasible than asked."""
    if len(feasible) <= count:
        return None
    zones: dict[int, list[DeviceUsage]] = {}
    unlinked: list[DeviceUsage] = []
    for u in sorted(feasible, key=lambda u: (u.device.index, u.device.uuid)):
        if _zone(u) > 0:
            zones.setdefault(_zone(u), []).append(u)
        else:
            unlinked.append(u)
    ordered = [zones[z] for z in sorted(zones, key=lambda z: (len(zones[z]), z))]
    whole_zone = next((g for g in ordered if len(g) >= count), None)
    if whole_zone is not None:
        return whole_zone[:count]
    return [*(u for g in ordered for u in g), *unlinked][:count]


def metax_rules(call: FitCall[Sequence[ContainerDevices] | None]) -> FitRules:
    """Whole GPUs: all containers of a pod on one GPU; sGPUs: the app-class and QoS checks,
    online pods' compute not accounted and their own ranking, exclusive sGPUs from one
    link zone (see the module docstring). ``extra``: the pod's earlier containers'
    devices of this vendor."""
    allocated = call.extra or ()
    if call.request.vendor == GPU:
        return same_device_rules(allocated)
    ann = call.annotations
    app_class = ann.get(APP_CLASS, "")
    online = app_class == ONLINE
    return FitRules(
        cores_capacity=(lambda u: None) if online else (lambda u: u.device.cores_pct),
        extra_check=sgpu_check(
            app_class, ann.get(QOS_POLICY, ""), frozenset(d.uuid for c in allocated for d in c)
        ),
        choose=choose_online
        if online
        else choose_exclusive
        if call.request.cores_pct == 100 and APP_CLASS not in ann
        else None,
    )


#: ``fit(request, node, usage, pod, policy, allocated=())``: ``request.count`` distinct
#: MetaX devices, or per device why not (``allocated``: the pod's earlier containers'
#: devices of this vendor).
fit: VendorFit[Sequence[ContainerDevices]] = VendorFit(
    filters=FilterKeys(use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID), rules=metax_rules
)


def _table(value: str, n: int) -> float:
    try:
        table = json.loads(value)
        return float(table.get(str(n), 0)) if isinstance(table, dict) else 0.0
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError):
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


def exclusive_raw(usage: Sequence[DeviceUsage], devices: ContainerDevices) -> int:
    """HAMi's ``scoreExclusiveDevices`` (an int): ``10 x allocated - (available -
    allocated - rest)`` over link-zone pairs of free GPUs."""
    zone = {u.device.uuid: int(u.device.info("linkZone", "0") or 0) for u in usage}
    taken = [d.uuid for d in devices if d.cores_pct == 100]
    free = [u.device.uuid for u in usage if u.used_count == 0]
    available = _pairs([zone[u] for u in free])
    allocated = _pairs([zone.get(u, 0) for u in taken])
    rest = _pairs([zone[u] for u in free if u not in taken])
    return 10 * allocated - (available - allocated - rest)


def _squash(raw: float, scale: float) -> float:
    """A HAMi score of any size as 0..100, keeping its order (logistic; 0 -> 50)."""
    return 100.0 / (1.0 + math.exp(max(-700.0, min(700.0, -raw / scale))))


def exclusive_score(usage: Sequence[DeviceUsage], devices: ContainerDevices) -> float:
    """``exclusive_raw`` as 0..100 (0 -> 50), in HAMi's order."""
    return _squash(exclusive_raw(usage, devices), 100.0)


def online_score(usage: Sequence[DeviceUsage], devices: ContainerDevices) -> int:
    """HAMi's ``scoreOnlineDevices`` (an int, 0 or below) over the GPUs the pod takes."""
    taken = {d.uuid for d in devices}
    total = 0
    for u in usage:
        if u.device.uuid not in taken:
            continue
        online, offline = sharer_classes(u)
        total += -100 * offline if online == 0 and offline > 0 else -20 * online - 2 * offline
    return total


#: Go's ``strconv.ParseBool`` spellings.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def topology_aware(default: bool, pod: Mapping[str, Any], devices: ContainerDevices) -> bool:
    """HAMi's ``topologyAwareEnable``: only a pod with an exclusive sGPU (vcore 100) is
    scored by link zone; its ``metax-tech.com/sgpu-topology-aware`` (``ParseBool``
    spellings; anything else is ignored) overrides the option ``sgpuTopologyAware``."""
    if not any(d.cores_pct == 100 for d in devices):
        return False
    value = annotations_of(pod).get(TOPOLOGY_AWARE)
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return default


def score(
    vendor: str,
    usage: Sequence[DeviceUsage],
    devices: ContainerDevices,
    policy: NodePolicy,
    *,
    pod: Mapping[str, Any],
    topology_aware_default: bool,
) -> float:
    """0..100 for a placement of ``vendor`` devices (see the module docstring)."""
    if vendor == GPU:
        return gpu_score(usage, devices, policy)
    if annotations_of(pod).get(APP_CLASS) == ONLINE:
        # HAMi's score is 0 or below: twice the logistic keeps 0 at 100
        return min(100.0, 2 * _squash(online_score(usage, devices), 50.0))
    if topology_aware(topology_aware_default, pod, devices):
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
