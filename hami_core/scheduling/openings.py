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

from hami_core.model import MIG_PROFILE_INFO, DeviceRequest, DeviceUsage

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


__all__ = [
    "MAX_PER_DEVICE",
    "MAX_STEPS",
    "Openings",
    "TooMany",
]
