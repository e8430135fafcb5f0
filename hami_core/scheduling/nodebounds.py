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
from collections.abc import Sequence
from typing import Any

import attrs

from hami_core.facts.priority import pod_priority, terminating
from hami_core.model import MIG_PROFILE_INFO, DeviceRequest

from .state import ClusterState, NodeState

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
        extra: ``extra[n]``: the most devices beyond one each that ``n`` holders span
            together (spans of the pods still holding, widest first, minus one, summed).
        lowest: the lowest priority of a pod still holding a device (``_HELD`` if none).
        multi_instance: a device is in ``mig`` mode with several instances (the pod's N
            instances may share it: no count bound).
    """

    usable: int
    open_free: tuple[int, ...]
    extra: tuple[int, ...]
    lowest: int
    multi_instance: bool


@attrs.define
class NodeProfile:
    """``node_profile``'s answer, kept on ``NodeState.profile`` until the node changes.

    Attributes:
        devices: per device, who holds what (``DeviceProfile``).
        coarse: vendor -> its ``VendorCoarse``.
        memo: ``quick_bound`` per (requests, priority), at most 16.
    """

    devices: tuple[DeviceProfile, ...]
    coarse: dict[str, VendorCoarse]
    memo: dict[Any, Any] = attrs.field(factory=dict)


def _coarse(devices: Sequence[DeviceProfile]) -> dict[str, VendorCoarse]:
    per: dict[str, list[DeviceProfile]] = {}
    for d in devices:
        per.setdefault(d[0], []).append(d)
    out = {}
    for vendor, ds in per.items():
        open_free: list[int] = []
        spans: dict[str, int] = {}
        lowest = _HELD
        for _, usable, free, used, split, _, holders in ds:
            for prio, n, mib, leaving, key in holders:
                if leaving:
                    free += mib
                    used -= n
                elif prio < _HELD:
                    spans[key] = spans.get(key, 0) + 1
                    lowest = min(lowest, prio)
            if usable and used < split:
                open_free.append(free)
        extra = [0]
        for span in sorted(spans.values(), reverse=True):
            extra.append(extra[-1] + span - 1)
        out[vendor] = VendorCoarse(
            usable=sum(1 for d in ds if d[1]),
            open_free=tuple(sorted(open_free)),
            extra=tuple(extra),
            lowest=lowest,
            multi_instance=any(d[5] for d in ds),
        )
    return out


def coarse_bound(
    state: ClusterState, node: NodeState, requests: Sequence[DeviceRequest], mine: int
) -> tuple[int, int, int] | None:
    """A lower bound on the best ``(victims, highest victim priority, sum of
    priorities)`` a pod asking ``requests`` at priority ``mine`` can get on ``node``, from
    the node's pod-independent summary; None when no eviction can make it fit (fewer
    usable devices than asked, or devices to open and no pod of lower priority).

    Per request of N devices of a vendor: the devices that could be open without an
    eviction (``open_free`` with the memory asked) leave ``closed`` to open, each by at
    least one victim; ``n`` victims open at most ``n + extra[n]`` devices, so at least
    the smallest such ``n`` victims, each of priority ``lowest`` or more: a set of that
    size whose highest is ``lowest`` has all its priorities equal to it, hence the sum.
    Call under the state lock."""
    coarse = node_profile(state, node).coarse
    best = (0, _NO_VICTIM, 0)
    for req in requests:
        c = coarse.get(req.vendor)
        if c is None or c.usable == 0:
            return None
        if req.info(MIG_PROFILE_INFO) or c.multi_instance:
            continue  # N instances may share a device: no bound from the count
        if c.usable < req.count:
            return None
        opened = len(c.open_free) - bisect.bisect_left(c.open_free, req.memory_mib or 1)
        closed = req.count - opened
        if closed <= 0:
            continue
        if c.lowest >= mine:
            return None
        n = 1
        while n + c.extra[min(n, len(c.extra) - 1)] < closed:
            n += 1
        best = max(best, (n, c.lowest, n * c.lowest))
    return best


def _covering(spans: list[int], total: int) -> int:
    """The fewest of ``spans`` (widest first) summing to ``total`` or more (all of them
    when they do not)."""
    if total <= 0:
        return 0
    covered = 0
    for n, span in enumerate(sorted(spans, reverse=True), 1):
        covered += span
        if covered >= total:
            return n
    return len(spans)


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
    state: ClusterState, node: NodeState, requests: Sequence[DeviceRequest], mine: int
) -> tuple[int, int, int] | None:
    """``quick_bound`` over the node's profile, remembered with it (a pod retried, or
    pods of one shape and priority, ask again until the node changes)."""
    profile = node_profile(state, node)
    memo = profile.memo
    key = (tuple(requests), mine)
    if key not in memo:
        if len(memo) >= 16:
            memo.clear()
        memo[key] = quick_bound(profile.devices, requests, mine)
    return memo[key]  # type: ignore[no-any-return]


def quick_bound(
    profile: Sequence[DeviceProfile], requests: Sequence[DeviceRequest], mine: int
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
    it frees)."""
    best = (0, _NO_VICTIM, 0)
    for req in requests:
        devices = [d for d in profile if d[0] == req.vendor]
        sharing = bool(req.info(MIG_PROFILE_INFO)) or any(d[5] for d in devices)
        need = req.memory_mib or 1
        each: list[tuple[int, int, int]] = []
        spans: dict[str, int] = {}  # victim -> devices of this vendor it holds
        for _, usable, free, used, split, _, holders in devices:
            mine_here: list[tuple[int, int, int]] = []
            for prio, n, mib, leaving, key in holders:
                if leaving and prio < mine:  # a lower pod evicted before: room coming
                    free += mib
                    used -= n
                elif prio < mine:
                    mine_here.append((prio, n, mib))
                    spans[key] = spans.get(key, 0) + 1
            if not usable:
                continue
            if sharing:
                each.append((0, _NO_VICTIM, 0))
                continue
            mem_deficit, slot_deficit = need - free, used - split + 1
            fewest = _fewest([m for _, _, m in mine_here], mem_deficit)
            more = _fewest([n for _, n, _ in mine_here], slot_deficit)
            if fewest is None or more is None:
                continue
            k = max(fewest, more)
            top = _lowest_top(mine_here, mem_deficit, slot_deficit)
            each.append((k, top, sum(sorted(p for p, _, _ in mine_here)[:k])))
        wanted = 1 if sharing else req.count
        if len(each) < wanted:
            return None
        ks = sorted(k for k, _, _ in each)
        fewest_total = max(ks[wanted - 1], _covering(list(spans.values()), sum(ks[:wanted])))
        top = sorted(t for _, t, _ in each)[wanted - 1]
        summed = sorted(x for _, _, x in each)[wanted - 1]
        best = max(best, (fewest_total, top, summed))
    return best


