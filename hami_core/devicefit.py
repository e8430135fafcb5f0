"""Shared device-fit logic for backends whose devices are shared by memory and cores.

One container's request on one node: each device is checked in a fixed order and the
first failing check is its reason: health, cordon, type filter, UUID filter, split
count, memory, cores, exclusivity, compute exhausted (HAMi's order for the last five,
so reason codes match HAMi's). The feasible devices are then ranked by the device
policy (binpack, spread, topology-aware, numa); ties are broken by device index, so
the same input always gives the same placement. A backend with extra rules (memory
templates, paired modules) wraps these functions rather than copying them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence

import attrs

from hami_core.model import (
    ContainerDevice,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    NodeInfo,
    ReasonCode,
)

#: Above this many candidates, topology-aware search for a set is greedy, not exhaustive.
_EXHAUSTIVE_LIMIT = 12


def _tokens(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(t.strip() for t in value.split(",") if t.strip())


def type_matches(model: str, token: str) -> bool:
    """Whether a device model matches a type filter token, case-insensitively.

    A token matches whole words of the model: ``A10`` matches ``NVIDIA A10`` and
    ``NVIDIA-A10-24GB`` but not ``NVIDIA A100-SXM4-80GB``; ``A100-SXM4`` matches the
    latter. Word boundaries are the start/end, spaces and ``-`` / ``_`` (model names as
    NVML and HAMi's ``NVIDIA-`` prefix write them).
    """
    pattern = r"(?:^|[\s_-])" + re.escape(token.lower()) + r"(?:$|[\s_-])"
    return re.search(pattern, model.lower()) is not None


@attrs.frozen(kw_only=True)
class DeviceFilters:
    """A pod's device filters (PROTOCOL.md §5): type and UUID include/exclude lists and
    NUMA binding. Build with ``from_annotations`` and the vendor's annotation keys."""

    use_type: tuple[str, ...] = ()
    nouse_type: tuple[str, ...] = ()
    use_uuid: frozenset[str] = frozenset()
    nouse_uuid: frozenset[str] = frozenset()
    numa_bind: bool = False

    @classmethod
    def from_annotations(
        cls,
        annotations: Mapping[str, str],
        *,
        use_type: tuple[str, ...] = (),
        nouse_type: tuple[str, ...] = (),
        use_uuid: tuple[str, ...] = (),
        nouse_uuid: tuple[str, ...] = (),
        numa_bind: tuple[str, ...] = (),
    ) -> DeviceFilters:
        """Read the filters; each argument lists the accepted keys of one filter, the
        first present wins (HAMi's name first, then the handbook's aliases)."""

        def first(keys: tuple[str, ...]) -> str | None:
            return next((annotations[k] for k in keys if k in annotations), None)

        return cls(
            use_type=_tokens(first(use_type)),
            nouse_type=_tokens(first(nouse_type)),
            use_uuid=frozenset(_tokens(first(use_uuid))),
            nouse_uuid=frozenset(_tokens(first(nouse_uuid))),
            numa_bind=(first(numa_bind) or "").strip().lower() == "true",
        )

    def type_ok(self, model: str) -> bool:
        if self.use_type and not any(type_matches(model, t) for t in self.use_type):
            return False
        return not any(type_matches(model, t) for t in self.nouse_type)

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuid and uuid not in self.use_uuid:
            return False
        return uuid not in self.nouse_uuid


def device_reason(
    usage: DeviceUsage, request: DeviceRequest, filters: DeviceFilters
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
    if request.memory_on(dev) > usage.free_memory_mib or request.memory_on(dev) == 0:
        return ReasonCode.CARD_INSUFFICIENT_MEMORY
    if request.cores_pct > usage.free_cores_pct:
        return ReasonCode.CARD_INSUFFICIENT_CORE
    # cores 100 asks for the device alone (HAMi: only where the device has 100 cores).
    if dev.cores_pct == 100 and request.cores_pct == 100 and usage.used_count > 0:
        return ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    # A device whose compute is all taken gets no more cores-0 sharers.
    if dev.cores_pct and usage.used_cores_pct >= dev.cores_pct and request.cores_pct == 0:
        return ReasonCode.CARD_COMPUTE_UNITS_EXHAUSTED
    return None


def load(usage: DeviceUsage) -> float:
    """How full a device is: used fractions of memory, cores and sharers, summed (0..3).

    Rounded to 1e-9 so that mathematically equal loads compare equal and ties fall to
    the device index, whatever the order of the float operations.
    """
    dev = usage.device
    total = 0.0
    if dev.memory_mib:
        total += usage.used_memory_mib / dev.memory_mib
    if dev.cores_pct:
        total += usage.used_cores_pct / dev.cores_pct
    if dev.split_count:
        total += usage.used_count / dev.split_count
    return round(total, 9)


def fit_devices(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    filters: DeviceFilters,
    policy: DevicePolicy,
) -> FitResult:
    """Choose ``request.count`` distinct devices on ``node``, or explain why not.

    Args:
        request: one container's NVIDIA request.
        node: the node (for link scores).
        usage: the node's NVIDIA devices with current usage, in index order.
        filters: the pod's device filters.
        policy: the device policy.

    Returns:
        A ``FitResult``; on a no-fit every rejected device has its reason, and
        ``largest_memory_mib`` / ``largest_cores_pct`` say what would have fitted.
    """
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
        chosen = _choose(feasible, request.count, node, policy, numa_bind=filters.numa_bind)
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
    ordered: Sequence[DeviceUsage], request: DeviceRequest, filters: DeviceFilters
) -> tuple[int | None, int | None]:
    """Most memory (MiB) / cores (percent) per device that a request of the same count
    and the same other dimension would get, or None when even 1 MiB / 1 percent would
    not fit (the device is excluded for another reason: compute exhausted, exclusivity,
    split count, filters)."""

    def fits_with(u: DeviceUsage, *, memory_mib: int, cores_pct: int) -> bool:
        probe = attrs.evolve(
            request, count=1, memory_mib=memory_mib, memory_pct=0, cores_pct=cores_pct
        )
        return device_reason(u, probe, filters) is None

    k = request.count - 1
    # Each probe shrinks the other dimension to what is free, so a request short of both
    # memory and cores gets both hints; whatever else blocks a device still excludes it.
    mem_room = sorted(
        (
            u.free_memory_mib
            for u in ordered
            if fits_with(u, memory_mib=1, cores_pct=min(request.cores_pct, u.free_cores_pct))
        ),
        reverse=True,
    )
    cores_room = sorted(
        (
            u.free_cores_pct
            for u in ordered
            if u.free_cores_pct > 0
            and fits_with(
                u,
                memory_mib=max(1, min(request.memory_on(u.device), u.free_memory_mib)),
                cores_pct=1,
            )
        ),
        reverse=True,
    )
    return (
        mem_room[k] if len(mem_room) > k else None,
        cores_room[k] if len(cores_room) > k else None,
    )


def _choose(
    feasible: list[DeviceUsage],
    count: int,
    node: NodeInfo,
    policy: DevicePolicy,
    *,
    numa_bind: bool,
) -> list[DeviceUsage] | None:
    """Rank the feasible devices by policy and take ``count`` (None: NUMA bind fails)."""
    if numa_bind or policy is DevicePolicy.NUMA:
        groups: dict[int, list[DeviceUsage]] = {}
        for u in feasible:
            groups.setdefault(u.device.numa, []).append(u)
        fitting = [g for numa, g in sorted(groups.items()) if len(g) >= count]
        if fitting:
            # The fullest NUMA node that can host the whole container keeps others free.
            best = max(fitting, key=lambda g: (sum(load(u) for u in g), -g[0].device.numa))
            return _rank(best, DevicePolicy.BINPACK if policy is DevicePolicy.NUMA else policy)[
                :count
            ]
        if numa_bind:
            return None
    if policy is DevicePolicy.TOPOLOGY_AWARE and node.link_scores:
        return _topology(feasible, count, node.link_scores)
    return _rank(feasible, policy)[:count]


def _rank(devices: list[DeviceUsage], policy: DevicePolicy) -> list[DeviceUsage]:
    if policy is DevicePolicy.BINPACK:
        return sorted(devices, key=lambda u: (-load(u), u.device.index, u.device.uuid))
    # spread (and the fallback of numa / topology-aware): emptiest first
    return sorted(devices, key=lambda u: (load(u), u.device.index, u.device.uuid))


def _topology(
    feasible: list[DeviceUsage], count: int, scores: Mapping[str, Mapping[str, int]]
) -> list[DeviceUsage]:
    """PROTOCOL.md §2: N >= 2 -> the set with the highest sum of pair scores; N = 1 ->
    the device with the lowest sum of scores to the other free devices."""

    def pair(a: DeviceUsage, b: DeviceUsage) -> int:
        return scores.get(a.device.uuid, {}).get(b.device.uuid, 0)

    by_index = sorted(feasible, key=lambda u: (u.device.index, u.device.uuid))
    if count == 1:
        return [
            min(
                by_index,
                key=lambda u: (sum(pair(u, o) for o in by_index if o is not u), u.device.index),
            )
        ]
    if len(by_index) <= _EXHAUSTIVE_LIMIT:
        best = max(
            itertools.combinations(by_index, count),
            key=lambda combo: (
                sum(pair(a, b) for a, b in itertools.combinations(combo, 2)),
                [-u.device.index for u in combo],
            ),
        )
        return list(best)
    # Greedy: start from the best-linked pair, add the device adding most score.
    first = max(
        itertools.combinations(by_index, 2),
        key=lambda ab: (pair(*ab), -ab[0].device.index, -ab[1].device.index),
    )
    chosen = list(first)
    while len(chosen) < count:
        rest = [u for u in by_index if u not in chosen]
        chosen.append(max(rest, key=lambda u: (sum(pair(u, c) for c in chosen), -u.device.index)))
    return sorted(chosen, key=lambda u: u.device.index)
