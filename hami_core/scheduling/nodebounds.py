"""Per-node lower bounds on what preemption can get there, cheap enough for every node.

``choose_victims`` (``preemption``) visits nodes by their best possible answer and stops
when no node left can beat the best found. Two bounds, both lower bounds on kube-
scheduler's rank ``(victims, highest victim priority, sum of priorities, ...)`` of any
victim set that lets the pod fit:

- ``coarse_bound``, per decision and node in O(requests x log devices), from a summary
  that does not depend on the pod (``NodeProfile.coarse``): the devices that could be
  open with every leaving pod gone, how many devices one holder spans, the lowest
  priority there. It orders every node for a pod shape never seen before, so only the
  nodes that can still win get
- ``quick_bound``, per device: the fewest victims that free a slot and the memory, their
  lowest priorities (the pre-filter's rule, ``state.prefilter_miss``), remembered per
  pod shape and priority until the node changes (``node_bound``).

Both read ``node_profile``, rebuilt only for a node that changed (``NodeState.profile``
is cleared with its usage).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from typing import Any

import attrs

from hami_core.facts.priority import pod_priority, terminating
from hami_core.model import MIG_PROFILE_INFO, DeviceRequest

from .state import ClusterState, NodeState

#: Evictions per device ``coarse_bound`` looks at (more: counted as one more).
COARSE_DEPTH = 3
#: The "priority" of slices held for a pod not bound yet: above every pod's.
_HELD = 2**31
#: The highest victim priority of no victim at all: below every int32.
_NO_VICTIM = -(2**31) - 1

#: One device in a node's profile: vendor, whether it may take a pod at all (healthy,
#: not cordoned), free MiB, slots used, slots, in ``mig`` mode with several instances,
#: and its holders as ``(priority, slots, MiB, leaving, pod key)``.
DeviceProfile = tuple[str, bool, int, int, int, bool, tuple[tuple[int, int, int, bool, str], ...]]


@attrs.frozen
class VendorCoarse:
    """What ``coarse_bound`` reads of a node's devices of one vendor, for any pod.

    Attributes:
        usable: devices that may take a pod at all (healthy, not cordoned).
        open_free: free MiB of each usable device with a sharer slot once every leaving
            pod is gone, ascending (an upper bound on what each could offer unevicted).
        capacity: ``capacity[k - 1]`` (k = 1 .. ``COARSE_DEPTH``): per usable device whose k
            largest holders (by slots) free a sharer slot, its free MiB once its k
            largest holders (by MiB) and every leaving pod are gone, ascending: the
            most it can offer after k evictions.
        reach: ``reach[n]``: the most device places ``n`` holders take together (the
            spans of the pods still holding, widest first, summed; one each beyond
            them).
        lowest: the lowest priority of a pod still holding a device (``_HELD`` if none).
        next_lowest: the lowest priority above it (``_HELD`` if none).
        open_lowest: per usable device, its free MiB once every leaving pod and every
            pod of priority ``lowest`` are gone, if that frees a sharer slot, ascending.
        multi_instance: a device is in ``mig`` mode with several instances (the pod's N
            instances may share it: no count bound).
        span_prios / spans: each pod still holding a device, by priority (ascending),
            and how many of the vendor's devices it holds.
        spans_desc: prefix sums of ``spans``, widest first.
    """

    usable: int
    open_free: tuple[int, ...]
    capacity: tuple[tuple[int, ...], ...]
    reach: tuple[int, ...]
    lowest: int
    multi_instance: bool
    next_lowest: int = _HELD
    open_lowest: tuple[int, ...] = ()
    span_prios: tuple[int, ...] = ()
    spans: tuple[int, ...] = ()
    spans_desc: tuple[int, ...] = ()


@attrs.define
class NodeProfile:
    """``node_profile``'s answer, kept on ``NodeState.profile`` until the node changes.

    Attributes:
        devices: per device, who holds what (``DeviceProfile``).
        coarse: vendor -> its ``VendorCoarse``.
        memo: ``quick_bound`` per (``coarse_asks``, priority), at most 16.
        coarse_memo: ``coarse_bound`` alike.
        holders: vendor -> its usable devices' holders as prefix sums (``_Device``),
            made when ``quick_bound`` first asks.
    """

    devices: tuple[DeviceProfile, ...]
    coarse: dict[str, VendorCoarse]
    memo: dict[Any, Any] = attrs.field(factory=dict)
    coarse_memo: dict[Any, Any] = attrs.field(factory=dict)
    holders: dict[str, tuple[_Device, ...]] = attrs.field(factory=dict)


@attrs.frozen
class _Device:
    """One usable device's holders for ``quick_bound``, whatever the pod's priority: the
    pods still holding it (not leaving; never slices held for a pod not bound yet) by
    ``(priority, slots, MiB)``, as prefix sums a pod of priority ``mine`` cuts at its
    first holder of priority ``mine`` or more (``bisect`` on ``prios``)."""

    free: int
    used: int
    split: int
    leaving: tuple[tuple[int, int, int], ...]  # (priority, slots, MiB) of leaving pods
    prios: tuple[int, ...]
    mibs: tuple[int, ...]
    slots: tuple[int, ...]
    mem_by_prio: tuple[int, ...]  # prefix sums of ``mibs``
    slots_by_prio: tuple[int, ...]
    prio_sums: tuple[int, ...]  # prio_sums[k]: the k lowest priorities summed
    mem_desc: tuple[int, ...]  # prefix sums of every holder's MiB, largest first
    slots_desc: tuple[int, ...]


def _device(
    free: int, used: int, split: int, holders: Sequence[tuple[int, int, int, bool, str]]
) -> _Device:
    staying = sorted([(p, n, m) for p, n, m, gone, _ in holders if not gone and p < _HELD])
    prios, slots, mibs = zip(*staying, strict=True) if staying else ((), (), ())
    accumulate = itertools.accumulate
    return _Device(
        free=free,
        used=used,
        split=split,
        leaving=tuple((p, n, m) for p, n, m, gone, _ in holders if gone),
        prios=prios,
        mibs=mibs,
        slots=slots,
        mem_by_prio=tuple(accumulate(mibs)),
        slots_by_prio=tuple(accumulate(slots)),
        prio_sums=(0, *accumulate(prios)),
        mem_desc=tuple(accumulate(sorted(mibs, reverse=True))),
        slots_desc=tuple(accumulate(sorted(slots, reverse=True))),
    )


def _coarse(devices: Sequence[DeviceProfile]) -> dict[str, VendorCoarse]:
    per: dict[str, list[DeviceProfile]] = {}
    for d in devices:
        per.setdefault(d[0], []).append(d)
    out = {}
    for vendor, ds in per.items():
        open_free: list[int] = []
        spans: dict[str, list[int]] = {}  # pod -> [priority, devices it holds]
        lowest = _HELD
        capacity: list[list[int]] = [[] for _ in range(COARSE_DEPTH)]
        at_lowest: list[tuple[int, int, int, Any]] = []
        for _, usable, free, used, split, _, holders in ds:
            for prio, n, mib, leaving, key in holders:
                if leaving:
                    free += mib
                    used -= n
                elif prio < _HELD:
                    spans.setdefault(key, [prio, 0])[1] += 1
                    lowest = min(lowest, prio)
            if usable and used < split:
                open_free.append(free)
            if usable:
                at_lowest.append((free, used, split, holders))
                mibs = sorted(
                    (m for p, _, m, gone, _ in holders if not gone and p < _HELD), reverse=True
                )
                slots = sorted(
                    (n for p, n, _, gone, _ in holders if not gone and p < _HELD), reverse=True
                )
                for k in range(1, COARSE_DEPTH + 1):
                    if sum(slots[:k]) >= used - split + 1:
                        capacity[k - 1].append(free + sum(mibs[:k]))
        prios = sorted({p for p, _ in spans.values()})
        next_lowest = prios[1] if len(prios) > 1 else _HELD
        open_lowest = []
        for free, used, split, holders in at_lowest:
            for prio, n, mib, leaving, _ in holders:
                if prio == lowest and not leaving:
                    free += mib
                    used -= n
            if used < split:
                open_lowest.append(free)
        reach = [0]
        for _, span in sorted(spans.values(), key=lambda ps: -ps[1]):
            reach.append(reach[-1] + span)
        by_prio = sorted(spans.values())
        out[vendor] = VendorCoarse(
            usable=sum(1 for d in ds if d[1]),
            open_free=tuple(sorted(open_free)),
            capacity=tuple(tuple(sorted(c)) for c in capacity),
            reach=tuple(reach),
            lowest=lowest,
            multi_instance=any(d[5] for d in ds),
            next_lowest=next_lowest,
            open_lowest=tuple(sorted(open_lowest)),
            span_prios=tuple(p for p, _ in by_prio),
            spans=tuple(n for _, n in by_prio),
            spans_desc=tuple(itertools.accumulate(sorted((n for _, n in by_prio), reverse=True))),
        )
    return out


#: One device request as ``coarse_bound`` reads it: vendor, count, MiB (at least 1),
#: whether it names a MIG profile.
Ask = tuple[str, int, int, bool]


def coarse_asks(requests: Sequence[DeviceRequest]) -> tuple[Ask, ...]:
    """``requests`` as ``coarse_bound`` reads them, once per decision."""
    return tuple(
        (r.vendor, r.count, r.memory_mib or 1, bool(r.info(MIG_PROFILE_INFO))) for r in requests
    )


def coarse_bound(
    state: ClusterState, node: NodeState, asks: Sequence[Ask], mine: int
) -> tuple[int, int, int] | None:
    """A lower bound on the best ``(victims, highest victim priority, sum of
    priorities)`` a pod asking ``asks`` (``coarse_asks``) at priority ``mine`` can get
    on ``node``, from the node's pod-independent summary; None when no eviction can
    make it fit (fewer usable devices than asked, or devices to open and no pod of
    lower priority).

    Per request of N devices of a vendor: ``cnt[k]``, the devices that could open with k
    victims or fewer (``open_free``, ``capacity`` against the memory asked), gives the
    fewest victims on the N devices needing fewest, summed (``total``), and the N-th
    device's (``fewest``); ``n`` victims hold at most ``reach[n]`` of those device
    places, so at least the smallest such ``n`` victims, each of priority ``lowest`` or
    more: a set of that size whose highest is ``lowest`` has all its priorities equal
    to it, hence the sum. When evicting every pod of priority ``lowest`` does not open
    enough devices, a victim of ``next_lowest`` or more is needed: the highest is that.
    Call under the state lock."""
    profile = node.profile if node.profile is not None else node_profile(state, node)
    coarse = profile.coarse
    best = (0, _NO_VICTIM, 0)
    for vendor, count, need, mig in asks:
        c = coarse.get(vendor)
        if c is None or not c.usable:
            return None
        if mig or c.multi_instance:
            continue  # N instances may share a device: no bound from the count
        if c.usable < count:
            return None
        opened = len(c.open_free) - bisect.bisect_left(c.open_free, need)
        if opened >= count:
            continue
        if c.lowest >= mine:
            return None
        # ``cnt[k]``, devices that may open with k victims or fewer, for k = 0, 1, ...:
        # the count devices needing fewest want ``count - cnt[k]`` more than k victims
        # each, summed over k; ``fewest``, the first k where cnt[k] reaches count
        total = count - opened
        fewest = 1
        for caps in c.capacity:
            opened = len(caps) - bisect.bisect_left(caps, need)
            if opened >= count:
                break
            total += count - opened
            fewest += 1
        reach = c.reach
        n = bisect.bisect_left(reach, total)
        if n == len(reach):  # past every holder's span: one place each
            n = len(reach) - 1 + total - reach[-1]
        n = max(n, fewest)
        if len(c.open_lowest) - bisect.bisect_left(c.open_lowest, need) >= count:
            found = (n, c.lowest, n * c.lowest)
        elif c.next_lowest >= mine:
            return None  # the pods of the lowest priority are all it may evict: not enough
        else:  # one victim at least of the next priority: the highest is that or more
            found = (n, c.next_lowest, (n - 1) * c.lowest + c.next_lowest)
        if found > best:
            best = found
    return best


def _covering(prefix: Sequence[int], total: int) -> int:
    """The fewest spans (``prefix``: their sums, widest first) reaching ``total`` (all of
    them when they do not)."""
    if total <= 0:
        return 0
    return min(bisect.bisect_left(prefix, total) + 1, len(prefix))


def node_profile(state: ClusterState, node: NodeState) -> NodeProfile:
    """Who holds what on each device of ``node`` and its ``coarse`` summary, kept on the
    node until it changes (``NodeState.profile``): preemption's bounds read it for every
    node without building anything per pod. Call under the state lock with ``node`` from
    ``ClusterState.node``."""
    if node.profile is not None:
        return node.profile  # type: ignore[no-any-return]
    assert node.usage is not None
    per: dict[str, list[tuple[int, int, int, bool, str]]] = {}
    for key, held in node.pods.items():
        pod = state.pod_object(key)
        prio = pod_priority(pod) if pod is not None else _HELD
        leaving = pod is not None and terminating(pod)
        for uuid, charge in held.charges.items():
            per.setdefault(uuid, []).append((prio, charge.count, charge.memory_mib, leaving, key))
        for uuid in held.whole:
            u = node.usage.get(uuid)
            if u is not None:
                per.setdefault(uuid, []).append(
                    (prio, u.device.split_count, u.device.memory_mib, leaving, key)
                )
    devices = tuple(
        (
            u.device.vendor,
            u.device.healthy and not u.cordoned,
            u.free_memory_mib,
            u.used_count,
            u.device.split_count,
            u.device.mode == "mig" and u.device.split_count > 1,
            tuple(per.get(uuid, ())),
        )
        for uuid, u in node.usage.items()
    )
    node.profile = NodeProfile(devices=devices, coarse=_coarse(devices))
    return node.profile  # type: ignore[no-any-return]


def node_bound(
    state: ClusterState,
    node: NodeState,
    requests: Sequence[DeviceRequest],
    mine: int,
    *,
    asks: tuple[Ask, ...] | None = None,
) -> tuple[int, int, int] | None:
    """``quick_bound`` over the node's profile, remembered with it (a pod retried, or
    pods of one shape and priority, ask again until the node changes); ``asks``:
    ``coarse_asks(requests)`` when the caller has it."""
    profile = node_profile(state, node)
    memo = profile.memo
    key = (coarse_asks(requests) if asks is None else asks, mine)
    if key not in memo:
        if len(memo) >= 16:
            memo.clear()
        memo[key] = quick_bound(profile, requests, mine)
    return memo[key]  # type: ignore[no-any-return]


def first_bound(
    state: ClusterState, node: NodeState, asks: tuple[Ask, ...], mine: int
) -> tuple[bool, tuple[int, int, int] | None]:
    """The sharpest bound the node's profile remembers for ``asks`` at priority
    ``mine``: ``(True, node_bound's answer)`` when it was computed, else ``(False,
    coarse_bound's)``, computed once and remembered too (a decision then reads one
    dict per node for a shape seen before). Call under the state lock."""
    profile = node_profile(state, node)
    key = (asks, mine)
    if key in profile.memo:
        return True, profile.memo[key]
    coarse = profile.coarse_memo.get(key, False)
    if coarse is False:
        if len(profile.coarse_memo) >= 16:
            profile.coarse_memo.clear()
        coarse = profile.coarse_memo[key] = coarse_bound(state, node, asks, mine)
    return False, coarse


def quick_bound(
    profile: NodeProfile, requests: Sequence[DeviceRequest], mine: int
) -> tuple[int, int, int] | None:
    """A lower bound on the best ``(victims, highest victim priority, sum of
    priorities)`` a pod asking ``requests`` can get on a node by evicting holders of
    priority below ``mine``; None when even evicting all of them cannot open enough
    devices (the pre-filter's rule). Lower-priority holders already leaving count as
    gone.

    Per device, the bound of any set opening it: its fewest victims k, the lowest top
    priority of a set opening it, the sum of its k lowest priorities. The pod's
    ``count`` devices each need such a set, and their union's is at least each one's,
    so each part of the node's bound is the ``count``-th smallest of the devices';
    the number is also at least the fewest victims whose spans (devices of the vendor
    each holds) cover the ``count`` smallest k summed (a victim counts once per device
    it frees). Each device's part is a few bisections of the prefix sums kept with the
    profile (``_Device``), cut at the pod's priority."""
    best = (0, _NO_VICTIM, 0)
    for req in requests:
        vendor = profile.coarse.get(req.vendor)
        if vendor is None:
            return None
        sharing = bool(req.info(MIG_PROFILE_INFO)) or vendor.multi_instance
        need = req.memory_mib or 1
        each: list[tuple[int, int, int]] = []
        devices = profile.holders.get(req.vendor)
        if devices is None:
            devices = profile.holders[req.vendor] = tuple(
                _device(free, used, split, holders)
                for v, usable, free, used, split, _, holders in profile.devices
                if v == req.vendor and usable
            )
        for d in devices:
            if sharing:
                each.append((0, _NO_VICTIM, 0))
                continue
            free, used = d.free, d.used
            for prio, n, mib in d.leaving:
                if prio < mine:  # a lower pod evicted before: room coming
                    free += mib
                    used -= n
            mem_deficit, slot_deficit = need - free, used - d.split + 1
            cut = bisect.bisect_left(d.prios, mine)
            if cut == len(d.prios):
                mem_desc, slots_desc = d.mem_desc, d.slots_desc
            else:  # some holders are not this pod's to evict
                mem_desc = tuple(itertools.accumulate(sorted(d.mibs[:cut], reverse=True)))
                slots_desc = tuple(itertools.accumulate(sorted(d.slots[:cut], reverse=True)))
            fewest = _fewest(mem_desc, mem_deficit)
            more = _fewest(slots_desc, slot_deficit)
            if fewest is None or more is None:
                continue
            k = max(fewest, more)
            if mem_deficit <= 0 and slot_deficit <= 0:
                top = _NO_VICTIM
            else:  # the first priority by which the lowest holders free both
                at = max(
                    bisect.bisect_left(d.mem_by_prio, mem_deficit, 0, cut),
                    bisect.bisect_left(d.slots_by_prio, slot_deficit, 0, cut),
                )
                top = d.prios[at]
            each.append((k, top, d.prio_sums[k]))
        wanted = 1 if sharing else req.count
        if len(each) < wanted:
            return None
        ks = sorted(k for k, _, _ in each)
        cut = bisect.bisect_left(vendor.span_prios, mine)
        spans = (
            vendor.spans_desc
            if cut == len(vendor.spans)
            else tuple(itertools.accumulate(sorted(vendor.spans[:cut], reverse=True)))
        )
        fewest_total = max(ks[wanted - 1], _covering(spans, sum(ks[:wanted])))
        top = sorted(t for _, t, _ in each)[wanted - 1]
        summed = sorted(x for _, _, x in each)[wanted - 1]
        if cut and vendor.span_prios[0] < 0:
            # a victim of negative priority lowers the sum of the others: a device's
            # own sum is no bound then, but each of the fewest victims is at least the
            # lowest priority
            summed = min(summed, fewest_total * vendor.span_prios[0])
        best = max(best, (fewest_total, top, summed))
    return best


def whole_device_ranks(
    state: ClusterState, node: NodeState, vendor: str, mine: int
) -> tuple[tuple[int, int, int, str], ...]:
    """Per usable device of ``vendor`` on ``node`` that a pod of priority ``mine`` may
    take alone (every holder of lower priority; leaving lower ones count as gone),
    ``(victims, highest victim priority, sum of priorities, uuid)`` of evicting all its
    holders; a device with a holder of priority ``mine`` or more (or slices held for a
    pod not bound yet) is left out. Read from the node's profile and remembered with it
    (``NodeProfile.memo``) until the node changes. Call under the state lock."""
    profile = node_profile(state, node)
    key = ("whole-device", vendor, mine)
    if key in profile.memo:
        return profile.memo[key]  # type: ignore[no-any-return]
    uuids = list(node.usage or ())
    out = []
    for uuid, (v, usable, _, _, _, _, holders) in zip(uuids, profile.devices, strict=True):
        if v != vendor or not usable:
            continue
        prios = [p for p, _, _, leaving, _ in holders if not (leaving and p < mine)]
        if any(p >= mine for p in prios):
            continue
        out.append((len(prios), max(prios, default=_NO_VICTIM), sum(prios), uuid))
    if len(profile.memo) >= 16:
        profile.memo.clear()
    profile.memo[key] = result = tuple(out)
    return result


def _fewest(prefix: Sequence[int], deficit: int) -> int | None:
    """The fewest amounts (``prefix``: their sums, largest first) reaching ``deficit``,
    None when all do not."""
    if deficit <= 0:
        return 0
    at = bisect.bisect_left(prefix, deficit)
    return at + 1 if at < len(prefix) else None


__all__ = [
    "COARSE_DEPTH",
    "Ask",
    "DeviceProfile",
    "NodeProfile",
    "VendorCoarse",
    "coarse_asks",
    "coarse_bound",
    "first_bound",
    "node_bound",
    "node_profile",
    "quick_bound",
    "whole_device_ranks",
]
