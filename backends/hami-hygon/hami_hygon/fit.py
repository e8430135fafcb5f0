"""Placing one container's DCU request on one node (PROTOCOL.md §1, §2, §5).

Each DCU is checked in a fixed order and the first failing check is its reason: health,
cordon, type filter (``hygon.com/use-dcutype`` / ``nouse-dcutype``), UUID filter
(``hygon.com/use-gpuuuid`` / ``nouse-gpuuuid``), then HAMi's order (``pkg/device/hygon/
device.go`` ``Fit``): split count, memory, cores, exclusivity, compute exhausted. The
feasible DCUs are ranked by the device policy (``numa``: one NUMA node when possible;
``topology-aware`` falls back to spread, DCUs publish no link scores), ties broken by
index, so the same input always gives the same placement.

Type filters match whole words of the model, case-insensitively (``Z100`` selects
``DCU-Z100`` but not ``DCU-Z100L``; ``K100`` selects ``DCU-K100_AI``). HAMi matches by
substring, which lets ``Z100`` select a ``Z100L``; PROTOCOL.md §5 asks for exact tokens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from hami_core.model import (
    ContainerDevice,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    NodeInfo,
    ReasonCode,
)

from .names import NOUSE_TYPE, NOUSE_UUID, USE_TYPE, USE_UUID, annotations_of


def _tokens(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(t.strip() for t in value.split(",") if t.strip())


def type_matches(model: str, token: str) -> bool:
    """Whether a DCU model (``DCU-K100_AI``) matches a type filter token, as whole words
    bounded by the start/end, spaces, ``-`` or ``_``, case-insensitively."""
    pattern = r"(?:^|[\s_-])" + re.escape(token.lower()) + r"(?:$|[\s_-])"
    return re.search(pattern, model.lower()) is not None


class PodFilters:
    """The pod's DCU filters, read once per fit from its annotations."""

    def __init__(self, pod: Mapping[str, Any]) -> None:
        ann = annotations_of(pod)
        self.use_type = _tokens(ann.get(USE_TYPE))
        self.nouse_type = _tokens(ann.get(NOUSE_TYPE))
        self.use_uuid = frozenset(_tokens(ann.get(USE_UUID)))
        self.nouse_uuid = frozenset(_tokens(ann.get(NOUSE_UUID)))

    def type_ok(self, model: str) -> bool:
        if self.use_type and not any(type_matches(model, t) for t in self.use_type):
            return False
        return not any(type_matches(model, t) for t in self.nouse_type)

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuid and uuid not in self.use_uuid:
            return False
        return uuid not in self.nouse_uuid


def device_reason(
    usage: DeviceUsage, request: DeviceRequest, filters: PodFilters
) -> ReasonCode | None:
    """Why ``usage.device`` cannot take ``request`` now, or None when it can."""
    dev = usage.device
    if not dev.healthy:
        return ReasonCode.CARD_NOT_HEALTH
    if usage.cordoned:
        return ReasonCode.CARD_CORDONED
    if not filters.type_ok(dev.model):
        return ReasonCode.CARD_TYPE_MISMATCH
    if not filters.uuid_ok(dev.uuid):
        return ReasonCode.CARD_UUID_MISMATCH
    return capacity_reason(usage, request)


def capacity_reason(usage: DeviceUsage, request: DeviceRequest) -> ReasonCode | None:
    """The sharing checks alone (split count, memory, cores, exclusivity)."""
    dev = usage.device
    if usage.used_count >= dev.split_count:
        return ReasonCode.CARD_TIME_SLICING_EXHAUSTED
    memory = request.memory_on(dev)
    if memory == 0 or memory > usage.free_memory_mib:
        return ReasonCode.CARD_INSUFFICIENT_MEMORY
    if request.cores_pct > usage.free_cores_pct:
        return ReasonCode.CARD_INSUFFICIENT_CORE
    if dev.cores_pct == 100 and request.cores_pct == 100 and usage.used_count > 0:
        return ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if dev.cores_pct and usage.used_cores_pct >= dev.cores_pct and request.cores_pct == 0:
        return ReasonCode.CARD_COMPUTE_UNITS_EXHAUSTED
    return None