def _lowest_top(holders: list[tuple[int, int, int]], mem_deficit: int, slot_deficit: int) -> int:
    """The lowest priority p such that the holders (``(priority, slots, MiB)``) of
    priority p or less free the deficits: no opening set's highest victim is below it
    (the holders free them all: the caller checked)."""
    if mem_deficit <= 0 and slot_deficit <= 0:
        return _NO_VICTIM
    mem = slots = 0
    for prio, n, mib in sorted(holders):
        mem += mib
        slots += n
        if mem >= mem_deficit and slots >= slot_deficit:
            return prio
    return _NO_VICTIM  # not reached


def _fewest(amounts: list[int], deficit: int) -> int | None:
    """The fewest of ``amounts`` summing to ``deficit`` or more (largest first), None
    when all do not."""
    if deficit <= 0:
        return 0
    total = 0
    for n, amount in enumerate(sorted(amounts, reverse=True), 1):
        total += amount
        if total >= deficit:
            return n
    return None


#: The "priority" of slices held for a pod not bound yet: above every pod's.
_HELD = 2**31
#: The highest victim priority of no victim at all: below every int32.
_NO_VICTIM = -(2**31) - 1


__all__ = [
    "DeviceProfile",
    "NodeProfile",
    "VendorCoarse",
    "coarse_bound",
    "node_bound",
    "node_profile",
    "quick_bound",
]
