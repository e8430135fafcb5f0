"""Which nodes may have room for a pod, kept per pod shape as the planner changes nodes.

For every pod the planner places or re-places it asks the scheduler's fit on the nodes
where the pod may fit: every device request has enough devices of its vendor with the
memory, compute and a sharer slot free (a necessary condition; the fit decides), fullest
first (most device memory used), at most a bound. Asking every node of the cluster each
time cost 1.5 s of a 3.5 s plan on 1000 nodes (``benchmarks/bench_defrag.py``, sixty
re-placements each reading 1000 nodes); ``RoomIndex`` keeps, per pod shape asked about,
the nodes with room in that order, and brings it up to date only for the nodes changed
since the shape was last asked about: a question costs the nodes changed since, not the
cluster. Its answers are those of the scan (``tests/defrag/test_room.py`` holds it to a
scan on random clusters and random change sequences).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence

import attrs

from hami_core.model import DeviceRequest

#: One device's room, as ``Planner._free_of`` reads it: vendor, free MiB, free percent
#: of compute, free sharer slots, its MiB, its used MiB (cordoned devices left out).
DeviceFree = tuple[str, int, int, int, int, int]
#: A pod's device requests as far as room goes, one per request, sorted:
#: (vendor, count, MiB per device or 0, percent of each device's memory or 0, cores %).
Shape = tuple[tuple[str, int, int, int, int], ...]


def shape_of(wants: Iterable[DeviceRequest]) -> Shape:
    """The shape of the device requests ``wants`` (every container's, as the pod asks)."""
    return tuple(
        sorted((r.vendor, r.count, r.memory_mib, r.memory_pct, r.cores_pct) for r in wants)
    )


def has_room(devices: Sequence[DeviceFree], shape: Shape) -> bool:
    """Whether every request of ``shape`` finds ``count`` devices of its vendor with the
    memory (MiB, or its percent of the device's), the compute and a sharer slot free.
    Each request is weighed alone, against all the node's devices: a necessary
    condition of a fit, not a sufficient one."""
    for vendor, count, memory_mib, memory_pct, cores_pct in shape:
        free = 0
        for d_vendor, d_mem, d_cores, d_slots, d_total, _ in devices:
            if (
                d_vendor == vendor
                and d_mem >= (memory_mib or d_total * memory_pct // 100)
                and d_cores >= cores_pct
                and d_slots >= 1
            ):
                free += 1
        if free < count:
            return False
    return True


def fullness(devices: Sequence[DeviceFree]) -> int:
    """Device memory used on a node, MiB (the order: fullest first)."""
    return sum(d[5] for d in devices)


@attrs.define
class _Ranked:
    """One shape's nodes with room, ``(-fullness, name)`` ascending, and the nodes
    changed since it was last brought up to date."""

    order: list[tuple[int, str]]
    keys: dict[str, tuple[int, str]]
    stale: set[str] = attrs.field(factory=set)


class RoomIndex:
    """Per pod shape, the nodes with room for it, fullest first (the module docstring).

    The owner reports every node it changes (``changed``) before asking again; a
    node's room is read through ``free_of`` only when a shape is first asked about or
    the node changed since. What ``free_of`` returns must not change without a
    ``changed`` call (the planner's ``_free_of`` caches by the same changes).
    """

    def __init__(self, free_of: Callable[[str], Sequence[DeviceFree]]) -> None:
        """Args:
        free_of: node name -> its devices' room (``DeviceFree``), in any order.
        """
        self._free_of = free_of
        self._names: list[str] = []  # the node names the lists were built over
        self._known: frozenset[str] = frozenset()
        self._shapes: dict[Shape, _Ranked] = {}

    def changed(self, node: str) -> None:
        """Note that node ``node``'s room may have changed (its pods did)."""
        if node in self._known:
            for ranked in self._shapes.values():
                ranked.stale.add(node)

    def room(self, shape: Shape, names: Sequence[str], limit: int) -> list[str]:
        """The nodes of ``names`` (the cluster's, sorted) with room for ``shape``
        (``has_room``), fullest first, then by name, at most ``limit`` of them. A
        ``names`` other than the last one asked with starts every shape afresh."""
        if names != self._names:
            self._names, self._known, self._shapes = list(names), frozenset(names), {}
        ranked = self._shapes.get(shape)
        if ranked is None:
            ranked = self._shapes[shape] = self._build(shape)
        elif ranked.stale:
            self._refresh(shape, ranked)
        return [name for _, name in ranked.order[:limit]]

    def _build(self, shape: Shape) -> _Ranked:
        keys = {}
        for name in self._names:
            devices = self._free_of(name)
            if has_room(devices, shape):
                keys[name] = (-fullness(devices), name)
        return _Ranked(order=sorted(keys.values()), keys=keys)

    def _refresh(self, shape: Shape, ranked: _Ranked) -> None:
        for name in ranked.stale:
            old = ranked.keys.pop(name, None)
            if old is not None:
                del ranked.order[bisect.bisect_left(ranked.order, old)]
            devices = self._free_of(name)
            if has_room(devices, shape):
                key = ranked.keys[name] = (-fullness(devices), name)
                bisect.insort(ranked.order, key)
        ranked.stale.clear()