def load(usage: DeviceUsage) -> Fraction:
    """How full a DCU is: used fractions of memory, cores and sharers, summed (0..3)."""
    dev = usage.device
    total = Fraction(0)
    if dev.memory_mib:
        total += Fraction(usage.used_memory_mib, dev.memory_mib)
    if dev.cores_pct:
        total += Fraction(usage.used_cores_pct, dev.cores_pct)
    if dev.split_count:
        total += Fraction(usage.used_count, dev.split_count)
    return total


def fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult:
    """Choose ``request.count`` distinct DCUs on ``node``, or explain why not.

    Args:
        request: one container's DCU request.
        node: the node.
        usage: the node's DCUs with current usage.
        pod: the pod (type and UUID filters).
        policy: the device policy.

    Returns:
        A ``FitResult``; on a no-fit every rejected DCU has its reason, and
        ``largest_memory_mib`` / ``largest_cores_pct`` say what would have fitted.
    """
    filters = PodFilters(pod)
    ordered = sorted(usage, key=lambda u: (u.device.index, u.device.uuid))
    reasons: dict[str, ReasonCode] = {}
    feasible: list[DeviceUsage] = []
    for u in ordered:
        reason = device_reason(u, request, filters)
        if reason is None:
            feasible.append(u)
        else:
            reasons[u.device.uuid] = reason

    node_reason: ReasonCode | None = None
    if len(ordered) < request.count:
        node_reason = ReasonCode.NODE_INSUFFICIENT_DEVICE
    elif len(feasible) >= request.count:
        chosen = _choose(feasible, request.count, policy)
        return FitResult(
            devices=tuple(
                ContainerDevice(
                    uuid=u.device.uuid,
                    vendor=u.device.vendor,
                    memory_mib=request.memory_on(u.device),
                    cores_pct=request.cores_pct,
                )
                for u in chosen
            )
        )
    elif feasible:
        node_reason = ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST
    largest_mem, largest_cores = _largest(ordered, request, filters)
    return FitResult(
        device_reasons=reasons,
        node_reason=node_reason,
        largest_memory_mib=largest_mem,
        largest_cores_pct=largest_cores,
    )


def _largest(
    ordered: Sequence[DeviceUsage], request: DeviceRequest, filters: PodFilters
) -> tuple[int | None, int | None]:
    """Most memory / cores per DCU a request of the same count could get."""
    eligible = [
        u
        for u in ordered
        if u.device.healthy
        and not u.cordoned
        and filters.type_ok(u.device.model)
        and filters.uuid_ok(u.device.uuid)
        and u.used_count < u.device.split_count
    ]
    if len(eligible) < request.count:
        return None, None
    k = request.count - 1
    mem = sorted((u.free_memory_mib for u in eligible), reverse=True)[k]
    cores = sorted((u.free_cores_pct for u in eligible), reverse=True)[k]
    return mem, cores


def _rank(devices: Sequence[DeviceUsage], policy: DevicePolicy) -> list[DeviceUsage]:
    if policy is DevicePolicy.BINPACK:
        return sorted(devices, key=lambda u: (-load(u), u.device.index, u.device.uuid))
    return sorted(devices, key=lambda u: (load(u), u.device.index, u.device.uuid))


def _choose(feasible: list[DeviceUsage], count: int, policy: DevicePolicy) -> list[DeviceUsage]:
    if policy is DevicePolicy.NUMA:
        groups: dict[int, list[DeviceUsage]] = {}
        for u in feasible:
            groups.setdefault(u.device.numa, []).append(u)
        fitting = [g for _, g in sorted(groups.items()) if len(g) >= count]
        if fitting:
            # The fullest NUMA node that can host the whole container keeps others free.
            best = max(fitting, key=lambda g: (sum(load(u) for u in g), -g[0].device.numa))
            return _rank(best, DevicePolicy.BINPACK)[:count]
    return _rank(feasible, policy)[:count]
