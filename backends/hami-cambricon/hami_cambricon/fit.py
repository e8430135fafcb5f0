"""Placing one container's Cambricon request on one node (PROTOCOL.md §1, §2, §5).

Each MLU is checked in a fixed order and the first failing check is its reason: health,
cordon, type filter, UUID filter, split count, memory, cores, exclusivity, compute
exhausted (HAMi's order, so reason codes match HAMi's). The feasible MLUs are ranked by
the device policy; ties are broken by index, so the same input gives the same placement.

Cambricon specifics:

- Type filters: ``cambricon.com/use-mlutype`` / ``nouse-mlutype`` (HAMi), the handbook's
  ``hami.io/gpu-type`` (where ``cambricon`` or ``mlu`` names the vendor, any model), and
  the model named by model-qualified resources (``cambricon.com/mlu370.smlu.vmemory``
  places on MLU370 cards only). Model tokens match whole words of the model
  (``mlu370`` matches ``MLU370-X8`` and HAMi's ``MLU-MLU370-X4``, not ``MLU3700``).
- UUID filters: ``cambricon.com/use-gpuuuid`` / ``nouse-gpuuuid`` and handbook aliases.
- An MLU whose inventory states ``devcore`` 0 does not account compute: HAMi's
  documented ``hami.io/node-mlu-register`` example registers MLU370-X4 cards with
  ``devcore`` 0, so cores are not checked on such a card (memory and sharers still are).
- MLUs carry no link scores, so ``topology-aware`` falls back to spread.
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
from hami_core.protocol.config import VendorConfig

from .names import (
    NOUSE_TYPE,
    NOUSE_UUID,
    USE_TYPE,
    USE_UUID,
    VENDOR_TOKENS,
    first_annotation,
    pod_annotations,
)
from .requests import pod_models


def _tokens(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(t.strip() for t in value.split(",") if t.strip())


def type_matches(model: str, token: str) -> bool:
    """Whether an MLU model matches a type-filter token, case-insensitively.

    A token matches whole words of the model (words end at the start/end, spaces, ``-``
    and ``_``): ``MLU370`` matches ``MLU370-X8``; ``MLU370-X8`` matches ``MLU370-X8`` but
    not ``MLU370-X4``; ``MLU37`` matches neither. ``cambricon`` and ``mlu`` match every
    MLU (the handbook's ``hami.io/gpu-type: "cambricon"``).
    """
    if token.lower() in VENDOR_TOKENS:
        return True
    pattern = r"(?:^|[\s_-])" + re.escape(token.lower()) + r"(?:$|[\s_-])"
    return re.search(pattern, model.lower()) is not None


class PodFilters:
    """The pod's MLU filters, read once per fit."""

    def __init__(self, pod: Mapping[str, Any], config: VendorConfig) -> None:
        ann = pod_annotations(pod)
        self.use_type = _tokens(first_annotation(ann, USE_TYPE))
        self.nouse_type = _tokens(first_annotation(ann, NOUSE_TYPE))
        self.use_uuid = frozenset(_tokens(first_annotation(ann, USE_UUID)))
        self.nouse_uuid = frozenset(_tokens(first_annotation(ann, NOUSE_UUID)))
        self.models = pod_models(pod, config)

    def type_ok(self, model: str) -> bool:
        if self.use_type and not any(type_matches(model, t) for t in self.use_type):
            return False
        if self.models and not any(type_matches(model, m) for m in self.models):
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
    """The sharing checks alone (split count, memory, cores, exclusivity).

    Memory is compared in MiB (``request.memory_mib`` is already units x 256).
    """
    dev = usage.device
    if usage.used_count >= dev.split_count:
        return ReasonCode.CARD_TIME_SLICING_EXHAUSTED
    memory = request.memory_on(dev)
    if memory > usage.free_memory_mib or memory == 0:
        return ReasonCode.CARD_INSUFFICIENT_MEMORY
    if dev.cores_pct == 0:
        return None  # compute not accounted on this MLU (devcore 0 in the inventory)
    if request.cores_pct > usage.free_cores_pct:
        return ReasonCode.CARD_INSUFFICIENT_CORE
    if dev.cores_pct == 100 and request.cores_pct == 100 and usage.used_count > 0:
        return ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if usage.used_cores_pct >= dev.cores_pct and request.cores_pct == 0:
        return ReasonCode.CARD_COMPUTE_UNITS_EXHAUSTED
    return None


def load(usage: DeviceUsage) -> Fraction:
    """How full an MLU is: used fractions of memory, cores and sharers, summed (0..3)."""
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
    config: VendorConfig,
) -> FitResult:
    """Choose ``request.count`` distinct MLUs on ``node``, or explain why not.

    Args:
        request: one container's Cambricon request (memory in MiB, a multiple of 256).
        node: the node.
        usage: the node's MLUs with current usage, index order.
        pod: the pod (type/UUID filters, model-qualified resource names).
        policy: the device policy.
        config: the backend's configuration section.

    Returns:
        A ``FitResult``; on a no-fit every rejected MLU has its reason, and
        ``largest_memory_mib`` / ``largest_cores_pct`` say what would have fitted.
    """
    filters = PodFilters(pod, config)
    ordered = sorted(usage, key=lambda u: (u.device.index, u.device.uuid))
    reasons: dict[str, ReasonCode] = {}
    feasible: list[DeviceUsage] = []
    for u in ordered:
        reason = device_reason(u, request, filters)
        if reason is None:
            feasible.append(u)
        else:
            reasons[u.device.uuid] = reason

    chosen: list[DeviceUsage] | None = None
    node_reason: ReasonCode | None = None
    if len(ordered) < request.count:
        node_reason = ReasonCode.NODE_INSUFFICIENT_DEVICE
    elif len(feasible) >= request.count:
        chosen = _choose(feasible, request.count, policy)
        if chosen is None:
            node_reason = ReasonCode.NUMA_NOT_FIT
    elif feasible:
        node_reason = ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST

    if chosen is not None:
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
    """Most memory (MiB) / cores per MLU a request of the same count could get."""
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
    cores = sorted(
        (u.free_cores_pct if u.device.cores_pct else 100 for u in eligible), reverse=True
    )[k]
    return mem, cores


def _choose(
    feasible: list[DeviceUsage], count: int, policy: DevicePolicy
) -> list[DeviceUsage] | None:
    """Rank the feasible MLUs by policy and take ``count``."""
    if policy is DevicePolicy.NUMA:
        groups: dict[int, list[DeviceUsage]] = {}
        for u in feasible:
            groups.setdefault(u.device.numa, []).append(u)
        fitting = [g for _, g in sorted(groups.items()) if len(g) >= count]
        if fitting:
            best = max(fitting, key=lambda g: (sum(load(u) for u in g), -g[0].device.numa))
            return _rank(best, DevicePolicy.BINPACK)[:count]
    return _rank(feasible, policy)[:count]


def _rank(devices: list[DeviceUsage], policy: DevicePolicy) -> list[DeviceUsage]:
    if policy is DevicePolicy.BINPACK:
        return sorted(devices, key=lambda u: (-load(u), u.device.index, u.device.uuid))
    # spread, and the fallback of numa / topology-aware: emptiest first
    return sorted(devices, key=lambda u: (load(u), u.device.index, u.device.uuid))
