"""Placing one container's Kunlunxin request on one node (PROTOCOL.md §1, §2, §5).

Each XPU is checked in a fixed order and the first failing check is its reason: health,
cordon, type filter, UUID filter, split count, memory, cores, exclusivity, partition.

Kunlunxin specifics:

- Partition (HAMi ``FitVXPU``, ``pkg/device/kunlun/vdevice.go``): a P800 is cut into
  vXPUs of one size. An XPU that already holds vXPUs takes another only when the mean
  size of those vXPUs equals the new one (a card cut in quarters takes no half). The
  reason is ``CardTypeMismatch``: the card's current partition type differs.
- Whole cards need an unused XPU (``ExclusiveDeviceAllocateConflict`` otherwise, or
  ``CardInsufficientMemory`` when memory is already held).
- Topology (``topology.select``): on a P800 OAM node (XPUs 0..7) with ``topologyAware``
  on, whole-card requests and vXPU requests of two or more XPUs take HAMi's
  topology-aware sets; when no such set exists among the feasible XPUs the node reason
  is ``NumaNotFit`` (HAMi's code for it). Otherwise, and for single vXPUs, XPUs are
  ranked by the device policy; ties go to the lower index.
- Filters: ``hami.io/use-xpu-uuid`` / ``hami.io/no-use-xpu-uuid`` (HAMi) and the
  handbook's UUID aliases; the handbook's ``hami.io/gpu-type`` (``kunlunxin``, ``kunlun``
  or ``xpu`` name the vendor; other tokens match whole words of the model, ``P800``).
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

from . import options, topology
from .names import NOUSE_UUID, USE_TYPE, USE_UUID, VENDOR_TOKENS, first_annotation, pod_annotations
from .requests import is_whole_card


def _tokens(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(t.strip() for t in value.split(",") if t.strip())


def type_matches(model: str, token: str) -> bool:
    """Whether an XPU model matches a type-filter token: a vendor token, or whole words
    of the model (``P800`` matches ``P800`` and ``P800-OAM``, not ``P8000``)."""
    if token.lower() in VENDOR_TOKENS:
        return True
    pattern = r"(?:^|[\s_-])" + re.escape(token.lower()) + r"(?:$|[\s_-])"
    return re.search(pattern, model.lower()) is not None


class PodFilters:
    """The pod's XPU filters, read once per fit."""

    def __init__(self, pod: Mapping[str, Any]) -> None:
        ann = pod_annotations(pod)
        self.use_type = _tokens(first_annotation(ann, USE_TYPE))
        self.use_uuid = frozenset(_tokens(first_annotation(ann, USE_UUID)))
        self.nouse_uuid = frozenset(_tokens(first_annotation(ann, NOUSE_UUID)))

    def type_ok(self, model: str) -> bool:
        return not self.use_type or any(type_matches(model, t) for t in self.use_type)

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
    """The sharing checks alone: split count, memory (MiB), cores, exclusivity, partition."""
    dev = usage.device
    if usage.used_count >= dev.split_count:
        return ReasonCode.CARD_TIME_SLICING_EXHAUSTED
    memory = request.memory_on(dev)
    if memory > usage.free_memory_mib or memory == 0:
        return ReasonCode.CARD_INSUFFICIENT_MEMORY
    if request.cores_pct > usage.free_cores_pct:
        return ReasonCode.CARD_INSUFFICIENT_CORE
    if request.cores_pct == 100 and usage.used_count > 0:
        return ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if usage.used_count > 0 and Fraction(usage.used_memory_mib, usage.used_count) != memory:
        return ReasonCode.CARD_TYPE_MISMATCH
    return None


def load(usage: DeviceUsage) -> Fraction:
    """How full an XPU is: used fractions of memory, cores and sharers, summed (0..3)."""
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
    """Choose ``request.count`` distinct XPUs on ``node``, or explain why not.

    Args:
        request: one container's Kunlunxin request (vXPU memory already trimmed, MiB).
        node: the node.
        usage: the node's XPUs with current usage, index order.
        pod: the pod (UUID and type filters).
        policy: the device policy (single vXPUs, and nodes that are not 8-XPU OAM).
        config: the backend's section (``topologyAware``).

    Returns:
        A ``FitResult``; on a no-fit every rejected XPU has its reason.
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

    chosen: list[DeviceUsage] | None = None
    node_reason: ReasonCode | None = None
    if len(ordered) < request.count:
        node_reason = ReasonCode.NODE_INSUFFICIENT_DEVICE
    elif len(feasible) >= request.count:
        chosen = _choose(feasible, ordered, request, policy, config)
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
    """Most memory (MiB) / cores per XPU a request of the same count could get."""
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


def _choose(
    feasible: list[DeviceUsage],
    ordered: Sequence[DeviceUsage],
    request: DeviceRequest,
    policy: DevicePolicy,
    config: VendorConfig,
) -> list[DeviceUsage] | None:
    """Topology-aware sets on an OAM node, else rank by policy (None: no set exists)."""
    count = request.count
    if (
        options.option(config, options.TOPOLOGY_AWARE)
        and (count >= 2 or is_whole_card(request))
        and topology.is_oam_node(u.device.index for u in ordered)
    ):
        by_index = {u.device.index: u for u in feasible}
        picked = topology.select(by_index.keys(), count)
        return None if picked is None else [by_index[i] for i in picked]
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
