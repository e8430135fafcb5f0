"""The room index (``hami_core.defrag.room``) answers as a scan of every node does.

- on random rooms and random change sequences (nodes changed, nodes added and gone),
  ``RoomIndex.room`` is the scan's answer, and a question reads only the nodes changed
  since the shape was last asked about;
- in the planner, ``_room_for`` is the scan the planner made before the index (kept
  here as the reference), through every change the planner makes to its copy, and a
  plan is the same plan as the scanning planner's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.defrag.movable import MovePolicy
from hami_core.defrag.planner import Planner
from hami_core.defrag.room import DeviceFree, RoomIndex, Shape, shape_of
from hami_core.model import DeviceRequest
from tests.builders import manager
from tests.defrag.world import MIB, gpu_node, owner, pending, running, world

MGR = manager()


def scan(free: Mapping[str, Sequence[DeviceFree]], names: Sequence[str], shape, limit: int):
    """The planner's ``_room_for`` before the index, over ``free`` (node -> its devices)
    and the requests ``shape`` (``DeviceRequest``s): every node read."""
    ranked = []
    for name in names:
        devices = free[name]
        ok = True
        for req in shape:
            fitting = sum(
                1
                for vendor, mem, cores, slots, total, _ in devices
                if vendor == req.vendor
                and mem >= (req.memory_mib or total * req.memory_pct // 100)
                and cores >= req.cores_pct
                and slots >= 1
            )
            ok = ok and fitting >= req.count
        if ok:
            ranked.append((-sum(d[5] for d in devices), name))
    ranked.sort()
    return [name for _, name in ranked[:limit]]


# -- the index alone ------------------------------------------------------------------

VENDORS = ["NVIDIA", "MLU"]
TOTALS = [16384, 81920]

device = st.builds(
    lambda vendor, total, used_pct, cores, slots: (
        vendor,
        total - total * used_pct // 100,
        cores,
        slots,
        total,
        total * used_pct // 100,
    ),
    st.sampled_from(VENDORS),
    st.sampled_from(TOTALS),
    st.sampled_from([0, 25, 50, 75, 100]),
    st.sampled_from([0, 10, 50, 100]),
    st.integers(0, 2),
)
devices = st.lists(device, max_size=4)
request = st.builds(
    lambda vendor, count, memory, cores: DeviceRequest(
        vendor=vendor,
        count=count,
        memory_mib=memory if memory > 100 else 0,
        memory_pct=memory if memory <= 100 else 0,
        cores_pct=cores,
    ),
    st.sampled_from(VENDORS),
    st.integers(1, 3),
    st.sampled_from([50, 100, 4000, 12000, 40960]),
    st.sampled_from([0, 10, 50, 100]),
)
shapes = st.lists(st.lists(request, min_size=0, max_size=2), min_size=1, max_size=4)
NAMES = [f"n{i}" for i in range(8)]
step = st.one_of(
    st.tuples(st.just("change"), st.sampled_from(NAMES), devices),
    st.tuples(st.just("ask"), st.integers(0, 3), st.integers(1, 6)),
    st.tuples(st.just("ask"), st.integers(0, 3), st.integers(1, 6)),
    st.tuples(st.just("nodes"), st.sets(st.sampled_from(NAMES), min_size=1), st.just(0)),
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(NAMES), devices, min_size=3),
    shapes,
    st.lists(step, min_size=4, max_size=40),
)
def test_the_index_answers_as_a_scan_of_every_node(start, asked, steps):
    free = {name: start.get(name, []) for name in NAMES}
    names = sorted(start)
    index = RoomIndex(lambda name: free[name])
    for op, a, b in [("ask", i, 3) for i in range(len(asked))] + steps:
        if op == "change":
            free[a] = b
            index.changed(a)
        elif op == "nodes":
            names = sorted(a)
        else:
            wants = asked[a % len(asked)]
            assert index.room(shape_of(wants), names, b) == scan(free, names, wants, b)


def test_a_question_reads_only_the_nodes_changed_since():
    free: dict[str, list[DeviceFree]] = {
        f"n{i}": [("NVIDIA", MIB - 500 * i, 50, 1, MIB, 500 * i)] for i in range(50)
    }
    names = sorted(free)
    reads: list[str] = []

    def free_of(name: str) -> list[DeviceFree]:
        reads.append(name)
        return free[name]

    index = RoomIndex(free_of)
    half: Shape = shape_of([DeviceRequest(vendor="NVIDIA", count=1, memory_pct=50, cores_pct=50)])
    assert index.room(half, names, 3) == ["n49", "n48", "n47"]
    assert len(reads) == 50  # a shape first asked about reads every node
    reads.clear()
    free["n0"] = [("NVIDIA", 0, 0, 0, MIB, MIB)]  # n0 full now: no room, fullest
    free["n10"] = [("NVIDIA", MIB, 100, 1, MIB, 0)]  # n10 empty now
    index.changed("n0")
    index.changed("n10")
    index.changed("elsewhere")  # a pod of no node: nothing to read
    assert index.room(half, names, 50)[:2] == ["n49", "n48"]
    assert "n0" not in index.room(half, names, 50)
    assert index.room(half, names, 50)[-1] == "n10"
    assert sorted(reads) == ["n0", "n10"]
    reads.clear()
    assert index.room(half, names, 3) == ["n49", "n48", "n47"]
    assert reads == []


# -- in the planner -------------------------------------------------------------------


class ScanPlanner(Planner):
    """The planner as it was before the index: ``_room_for`` reads every node."""

    def _room_for(self, pod: Mapping[str, Any]) -> list[str]:
        wants = [r for c in self.scheduler.pod_request(pod).containers for r in c.devices]
        names = self.scheduler.state.node_names()
        return scan({n: self._free_of(n) for n in names}, names, wants, 4 * self.max_nodes)


NODES, GPUS = 6, 2
SIZES = [(MIB // 4, 25), (MIB // 2, 50), (8000, 10), (20000, 30), (MIB, 100)]
running_pod = st.tuples(
    st.integers(0, NODES - 1),
    st.sampled_from([(0,), (1,), (0, 1)]),
    st.sampled_from(SIZES),
    st.sampled_from([0, 0, 0, 1]),  # priority: the probes' is 0
)


def whole_card(name: str) -> dict[str, Any]:
    """A pending pod asking one GPU and nothing else: 100 % of its memory (a percent)."""
    pod = pending(name)
    for key in ("limits", "requests"):
        pod["spec"]["containers"][0]["resources"][key] = {"nvidia.com/gpu": "1"}
    return pod


PROBES = [
    whole_card("probe-card"),
    pending("probe-whole"),
    pending("probe-half", mem=MIB // 2, cores=50),
    pending("probe-two-halves", gpus=2, mem=MIB // 2, cores=50),
    pending("probe-small", mem=8000, cores=10),
]


def fill(spec: list[Any]) -> list[dict[str, Any]]:
    """Running pods of ``spec`` that fit on the GPUs they name (the others dropped)."""
    load: dict[tuple[int, int], tuple[int, int]] = {}
    pods = []
    for i, (n, gpus, (mem, cores), prio) in enumerate(spec):
        if any(
            load.get((n, g), (0, 0))[0] + mem > MIB or load.get((n, g), (0, 0))[1] + cores > 100
            for g in gpus
        ):
            continue
        for g in gpus:
            m, c = load.get((n, g), (0, 0))
            load[n, g] = (m + mem, c + cores)
        pods.append(
            running(
                f"r{i}", f"node-{n}", gpus, mem=mem, cores=cores, priority=prio, owned_by=owner()
            )
        )
    return pods


def planner_of(cls: type[Planner], pods: list[dict[str, Any]]) -> Planner:
    cluster = world([gpu_node(f"node-{n}", GPUS) for n in range(NODES)], pods)
    # max_nodes 1: at most 4 nodes answered, fewer than the cluster's 6
    return cls(cluster, MGR, MovePolicy.build(), max_nodes=1, exact_time_limit_s=0)


def scanned(planner: Planner, pod: Mapping[str, Any]) -> list[str]:
    return ScanPlanner._room_for(planner, pod)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(running_pod, min_size=4, max_size=20),
    st.lists(st.tuples(st.sampled_from(["remove", "put", "place"]), st.integers(0, 99))),
)
def test_the_planner_s_room_is_the_scan_s_through_its_changes(spec, changes):
    pods = fill(spec)
    planner = planner_of(Planner, pods)
    gone: list[dict[str, Any]] = []
    for op, i in [("ask", 0), *changes]:
        here = sorted(planner._objects)
        if op == "remove" and here:
            obj = planner._objects[here[i % len(here)]]
            planner._remove(obj)
            gone.append(obj)
        elif op == "put" and gone:
            planner._put(gone.pop(i % len(gone)))
        elif op == "place":
            probe = PROBES[i % len(PROBES)]
            fit = planner.scheduler.filter(probe, planner._room_for(probe))
            best = fit.best()
            if best is not None and fit.fits[best].allocation is not None:
                planner._place(probe, fit.fits[best].allocation)
        for probe in PROBES:
            assert planner._room_for(probe) == scanned(planner, probe)


@pytest.mark.parametrize("exact_s", [0, 10.0], ids=["search", "program"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(running_pod, min_size=12, max_size=30),
    st.lists(st.sampled_from(PROBES), min_size=1, max_size=4, unique_by=lambda p: id(p)),
)
def test_a_plan_is_the_scanning_planner_s(exact_s, spec, targets):
    pods = fill(spec)
    plans = []
    for cls in (Planner, ScanPlanner):
        planner = planner_of(cls, pods)
        planner.exact_time_limit_s = exact_s
        plans.append(planner.plan(targets))
    ours, theirs = plans
    assert (ours.outcomes, ours.gpus) == (theirs.outcomes, theirs.gpus)
