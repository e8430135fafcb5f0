"""Shared device-fit logic for backends whose devices are shared by memory and cores.

One container's request on one node: each device is checked in a fixed order and the
first failing check is its reason: health, cordon, type filter, UUID filter, split
count, memory, cores, exclusivity, compute exhausted (HAMi's order for the last five,
so reason codes match HAMi's). The feasible devices are then ranked by the device
policy (binpack, spread, topology-aware, numa); ties are broken by device index, so
the same input always gives the same placement. Topology-aware uses the node's link
scores (published for NVIDIA GPUs) when they name a feasible device; devices without
scores (other vendors, nodes without the annotation) fall back to spread.

A backend whose devices differ in one step passes ``FitRules`` rather than copying the
steps; the defaults are NVIDIA's behaviour:

- ``cores_capacity``: a device's compute in percent as the checks, the load and the hints
  read it (default: the inventory's ``devcore``); ``None`` for a device that does not
  account compute (its cores are not checked). Ascend reads HAMi's AI Core count as 100 %.
- ``extra_check``: one more per-device check after the sharing checks, e.g. Kunlunxin's
  "a card cut in quarters takes no half", NVIDIA's MIG placements. The size hints apply
  it too: a size they name is accepted.
- ``link_group``: a group id per device (Ascend HCCS groups); a request of several devices
  takes them from one group when one group can hold them all.
- ``choose``: the vendor's own selection among the feasible devices (910C paired modules,
  Kunlunxin topology sets): the devices, a ``ReasonCode`` when no set exists, or ``None``
  to leave the choice to the policy ranking.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from hami_core.model import (
    DEVICE_SCORING_WEIGHTS_ANNOTATION,
    GPU_POLICY_ANNOTATION,
    ContainerDevice,
    ContainerDevices,
    DevicePolicy,
    DevicePolicyChain,
    DeviceRequest,
    DeviceScoringWeights,
    DeviceUsage,
    FitResult,
    FitRules,
    NodeInfo,
    NodePolicy,
    ReasonCode,
)

#: Above this many candidates, topology-aware search for a set is greedy, not exhaustive.
_EXHAUSTIVE_LIMIT = 12

#: NVIDIA's rules: every step as documented above, no extension.
GENERIC = FitRules()


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


#: The most word boundaries of a model whose whole-word runs are listed (``_word_runs``).
_MAX_BOUNDARIES = 32


@functools.lru_cache(maxsize=512)
def _word_runs(model: str) -> frozenset[str] | None:
    """Every part of ``model`` (lower case) that a token matches by ``type_matches``'s
    rule: from the start or after a space, ``-`` or ``_``, to the end or before one. A
    token matches exactly when it is one of them (lower case), so a pod's list of any
    length is decided with one set lookup per device, not a pattern per token (a tenant's
    ``nvidia.com/use-gputype`` may hold thousands). None for a model of more than
    ``_MAX_BOUNDARIES`` boundaries: decide it token by token."""
    m = model.lower()
    cuts = [k for k, c in enumerate(m) if c.isspace() or c in "_-"]
    if len(cuts) > _MAX_BOUNDARIES:
        return None
    starts, ends = [0, *(k + 1 for k in cuts)], [*cuts, len(m)]
    return frozenset(m[i:j] for i in starts for j in ends if j > i)


@attrs.frozen(kw_only=True)
class DeviceFilters:
    """A pod's device filters (PROTOCOL.md §5): type and UUID include/exclude lists and
    NUMA binding. Build with ``from_annotations`` and the vendor's annotation keys.

    Attributes:
        use_type, nouse_type: type tokens the device must / must not match.
        require_type: type tokens the request itself names (Cambricon's model-qualified
            resources); when set, the device must match one of them as well.
        vendor_tokens: lower-case tokens that name the vendor rather than a model and so
            match every device (the handbook's ``hami.io/gpu-type: cambricon``).
        use_uuid, nouse_uuid: device UUIDs the pod may / must not use.
        numa_bind: all devices of a container on one NUMA node, or no fit.
        modes: the inventory modes (``hami-core``, ``mig``, ``mps``) the pod accepts;
            empty accepts every mode (NVIDIA's ``nvidia.com/vgpu-mode``).
        mutex: only devices no container uses (HAMi 2.10 ``mutex`` policy).
        tie_breaks: ordering policies after the ranking one (``spread,numa``).
        weights: HAMi 2.10's ``hami.io/device-scoring-weights`` when the pod writes it
            (``weighted_score`` then orders the devices, see ``rank``); None: our order.
    """

    use_type: tuple[str, ...] = ()
    nouse_type: tuple[str, ...] = ()
    require_type: tuple[str, ...] = ()
    vendor_tokens: frozenset[str] = frozenset()
    use_uuid: frozenset[str] = frozenset()
    nouse_uuid: frozenset[str] = frozenset()
    numa_bind: bool = False
    modes: frozenset[str] = frozenset()
    mutex: bool = False
    tie_breaks: tuple[DevicePolicy, ...] = ()
    weights: DeviceScoringWeights | None = None
    #: ``use_type``, ``require_type``, ``nouse_type`` in lower case (``type_ok``)
    _lowered: tuple[frozenset[str], ...] = attrs.field(init=False, repr=False, eq=False)

    @_lowered.default
    def _lower(self) -> tuple[frozenset[str], ...]:
        return tuple(
            frozenset(t.lower() for t in ts)
            for ts in (self.use_type, self.require_type, self.nouse_type)
        )

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
        mode: tuple[str, ...] = (),
        require_type: Iterable[str] = (),
        vendor_tokens: Iterable[str] = (),
    ) -> DeviceFilters:
        """Read the filters; each annotation argument lists the accepted keys of one
        filter, the first present wins (HAMi's name first, then the handbook's aliases).
        A vendor without a filter passes no keys for it. ``require_type`` and
        ``vendor_tokens`` are taken as given (see the attributes). ``mutex`` and
        ``tie_breaks`` come from ``hami.io/gpu-scheduler-policy`` and ``weights`` from
        ``hami.io/device-scoring-weights``, for every vendor (an unreadable value adds
        nothing: admission and the scheduler reject it)."""

        def first(keys: tuple[str, ...]) -> str | None:
            return next((annotations[k] for k in keys if k in annotations), None)

        chain = None
        if GPU_POLICY_ANNOTATION in annotations:
            try:
                chain = DevicePolicyChain.parse(str(annotations[GPU_POLICY_ANNOTATION]))
            except ValueError:
                chain = None
        weights = None
        if DEVICE_SCORING_WEIGHTS_ANNOTATION in annotations:
            try:
                weights = DeviceScoringWeights.parse(
                    str(annotations[DEVICE_SCORING_WEIGHTS_ANNOTATION])
                )
            except ValueError:
                weights = None

        return cls(
            use_type=_tokens(first(use_type)),
            nouse_type=_tokens(first(nouse_type)),
            require_type=tuple(sorted(require_type)),
            vendor_tokens=frozenset(t.lower() for t in vendor_tokens),
            use_uuid=frozenset(_tokens(first(use_uuid))),
            nouse_uuid=frozenset(_tokens(first(nouse_uuid))),
            numa_bind=(first(numa_bind) or "").strip().lower() == "true",
            modes=frozenset(_tokens(first(mode))),
            mutex=chain.mutex if chain else False,
            tie_breaks=chain.tie_breaks if chain else (),
            weights=weights,
        )

    def matches(self, model: str, token: str) -> bool:
        """``type_matches``, or a vendor token (which matches every device)."""
        return token.lower() in self.vendor_tokens or type_matches(model, token)

    def type_ok(self, model: str) -> bool:
        """Whether a device of ``model`` passes the type filters: it matches a token of
        ``use_type`` and of ``require_type`` (each when given) and none of
        ``nouse_type`` (``matches``), at a cost that does not grow with the tokens."""
        use, required, nouse = self._lowered
        if self.use_type and not self._any(model, self.use_type, use):
            return False
        if self.require_type and not self._any(model, self.require_type, required):
            return False
        return not (self.nouse_type and self._any(model, self.nouse_type, nouse))

    def _any(self, model: str, tokens: tuple[str, ...], lowered: frozenset[str]) -> bool:
        """``any(self.matches(model, t) for t in tokens)``; ``lowered``: the tokens in
        lower case."""
        if not lowered.isdisjoint(self.vendor_tokens):
            return True
        runs = _word_runs(model)
        if runs is None:
            return any(type_matches(model, t) for t in tokens)
        return not runs.isdisjoint(lowered)

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuid and uuid not in self.use_uuid:
            return False
        return uuid not in self.nouse_uuid


def same_device_rules(allocated: Sequence[ContainerDevices]) -> FitRules:
    """HAMi's ``customFilterRule`` of Moore Threads and whole MetaX GPUs (HAMi 2.10
    ``pkg/device/mthreads/device.go``, ``pkg/device/metax/device.go``) as ``FitRules``:
    once an earlier container of the pod holds devices of the vendor, a later one may
    only take a device equal to every one of them (``CardNotFoundCustomFilterRule``
    otherwise); ``GENERIC`` while nothing is allocated yet."""
    held = {d.uuid for c in allocated for d in c}
    if not held:
        return GENERIC

    def check(usage: DeviceUsage, request: DeviceRequest) -> ReasonCode | None:
        if held == {usage.device.uuid}:
            return None
        return ReasonCode.CARD_NOT_FOUND_CUSTOM_FILTER_RULE

    return FitRules(extra_check=check)


def device_reason(
    usage: DeviceUsage,
    request: DeviceRequest,
    filters: DeviceFilters,
    rules: FitRules = GENERIC,
) -> ReasonCode | None:
    """Why ``usage.device`` cannot take ``request`` now, or None when it can."""
    dev = usage.device
    if not dev.healthy:
        return ReasonCode.CARD_NOT_HEALTH
    if usage.cordoned:
        return ReasonCode.CARD_CORDONED
    if not filters.type_ok(dev.model) or (filters.modes and dev.mode not in filters.modes):
        return ReasonCode.CARD_TYPE_MISMATCH
    if not filters.uuid_ok(dev.uuid):
        return ReasonCode.CARD_UUID_MISMATCH
    if filters.mutex and usage.used_count > 0:
        # HAMi checks the time slices first, then mutex (pkg/device/nvidia/device.go Fit).
        if usage.used_count >= dev.split_count:
            return ReasonCode.CARD_TIME_SLICING_EXHAUSTED
        return ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    return capacity_reason(usage, request, rules)


def free_cores(usage: DeviceUsage, rules: FitRules = GENERIC) -> int:
    """Compute still free on a device, percent, never negative; 100 on a device that does
    not account compute (any share fits there)."""
    capacity = rules.cores_capacity(usage)
    if capacity is None:
        return 100
    return max(0, capacity - usage.used_cores_pct)


def capacity_reason(
    usage: DeviceUsage, request: DeviceRequest, rules: FitRules = GENERIC
) -> ReasonCode | None:
    """The sharing checks alone (split count, memory, cores, exclusivity, compute
    exhausted), then ``rules.extra_check``."""
    dev = usage.device
    if usage.used_count >= dev.split_count:
        return ReasonCode.CARD_TIME_SLICING_EXHAUSTED
    memory = request.memory_on(dev)
    if memory > usage.free_memory_mib or memory == 0:
        return ReasonCode.CARD_INSUFFICIENT_MEMORY
    capacity = rules.cores_capacity(usage)
    if capacity is not None:
        if request.cores_pct > free_cores(usage, rules):
            return ReasonCode.CARD_INSUFFICIENT_CORE
        # cores 100 asks for the device alone (HAMi: only where the device has 100 cores).
        if capacity == 100 and request.cores_pct == 100 and usage.used_count > 0:
            return ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        # A device whose compute is all taken gets no more cores-0 sharers.
        if capacity and usage.used_cores_pct >= capacity and request.cores_pct == 0:
            return ReasonCode.CARD_COMPUTE_UNITS_EXHAUSTED
    if rules.extra_check is not None:
        return rules.extra_check(usage, request)
    return None


def load(usage: DeviceUsage, rules: FitRules = GENERIC) -> float:
    """How full a device is: used fractions of memory, cores and sharers, summed (0..3).

    Rounded to 1e-9 so that mathematically equal loads compare equal and ties fall to
    the device index, whatever the order of the float operations.
    """
    dev = usage.device
    total = 0.0
    if dev.memory_mib:
        total += usage.used_memory_mib / dev.memory_mib
    capacity = rules.cores_capacity(usage)
    if capacity:
        total += usage.used_cores_pct / capacity
    if dev.split_count:
        total += usage.used_count / dev.split_count
    return round(total, 9)


def fit_leftover(usage: DeviceUsage, request: DeviceRequest, rules: FitRules = GENERIC) -> float:
    """What ``request`` would leave free on the device, as a fraction of the device, in
    the dimension (memory or compute) that keeps more room: 0 = the request fills the
    device in both; a high value with the other dimension at 0 is stranded capacity."""
    dev = usage.device
    mem = (
        (usage.free_memory_mib - request.memory_on(dev)) / dev.memory_mib if dev.memory_mib else 0.0
    )
    capacity = rules.cores_capacity(usage)
    cores = (free_cores(usage, rules) - request.cores_pct) / capacity if capacity else 0.0
    return round(max(mem, cores, 0.0), 9)


def weighted_score(
    usage: DeviceUsage,
    request: DeviceRequest,
    weights: DeviceScoringWeights,
    rules: FitRules = GENERIC,
) -> float:
    """HAMi 2.10's device score for one container's request: ``10 x (slot x (sharers
    + 1) / split count + core x (cores + request) / compute + memory x (memory +
    request) / memory)``, the fractions after the placement (0 when the device has no
    split count, compute or memory, as HAMi's ``ComputeScore``; a device that does not
    account compute, ``cores_capacity`` None, adds no core part). Rounded to 1e-9 so
    equal scores tie. Source: HAMi 2.10 ``pkg/scheduler/policy/gpu_policy.go``
    ``DeviceListsScore.ComputeScore``; its ``gpu_policy_test.go``
    ``TestComputeScoreWithResourceWeights`` gives 16 and 15 under equal weights."""
    dev = usage.device
    capacity = rules.cores_capacity(usage)
    if not dev.split_count or not dev.memory_mib or capacity == 0:
        return 0.0
    slots = (usage.used_count + 1) / dev.split_count
    cores = (usage.used_cores_pct + request.cores_pct) / capacity if capacity else 0.0
    memory = (usage.used_memory_mib + request.memory_on(dev)) / dev.memory_mib
    total = weights.slot * slots + weights.core * cores + weights.memory * memory
    return round(10 * total, 9)


def node_score(
    usage: Sequence[DeviceUsage],
    devices: ContainerDevices,
    policy: NodePolicy,
    rules: FitRules = GENERIC,
) -> float:
    """0..100 for one vendor's devices of a node after the placement.

    Spread: how empty the node's devices are (100 minus the mean of each device's
    ``load`` scaled to 0..1).

    Binpack: first, how few of the devices the pod lands on it opens (devices nobody
    used before): a node where the pod shares devices in use always beats one where it
    opens empty ones, so a full or exclusively held device is no reason to open another
    device beside it. Then, among nodes that open as many, the fullest node after the
    placement (the mean of every device's ``load`` scaled to 0..1, the pod's own share
    included; HAMi 2.10's binpack node score, ``pkg/scheduler/policy/node_policy.go``
    ``ComputeDefaultScore``, sums the same used fractions): pods gather on the fewest
    nodes, and the others keep whole free devices for exclusive and multi-device pods.
    As one number: ``100 x (shared + fullness) / (devices + 1)``, where ``devices`` is
    how many distinct devices the pod lands on and ``shared`` how many of them were
    already in use; ``fullness`` is below 1 while any device has room, so one more
    shared device outweighs any difference in fullness.

    The earlier binpack score (80 % how full the landing devices are, 20 % the node's
    other devices) sent each pod to the node with the tightest landing device, which
    spread small pods over every node; on the packing benchmark's overloaded streams
    in arrival order this rule places as many pods before the first refusal on streams
    1-20 and more on held-out streams (``benchmarks/packing_seeds.py``,
    docs/performance.md "Packing")."""
    if not usage:
        return 0.0
    after = {u.device.uuid: u for u in usage}
    for d in devices:
        if d.uuid in after:
            after[d.uuid] = after[d.uuid].charged(memory_mib=d.memory_mib, cores_pct=d.cores_pct)
    fullness = sum(min(load(u, rules) / 3, 1.0) for u in after.values()) / len(after)
    if policy is not NodePolicy.BINPACK:
        return 100.0 - fullness * 100
    before = {u.device.uuid: u for u in usage}
    landing = {d.uuid for d in devices if d.uuid in before}
    shared = sum(1 for uuid in landing if before[uuid].used_count > 0)
    return round(100.0 * (shared + fullness) / (len(landing) + 1), 9)


def fit_devices(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    filters: DeviceFilters,
    policy: DevicePolicy,
    rules: FitRules = GENERIC,
) -> FitResult:
    """Choose ``request.count`` distinct devices on ``node``, or explain why not.

    Args:
        request: one container's request for one vendor.
        node: the node (for link scores).
        usage: the node's devices of that vendor with current usage, in index order.
        filters: the pod's device filters.
        policy: the device policy.
        rules: the vendor's variations of the generic steps (NVIDIA: none).

    Returns:
        A ``FitResult``; on a no-fit every rejected device has its reason, and
        ``largest_memory_mib`` / ``largest_cores_pct`` say what would have fitted.
    """
    ordered = sorted(usage, key=lambda u: (u.device.index, u.device.uuid))
    reasons: dict[str, ReasonCode] = {}
    feasible: list[DeviceUsage] = []
    for u in ordered:
        reason = device_reason(u, request, filters, rules)
        if reason is None:
            feasible.append(u)
        else:
            reasons[u.device.uuid] = reason

    chosen: Sequence[DeviceUsage] | None = None
    node_reason: ReasonCode | None = None
    if len(ordered) < request.count:
        node_reason = ReasonCode.NODE_INSUFFICIENT_DEVICE
    elif len(feasible) >= request.count:
        picked = _choose(
            feasible,
            request.count,
            node,
            policy,
            rules,
            numa_bind=filters.numa_bind,
            ties=filters.tie_breaks,
            request=request,
            weights=filters.weights,
        )
        if isinstance(picked, ReasonCode):
            node_reason = picked
        else:
            chosen = picked
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
    largest_mem, largest_cores = _largest(ordered, request, filters, rules)
    return FitResult(
        device_reasons=reasons,
        node_reason=node_reason,
        largest_memory_mib=largest_mem,
        largest_cores_pct=largest_cores,
    )


def _largest(
    ordered: Sequence[DeviceUsage],
    request: DeviceRequest,
    filters: DeviceFilters,
    rules: FitRules,
) -> tuple[int | None, int | None]:
    """Most memory (MiB) / cores (percent) per device that a request of the same count
    and the same other dimension would get, or None when even 1 MiB / 1 percent would
    not fit (the device is excluded for another reason: compute exhausted, exclusivity,
    split count, filters). Every check runs on the probe, ``rules.extra_check`` included
    (a MIG GPU's placements, a card's partitions): a size named here is one the same
    check accepts (``largest_accepted``), never free memory no request can get."""

    def fits_with(u: DeviceUsage, *, memory_mib: int, cores_pct: int) -> bool:
        probe = attrs.evolve(
            request, count=1, memory_mib=memory_mib, memory_pct=0, cores_pct=cores_pct
        )
        return device_reason(u, probe, filters, rules) is None

    def memory_room(u: DeviceUsage) -> int | None:
        cores = min(request.cores_pct, free_cores(u, rules))
        return largest_accepted(
            lambda m: fits_with(u, memory_mib=m, cores_pct=cores), u.free_memory_mib
        )

    def cores_room(u: DeviceUsage) -> int | None:
        memory = max(1, min(request.memory_on(u.device), u.free_memory_mib))
        return largest_accepted(
            lambda c: fits_with(u, memory_mib=memory, cores_pct=c), free_cores(u, rules)
        )

    k = request.count - 1
    # Each probe shrinks the other dimension to what is free, so a request short of both
    # memory and cores gets both hints; whatever else blocks a device still excludes it.
    mem = sorted((r for r in map(memory_room, ordered) if r is not None), reverse=True)
    cores = sorted((r for r in map(cores_room, ordered) if r is not None), reverse=True)
    return (mem[k] if len(mem) > k else None, cores[k] if len(cores) > k else None)


def largest_accepted(accepts: Callable[[int], bool], most: int) -> int | None:
    """The largest ``n`` in ``1..most`` that ``accepts``: ``most`` itself when accepted
    (a check that takes only one size, as a Kunlunxin card already cut in quarters, takes
    what is free), else found by bisection (a check that accepts a size accepts the
    smaller ones: free memory, cores, a MIG profile that holds it). Whatever is returned
    was accepted; None when neither ``most`` nor 1 is."""
    if most < 1:
        return None
    if accepts(most):
        return most
    if not accepts(1):
        return None
    good, bad = 1, most
    while bad - good > 1:
        mid = (good + bad) // 2
        if accepts(mid):
            good = mid
        else:
            bad = mid
    return good


def _by(
    devices: Iterable[DeviceUsage], key: Callable[[DeviceUsage], int]
) -> dict[int, list[DeviceUsage]]:
    groups: dict[int, list[DeviceUsage]] = {}
    for u in devices:
        groups.setdefault(key(u), []).append(u)
    return groups


def rank(
    devices: Iterable[DeviceUsage],
    policy: DevicePolicy,
    rules: FitRules = GENERIC,
    ties: Sequence[DevicePolicy] = (),
    *,
    request: DeviceRequest | None = None,
    weights: DeviceScoringWeights | None = None,
) -> list[DeviceUsage]:
    """``devices`` in the policy's order: fullest first under binpack, emptiest first
    otherwise (spread, and the fallback of numa / topology-aware); ties by the ``ties``
    policies in order (binpack / spread by load, numa by lower NUMA node, as HAMi 2.10's
    ``lessByChain``), then by index.

    Under binpack with the ``request`` known, devices already in use come before empty
    ones (an empty device stays whole for an exclusive or multi-device pod), and among
    them the best fit first: the device left with the least room in its roomier
    dimension after the placement (``fit_leftover``), so a device is not left with its
    compute all taken and memory no one can use, or the reverse.

    With ``weights`` (the pod's ``hami.io/device-scoring-weights``) and the ``request``,
    HAMi 2.10's order instead: by ``weighted_score``, the highest first under binpack,
    the lowest first otherwise, for the ranking policy and the binpack / spread
    tie-breaks alike (``docs/develop/scheduler-policy.md``: the weights change only that
    score's order; a pod that writes them asks for it)."""
    sign = -1 if policy is DevicePolicy.BINPACK else 1
    measure: Callable[[DeviceUsage], float] = lambda u: load(u, rules)  # noqa: E731
    if weights is not None and request is not None:
        measure = lambda u: weighted_score(u, request, weights, rules)  # noqa: E731
    elif policy is DevicePolicy.BINPACK and request is not None:
        return sorted(
            devices,
            key=lambda u: (
                0 if u.used_count else 1,
                fit_leftover(u, request, rules),
                -load(u, rules),
                u.device.index,
                u.device.uuid,
            ),
        )

    def key(u: DeviceUsage) -> tuple[float, ...]:
        extra = [
            float(u.device.numa)
            if t is DevicePolicy.NUMA
            else (-1 if t is DevicePolicy.BINPACK else 1) * measure(u)
            for t in ties
            if t is not DevicePolicy.TOPOLOGY_AWARE
        ]
        return (sign * measure(u), *extra, float(u.device.index))

    return sorted(devices, key=lambda u: (key(u), u.device.uuid))


def rank_groups(
    groups: Mapping[int, Sequence[DeviceUsage]], policy: DevicePolicy, rules: FitRules = GENERIC
) -> list[int]:
    """Group ids in the policy's order: the fullest group (summed ``load``) first under
    binpack, the emptiest first otherwise; ties to the lower id."""
    sign = -1 if policy is DevicePolicy.BINPACK else 1

    def key(gid: int) -> tuple[float, int]:
        return (sign * round(sum(load(u, rules) for u in groups[gid]), 9), gid)

    return sorted(groups, key=key)


def _choose(
    feasible: list[DeviceUsage],
    count: int,
    node: NodeInfo,
    policy: DevicePolicy,
    rules: FitRules,
    *,
    numa_bind: bool,
    ties: Sequence[DevicePolicy] = (),
    request: DeviceRequest | None = None,
    weights: DeviceScoringWeights | None = None,
) -> Sequence[DeviceUsage] | ReasonCode:
    """The vendor's choice when it has one; else rank the feasible devices by policy and
    take ``count`` (a ReasonCode when no set exists, e.g. NUMA binding fails)."""
    if rules.choose is not None:
        own = rules.choose(feasible, count, policy)
        if own is not None:
            return own
    if numa_bind or policy is DevicePolicy.NUMA:
        fitting = {
            k: g for k, g in _by(feasible, lambda u: u.device.numa).items() if len(g) >= count
        }
        if fitting:
            # The fullest NUMA node that can host the whole container keeps others free.
            best = fitting[rank_groups(fitting, DevicePolicy.BINPACK, rules)[0]]
            inner = DevicePolicy.BINPACK if policy is DevicePolicy.NUMA else policy
            return rank(best, inner, rules, ties, request=request, weights=weights)[:count]
        if numa_bind:
            return ReasonCode.NUMA_NOT_FIT
    if count > 1 and rules.link_group is not None:
        fitting = {k: g for k, g in _by(feasible, rules.link_group).items() if len(g) >= count}
        if fitting:
            best = fitting[rank_groups(fitting, policy, rules)[0]]
            return sorted(
                rank(best, policy, rules, request=request, weights=weights)[:count],
                key=lambda u: (u.device.index, u.device.uuid),
            )
    # Link scores are keyed by UUID and published for NVIDIA GPUs: a vendor whose devices
    # have none (or a node without them) ranks by policy.
    if policy is DevicePolicy.TOPOLOGY_AWARE and any(
        u.device.uuid in node.link_scores for u in feasible
    ):
        ranked = rank(feasible, DevicePolicy.SPREAD, rules, request=request, weights=weights)
        return _topology(ranked, count, node.link_scores)
    return rank(feasible, policy, rules, ties, request=request, weights=weights)[:count]


def _topology(
    feasible: list[DeviceUsage], count: int, scores: Mapping[str, Mapping[str, int]]
) -> list[DeviceUsage]:
    """PROTOCOL.md §2: N >= 2 -> the set with the highest sum of pair scores; N = 1 ->
    the device with the lowest sum of scores to the other free devices, equal sums to
    the first of ``feasible`` (the caller's spread order: HAMi 2.10's topology policy
    consults its device order on a tie, ``score_test.go``
    ``TestCalcScoreUsesDeviceScoringWeightsAsTopologyTieBreaker``)."""

    def pair(a: DeviceUsage, b: DeviceUsage) -> int:
        return scores.get(a.device.uuid, {}).get(b.device.uuid, 0)

    by_index = sorted(feasible, key=lambda u: (u.device.index, u.device.uuid))
    if count == 1:
        order = {id(u): pos for pos, u in enumerate(feasible)}
        return [
            min(
                by_index,
                key=lambda u: (sum(pair(u, o) for o in by_index if o is not u), order[id(u)]),
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
