"""Placing one container's Ascend request on one node (PROTOCOL.md §1, §2, §5).

Each chip is checked in a fixed order and the first failing check is its reason:
health, cordon, UUID filter (``hami.io/use-<x>-uuid`` / ``hami.io/no-use-<x>-uuid``), then
HAMi's order (``pkg/device/ascend/device.go`` ``Fit``): split count, memory, cores,
exclusivity, compute exhausted. The feasible chips are then chosen:

- models with modules of N chips (910C): whole modules only, a module being the chips
  with the same ``index // N`` (HAMi ``computeBestCombination910C``);
- several chips of a model with HCCS groups (910A/910B: indexes 0-3 and 4-7): one group
  when one can hold them all (HAMi prefers chips of one NetworkID), the fullest such group
  under binpack and the emptiest under spread;
- otherwise ranked by the device policy, ties broken by index, so the same input always
  gives the same placement.

Core capacity: HAMi's Ascend device plugin registers ``devcore`` as the chip's AI Core
count in template mode (``AdvertisedDevcore``: 20 for a 910B3), while requests state
percent. A ``devcore`` equal to the model's AI Core count is therefore read as the whole
chip, 100 %; any other value (ours: 100 x core scaling) is a percentage already.
"""

from __future__ import annotations

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

from .models import ModelSpec
from .names import annotations_of, nouse_uuid_annotation, use_uuid_annotation


def _tokens(value: str | None) -> frozenset[str]:
    if not value:
        return frozenset()
    return frozenset(t.strip() for t in value.split(",") if t.strip())


class PodFilters:
    """The pod's chip filters for one model, read once per fit from its annotations."""

    def __init__(self, pod: Mapping[str, Any], vendor: str) -> None:
        ann = annotations_of(pod)
        self.use_uuid = _tokens(ann.get(use_uuid_annotation(vendor)))
        self.nouse_uuid = _tokens(ann.get(nouse_uuid_annotation(vendor)))

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuid and uuid not in self.use_uuid:
            return False
        return uuid not in self.nouse_uuid


def core_capacity(usage: DeviceUsage, model: ModelSpec) -> int:
    """A chip's compute in percent (see the module docstring)."""
    dev = usage.device
    if model.ai_core and model.ai_core != 100 and dev.cores_pct == model.ai_core:
        return 100
    return dev.cores_pct


def free_cores(usage: DeviceUsage, model: ModelSpec) -> int:
    """Compute still free on a chip, percent; never negative."""
    return max(0, core_capacity(usage, model) - usage.used_cores_pct)


def device_reason(
    usage: DeviceUsage, request: DeviceRequest, filters: PodFilters, model: ModelSpec
) -> ReasonCode | None:
    """Why ``usage.device`` cannot take ``request`` now, or None when it can."""
    dev = usage.device
    if not dev.healthy:
        return ReasonCode.CARD_NOT_HEALTH
    if usage.cordoned:
        return ReasonCode.CARD_CORDONED
    if not filters.uuid_ok(dev.uuid):
        return ReasonCode.CARD_UUID_MISMATCH
    return capacity_reason(usage, request, model)


def capacity_reason(
    usage: DeviceUsage, request: DeviceRequest, model: ModelSpec
) -> ReasonCode | None:
    """The sharing checks alone (split count, memory, cores, exclusivity)."""
    dev = usage.device
    capacity = core_capacity(usage, model)
    if usage.used_count >= dev.split_count:
        return ReasonCode.CARD_TIME_SLICING_EXHAUSTED
    memory = request.memory_on(dev)
    if memory == 0 or memory > usage.free_memory_mib:
        return ReasonCode.CARD_INSUFFICIENT_MEMORY
    if request.cores_pct > free_cores(usage, model):
        return ReasonCode.CARD_INSUFFICIENT_CORE
    if capacity == 100 and request.cores_pct == 100 and usage.used_count > 0:
        return ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if capacity and usage.used_cores_pct >= capacity and request.cores_pct == 0:
        return ReasonCode.CARD_COMPUTE_UNITS_EXHAUSTED
    return None


def load(usage: DeviceUsage, model: ModelSpec) -> Fraction:
    """How full a chip is: used fractions of memory, cores and sharers, summed (0..3)."""
    dev = usage.device
    total = Fraction(0)
    if dev.memory_mib:
        total += Fraction(usage.used_memory_mib, dev.memory_mib)
    capacity = core_capacity(usage, model)
    if capacity:
        total += Fraction(usage.used_cores_pct, capacity)
    if dev.split_count:
        total += Fraction(usage.used_count, dev.split_count)
    return total


def fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
    model: ModelSpec,
) -> FitResult:
    """Choose ``request.count`` distinct chips of ``model`` on ``node``, or say why not.

    Args:
        request: one container's request for ``model.vendor``.
        node: the node (unused beyond its name; Ascend topology is by index).
        usage: the node's chips of ``model.vendor`` with current usage.
        pod: the pod (UUID filters).
        policy: the device policy.
        model: the chip model of ``request.vendor``.

    Returns:
        A ``FitResult``; on a no-fit every rejected chip has its reason, and
        ``largest_memory_mib`` / ``largest_cores_pct`` say what would have fitted.
    """
    filters = PodFilters(pod, model.vendor)
    ordered = sorted(usage, key=lambda u: (u.device.index, u.device.uuid))
    reasons: dict[str, ReasonCode] = {}
    feasible: list[DeviceUsage] = []
    for u in ordered:
        reason = device_reason(u, request, filters, model)
        if reason is None:
            feasible.append(u)
        else:
            reasons[u.device.uuid] = reason

    chosen: list[DeviceUsage] | None = None
    node_reason: ReasonCode | None = None
    if len(ordered) < request.count:
        node_reason = ReasonCode.NODE_INSUFFICIENT_DEVICE
    elif len(feasible) >= request.count:
        chosen = _choose(feasible, request.count, policy, model)
        if chosen is None:
            node_reason = ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST
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
    largest_mem, largest_cores = _largest(ordered, request, filters, model)
    return FitResult(
        device_reasons=reasons,
        node_reason=node_reason,
        largest_memory_mib=largest_mem,
        largest_cores_pct=largest_cores,
    )


def _largest(
    ordered: Sequence[DeviceUsage], request: DeviceRequest, filters: PodFilters, model: ModelSpec
) -> tuple[int | None, int | None]:
    """Most memory / cores per chip a request of the same count could get."""
    eligible = [
        u
        for u in ordered
        if u.device.healthy
        and not u.cordoned
        and filters.uuid_ok(u.device.uuid)
        and u.used_count < u.device.split_count
    ]
    if len(eligible) < request.count:
        return None, None
    k = request.count - 1
    mem = sorted((u.free_memory_mib for u in eligible), reverse=True)[k]
    cores = sorted((free_cores(u, model) for u in eligible), reverse=True)[k]
    return mem, cores


def _rank(
    devices: Sequence[DeviceUsage], policy: DevicePolicy, model: ModelSpec
) -> list[DeviceUsage]:
    if policy is DevicePolicy.BINPACK:
        return sorted(devices, key=lambda u: (-load(u, model), u.device.index, u.device.uuid))
    # spread, and the fallback of numa / topology-aware: emptiest first
    return sorted(devices, key=lambda u: (load(u, model), u.device.index, u.device.uuid))


def _group_key(
    groups: Mapping[int, Sequence[DeviceUsage]], policy: DevicePolicy, model: ModelSpec
) -> Any:
    """Sort key of candidate groups: fullest first under binpack, emptiest otherwise."""

    def key(gid: int) -> tuple[Fraction, int]:
        total = sum((load(u, model) for u in groups[gid]), Fraction(0))
        return (-total if policy is DevicePolicy.BINPACK else total, gid)

    return key


def _choose(
    feasible: list[DeviceUsage], count: int, policy: DevicePolicy, model: ModelSpec
) -> list[DeviceUsage] | None:
    """Take ``count`` chips; None when module pairing leaves too few whole modules."""
    n = model.chips_per_module
    if n > 1:
        return _modules(feasible, count, policy, model)
    if policy is DevicePolicy.NUMA:
        by_numa: dict[int, list[DeviceUsage]] = {}
        for u in feasible:
            by_numa.setdefault(u.device.numa, []).append(u)
        fitting = {k: g for k, g in by_numa.items() if len(g) >= count}
        if fitting:
            best = sorted(fitting, key=_group_key(fitting, DevicePolicy.BINPACK, model))[0]
            return _rank(fitting[best], DevicePolicy.BINPACK, model)[:count]
    if count > 1 and model.hccs_group_size:
        by_group: dict[int, list[DeviceUsage]] = {}
        for u in feasible:
            by_group.setdefault(u.device.index // model.hccs_group_size, []).append(u)
        fitting = {k: g for k, g in by_group.items() if len(g) >= count}
        if fitting:
            best = sorted(fitting, key=_group_key(fitting, policy, model))[0]
            return sorted(_rank(fitting[best], policy, model)[:count], key=lambda u: u.device.index)
    return _rank(feasible, policy, model)[:count]


def _modules(
    feasible: list[DeviceUsage], count: int, policy: DevicePolicy, model: ModelSpec
) -> list[DeviceUsage] | None:
    """Whole modules only: every chip of a module (same ``index // N``) must be feasible."""
    n = model.chips_per_module
    by_module: dict[int, list[DeviceUsage]] = {}
    for u in feasible:
        by_module.setdefault(u.device.index // n, []).append(u)
    whole = {k: g for k, g in by_module.items() if len(g) == n}
    if len(whole) * n < count:
        return None
    picked = sorted(whole, key=_group_key(whole, policy, model))[: count // n]
    return [u for k in sorted(picked) for u in sorted(whole[k], key=lambda u: u.device.index)]
