"""Which victim sets can open enough devices: the structure behind preemption's exact
search (``preemption``).

A pod asking N devices of one vendor fits a node only if N of its devices each have a
free sharer slot and the memory asked: the pre-filter's rule (``state.prefilter_miss``),
which every vendor's fit keeps. So a smallest victim set that lets the pod fit is, for
the N devices it ends up on, a union of one *minimal opening set* per device (a set of
the device's lower-priority holders whose eviction frees a slot and the memory, no
proper subset of which does), or contains one: any fitting set contains such a union.
``Openings`` lists each device's minimal opening sets and builds the unions of a given
size, so the search fits those few sets instead of every subset of the node's pods.

Only for a pod with one device request (one container, one vendor) that names no MIG
profile on a node without multi-instance MIG GPUs (N instances may share a GPU there);
``Openings.of`` answers None otherwise, and the search enumerates subsets.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.facts.priority import pod_priority, terminating
from hami_core.model import MIG_PROFILE_INFO, DeviceRequest, DeviceUsage

from .state import ClusterState, NodeState

#: Minimal opening sets kept per device (more: the search enumerates subsets).
MAX_PER_DEVICE = 64
#: Partial unions explored per size before giving up (the search enumerates subsets).
MAX_STEPS = 50_000


class TooMany(Exception):
    """The structure is too large to list: enumerate subsets instead."""


class Openings:
    """Per device, the minimal sets of victims (indices) whose eviction opens it."""

    def __init__(self, request: DeviceRequest, options: Sequence[tuple[frozenset[int], ...]]):
        self.count = request.count
        #: One entry per device that can be opened at all, smallest options first.
        self.options = sorted((o for o in options if o), key=lambda o: (len(o[0]), len(o)))

    @classmethod
    def of(
        cls,
        requests: Sequence[DeviceRequest],
        usage: Mapping[str, DeviceUsage],
        held: Sequence[Mapping[str, tuple[int, int]]],
    ) -> Openings | None:
        """The openings of a node for a pod's ``requests``, or None when the structure
        does not apply (module docstring).

        Args:
            usage: the node's usage with every victim still there.
            held: per victim (by index), uuid -> ``(slots, MiB)`` it holds.

        Raises:
            TooMany: a device has more minimal opening sets than ``MAX_PER_DEVICE``.
        """
        if len(requests) != 1 or requests[0].info(MIG_PROFILE_INFO):
            return None
        (req,) = requests
        devices = [u for u in usage.values() if u.device.vendor == req.vendor]
        if any(u.device.mode == "mig" and u.device.split_count > 1 for u in devices):
            return None
        need = req.memory_mib or 1
        options = []
        for u in devices:
            if not u.device.healthy or u.cordoned:
                continue
            mine = [(i, h[u.device.uuid]) for i, h in enumerate(held) if u.device.uuid in h]
            options.append(
                _minimal(mine, need - u.free_memory_mib, u.used_count - u.device.split_count + 1)
            )
        return cls(req, options)

    def unions(self, size: int) -> list[frozenset[int]]:
        """Every distinct union, of exactly ``size`` victims, of one option on each of
        ``count`` distinct devices.

        Raises:
            TooMany: more than ``MAX_STEPS`` partial unions were explored.
        """
        out: set[frozenset[int]] = set()
        steps = 0
        opts = self.options

        def walk(start: int, left: int, union: frozenset[int]) -> None:
            nonlocal steps
            if left == 0:
                if len(union) == size:
                    out.add(union)
                return
            for d in range(start, len(opts) - left + 1):
                for option in opts[d]:
                    steps += 1
                    if steps > MAX_STEPS:
                        raise TooMany
                    grown = union | option
                    if len(grown) <= size:
                        walk(d + 1, left - 1, grown)

        walk(0, self.count, frozenset())
        return sorted(out, key=sorted)

    def opened(self, victims: frozenset[int]) -> int:
        """How many devices evicting ``victims`` opens (the cheap necessary test)."""
        return sum(1 for opts in self.options if any(o <= victims for o in opts))

    @property
    def possible(self) -> bool:
        """Whether evicting every victim opens ``count`` devices."""
        return len(self.options) >= self.count


def _minimal(
    holders: Sequence[tuple[int, tuple[int, int]]], memory_deficit: int, slot_deficit: int
) -> tuple[frozenset[int], ...]:
    """The minimal sets of ``holders`` (``(victim, (slots, MiB))``) freeing
    ``memory_deficit`` MiB and ``slot_deficit`` slots; ``(frozenset(),)`` when the device
    is open already, ``()`` when no set suffices.

    Raises:
        TooMany: more than ``MAX_PER_DEVICE`` of them.
    """
    if memory_deficit <= 0 and slot_deficit <= 0:
        return (frozenset(),)
    if (
        sum(m for _, (_, m) in holders) < memory_deficit
        or sum(s for _, (s, _) in holders) < slot_deficit
    ):
        return ()
    found: list[frozenset[int]] = []
    for size in range(1, len(holders) + 1):
        for combo in itertools.combinations(holders, size):
            ids = frozenset(i for i, _ in combo)
            if any(f <= ids for f in found):
                continue
            if (
                sum(m for _, (_, m) in combo) >= memory_deficit
                and sum(s for _, (s, _) in combo) >= slot_deficit
            ):
                found.append(ids)
                if len(found) > MAX_PER_DEVICE:
                    raise TooMany
    return tuple(found)


#: One device in a node's profile: vendor, whether it may take a pod at all (healthy,
#: not cordoned), free MiB, slots used, slots, in ``mig`` mode with several instances,
#: and its holders as ``(priority, slots, MiB, leaving, pod key)``.
DeviceProfile = tuple[str, bool, int, int, int, bool, tuple[tuple[int, int, int, bool, str], ...]]


def node_profile(state: ClusterState, node: NodeState) -> tuple[DeviceProfile, ...]:
    """Who holds what on each device of ``node``, kept on the node until it changes
    (``NodeState.profile``): preemption's bound reads it for every node without
    building anything per pod. Call under the state lock with ``node`` from
    ``ClusterState.node``."""
    if node.profile is not None:
        return node.profile[0]  # type: ignore[no-any-return]
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
    node.profile = (devices, {})
    return devices


def node_bound(
    state: ClusterState, node: NodeState, requests: Sequence[DeviceRequest], mine: int
) -> tuple[int, int, int] | None:
    """``quick_bound`` over the node's profile, remembered with it (a pod retried, or
    pods of one shape and priority, ask again until the node changes)."""
    devices = node_profile(state, node)
    memo: dict[Any, Any] = node.profile[1]
    key = (tuple(requests), mine)
    if key not in memo:
        if len(memo) >= 16:
            memo.clear()
        memo[key] = quick_bound(devices, requests, mine)
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
    the number is also at least the ``count`` smallest k summed over the most devices
    one victim holds."""
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
        widest = max(spans.values(), default=1)
        fewest_total = max(ks[wanted - 1], -(-sum(ks[:wanted]) // widest))
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
    "MAX_PER_DEVICE",
    "MAX_STEPS",
    "DeviceProfile",
    "Openings",
    "TooMany",
    "node_bound",
    "node_profile",
    "quick_bound",
]
