"""The planner on GPUs in MIG mode (issue 28): a pending pod that needs an instance gets
the moves that free a placement for it; no plan evicts a pod the rules keep; every
plan's end state respects each MIG GPU's geometry (instances at their profile's
placements, none overlapping, none beside a share, at most the split count, the booked
memory within the GPU) and over-commits no shared GPU.

Running pods are placed by the scheduler's own fit (pinned to a GPU for the scenario),
so their MIG instances and annotations are the ones a bind writes."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.cluster import MemoryCluster
from hami_core.defrag import exactplan
from hami_core.defrag.movable import MovePolicy
from hami_core.defrag.planner import Planner, bound_pod, mig_evictions
from hami_core.facts.holdings import HoldingsReader, ProblemLog
from hami_core.facts.nodes import read_node
from hami_core.model import DeviceRequest, DeviceUsage, MigPlacement, MigSlot
from hami_core.model.migusage import is_mig_gpu
from hami_core.scheduling.scheduler import Scheduler, utcnow
from tests.builders import manager
from tests.defrag.world import (
    A100_MIG,
    gpu_id,
    gpu_node,
    mig_node,
    owner,
    pending,
    world,
)

MGR = manager()
MIG = {"nvidia.com/vgpu-mode": "mig"}
#: The planner with its integer program (when HiGHS is installed) and the search alone.
EXACT = pytest.mark.parametrize("exact_s", [10.0, 0], ids=["program", "search"])


def place(cluster: MemoryCluster, pod: dict[str, Any], gpu: str | None = None) -> bool:
    """Bind ``pod`` where the scheduler's fit puts it (on ``gpu`` when named: the fit
    still chooses the instance), as a bind writes it; False when it fits nowhere."""
    probe = copy.deepcopy(pod)
    if gpu is not None:
        probe["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] = gpu
    result = Scheduler(cluster, MGR).filter(probe)
    best = result.best()
    if best is None:
        return False
    allocation = result.fits[best].allocation
    assert allocation is not None
    cluster.add_pod(bound_pod(pod, allocation, MGR, utcnow()))
    return True


def mig_pod(name: str, mem: int, *, owned: bool = True, **kw: Any) -> dict[str, Any]:
    """One GPU of ``mem`` MiB in MIG mode (the bundled example's ``mig-small`` shape)."""
    pod = pending(name, mem=mem, cores=0, annotations=dict(MIG), **kw)
    if owned:
        pod["metadata"]["ownerReferences"] = [owner("ReplicaSet", f"rs-{name}")]
    return pod


def instances(cluster: MemoryCluster, node: str) -> dict[str, DeviceUsage]:
    """The node's usage recomputed from its pods, as the scheduler reads it."""
    reader = HoldingsReader(MGR, ProblemLog(logging.getLogger("test")))
    info = read_node(cluster.get_node(node), MGR.device_types(), now=utcnow())
    return reader.usage_from_pods(info, cluster.pods_on_node(node), exclude_uid=None)


def slot_of(cluster: MemoryCluster, name: str) -> tuple[str, MigSlot | None]:
    """The GPU pod ``name`` holds and its MIG instance there, as the scheduler reads it."""
    pod = cluster.get_pod("default", name)
    reader = HoldingsReader(MGR, ProblemLog(logging.getLogger("test")))
    info = read_node(cluster.get_node(pod["spec"]["nodeName"]), MGR.device_types(), now=utcnow())
    held = reader.holdings(pod, info)
    (uuid,) = held.charges
    mig = held.mig.get(uuid, ())
    assert len(mig) <= 1
    return uuid, mig[0] if mig else None


# -- the estimate: which pods free a placement -------------------------------------------


def slots(*held: tuple[str, int, int]) -> tuple[MigSlot, ...]:
    return tuple(MigSlot(profile=p, placement=MigPlacement(start=s, size=n)) for p, s, n in held)


def a100(*held: tuple[str, int, int]) -> DeviceUsage:
    by_name = {p.name: p for p in A100_MIG}
    node = mig_node("n", 1)
    info = read_node(node, MGR.device_types(), now=utcnow())
    (device,) = info.devices
    return DeviceUsage(
        device=device,
        used_count=len(held),
        used_memory_mib=sum(by_name[p].memory_mib for p, _, _ in held),
        used_cores_pct=sum(by_name[p].cores_pct for p, _, _ in held),
        mig_in_use=slots(*held),
    )


def request(mem: int, *, cores: int = 0) -> DeviceRequest:
    return DeviceRequest(vendor="NVIDIA", count=1, memory_mib=mem, cores_pct=cores)


def test_the_fewest_pods_whose_instances_overlap_a_placement_of_a_profile_that_holds_it():
    # 1g at 2 and 3 (movable), 3g at 4 (not): a 3g fits only at 0, over both 1g
    usage = a100(("1g.10gb", 2, 1), ("1g.10gb", 3, 1), ("3g.40gb", 4, 4))
    movable = {"a": slots(("1g.10gb", 2, 1)), "b": slots(("1g.10gb", 3, 1))}
    assert mig_evictions(usage, request(30000), movable) == ["a", "b"]
    assert mig_evictions(usage, request(16000), movable) == []  # 2g at 0 is free
    assert mig_evictions(usage, request(60000), movable) is None  # 7g: the 3g stays
    # compute is a floor on the profile's share: 2g (29 %) does not hold 50 %, a 4g
    # (58 %, at 0 only) does; 60 % only a 7g
    assert mig_evictions(usage, request(16000, cores=50), movable) == ["a", "b"]
    assert mig_evictions(usage, request(16000, cores=60), movable) is None
    # the booked memory left (21 GiB) is no placement: the 7g's slices are held
    everything = {**movable, "c": slots(("3g.40gb", 4, 4))}
    assert mig_evictions(usage, request(60000), everything) == ["a", "b", "c"]


def test_a_share_beside_instances_goes_first_and_an_unmovable_one_blocks_the_gpu():
    usage = DeviceUsage(
        device=a100().device, used_count=2, used_memory_mib=9856 + 4000,
        mig_in_use=slots(("1g.10gb", 6, 1)),
    )  # fmt: skip
    held = {"i": slots(("1g.10gb", 6, 1)), "s": ()}
    assert mig_evictions(usage, request(8000), held) == ["s"]
    assert mig_evictions(usage, request(8000), {"i": held["i"]}) is None


# -- plans ----------------------------------------------------------------------------------


@EXACT
def test_a_whole_instance_gets_the_one_move_that_empties_a_gpu_never_the_bare_pod(exact_s):
    """GPU 0 holds two 1g (one a bare pod) with 62 GiB booked free, but a 7g needs every
    slice; GPU 1 holds a movable 3g, which fits beside the 1g on GPU 0. Before the MIG
    estimate the search read GPU 0 as free enough, evicted nothing and found no plan."""
    cluster = world([mig_node("node-0", 2)], [])
    assert place(cluster, mig_pod("bare", 8000, owned=False), gpu_id("node-0", 0))
    assert place(cluster, mig_pod("small", 8000), gpu_id("node-0", 0))
    assert place(cluster, mig_pod("half", 30000), gpu_id("node-0", 1))
    planner = Planner(cluster, MGR, MovePolicy.build(), exact_time_limit_s=exact_s)
    # no mode annotation: a plain request (on a MIG GPU an instance), so the search's
    # estimate alone chooses what to evict (with filters of its own, the search also
    # tries every movable pod of the node gone)
    whole = mig_pod("whole", 60000)
    del whole["metadata"]["annotations"]["nvidia.com/vgpu-mode"]
    plan = planner.plan([whole])
    (outcome,) = plan.outcomes
    assert outcome.gpus == (gpu_id("node-0", 1),), outcome.reason
    assert [(m.pod, m.from_gpus, m.to_gpus) for m in plan.moves] == [
        ("default/half", (gpu_id("node-0", 1),), (gpu_id("node-0", 0),))
    ]
    assert slot_of(cluster, "whole")[1] == MigSlot(
        profile="7g.80gb", placement=MigPlacement(start=0, size=8)
    )
    assert slot_of(cluster, "half") == (
        gpu_id("node-0", 0),
        MigSlot(profile="3g.40gb", placement=MigPlacement(start=0, size=4)),
    )
    assert slot_of(cluster, "bare")[0] == gpu_id("node-0", 0)  # never moved


@EXACT
def test_no_plan_when_only_unmovable_instances_hold_the_slices(exact_s):
    cluster = world([mig_node("node-0", 1)], [])
    assert place(cluster, mig_pod("bare", 8000, owned=False))
    plan = Planner(cluster, MGR, MovePolicy.build(), exact_time_limit_s=exact_s).plan(
        [mig_pod("whole", 60000)]
    )
    assert not plan.moves and not plan.outcomes[0].placed


# -- properties -----------------------------------------------------------------------------

MIG_SIZES = [8000, 16000, 30000, 60000]
SHARED_SIZES = [(8000, 10), (20000, 30), (40000, 50)]
running_pod = st.tuples(
    st.booleans(),  # a MIG instance, else a share
    st.integers(0, 3),  # the size's index
    st.sampled_from(["ReplicaSet", "ReplicaSet", "ReplicaSet", "none", "opt-out"]),
    st.integers(0, 2),
)
pending_pod = st.tuples(
    st.sampled_from(["mig", "mig", "whole", "fraction"]), st.integers(0, 3), st.integers(0, 2)
)


def build(spec: list[Any]) -> tuple[MemoryCluster, dict[str, dict[str, Any]]]:
    """Two MIG nodes and one shared node of 2 GPUs each, the pods of ``spec`` placed by the
    scheduler in order (those that fit nowhere left out)."""
    cluster = world([mig_node("node-0"), mig_node("node-1"), gpu_node("node-2")], [])
    pods = {}
    for i, (is_mig, size, kind, prio) in enumerate(spec):
        if is_mig:
            pod = mig_pod(f"r{i}", MIG_SIZES[size], owned=False, priority=prio)
        else:
            mem, cores = SHARED_SIZES[size % 3]
            pod = pending(f"r{i}", mem=mem, cores=cores, priority=prio)
        if kind != "none":
            pod["metadata"]["ownerReferences"] = [owner("ReplicaSet", f"o{i}")]
        if kind == "opt-out":
            pod["metadata"]["annotations"]["hami.io/defrag"] = "never"
        if place(cluster, pod):
            pods[f"default/r{i}"] = pod
    return cluster, pods


def target(j: int, what: str, size: int, prio: int) -> dict[str, Any]:
    if what == "mig":
        return mig_pod(f"p{j}", MIG_SIZES[size], priority=prio)
    if what == "whole":
        return pending(f"p{j}", priority=prio)
    mem, cores = SHARED_SIZES[size % 3]
    return pending(f"p{j}", mem=mem, cores=cores, priority=prio)


@EXACT
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(running_pod, min_size=4, max_size=14), st.lists(pending_pod, min_size=1, max_size=3)
)
def test_every_plan_keeps_the_rules_and_each_mig_gpu_s_geometry(exact_s, spec, waiting):
    cluster, pods = build(spec)
    targets = [target(j, *w) for j, w in enumerate(waiting)]
    plan = Planner(cluster, MGR, MovePolicy.build(), exact_time_limit_s=exact_s).plan(targets)
    priority = {o.pod: o.priority for o in plan.outcomes}
    for move in plan.moves:  # the rules, read from the pod itself
        original = pods[move.pod]
        meta = original["metadata"]
        assert meta["ownerReferences"][0]["kind"] == "ReplicaSet", move
        assert meta["annotations"].get("hami.io/defrag") != "never", move
        assert original["spec"]["priority"] <= priority[move.for_pod], move
    for name in ("node-0", "node-1", "node-2"):
        for usage in instances(cluster, name).values():
            dev = usage.device
            assert usage.used_count <= dev.split_count
            assert usage.used_memory_mib <= dev.memory_mib
            if not is_mig_gpu(dev):
                assert usage.used_cores_pct <= dev.cores_pct
                continue
            # every holder holds an instance, at one of its profile's placements
            assert usage.used_count == len(usage.mig_in_use)
            by_name = {p.name: p for p in dev.mig_profiles}
            for s in usage.mig_in_use:
                assert s.placement in by_name[s.profile].placements, s
            for i, a in enumerate(usage.mig_in_use):
                assert not any(a.placement.overlaps(b.placement) for b in usage.mig_in_use[i + 1 :])
    for o in plan.outcomes:
        if o.placed:
            bound = cluster.get_pod("default", o.pod.partition("/")[2])
            assert bound["spec"]["nodeName"] == o.node
            if o.node != "node-2":  # an instance that holds what it asked
                uuid, slot = slot_of(cluster, o.pod.partition("/")[2])
                assert slot is not None and uuid in o.gpus
                asked = int(
                    bound["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"]
                )
                profile = next(p for p in A100_MIG if p.name == slot.profile)
                assert profile.memory_mib >= asked
    for move in plan.moves:
        moved = cluster.get_pod("default", move.pod.partition("/")[2])
        assert moved["spec"]["nodeName"] == move.to_node


def test_the_property_s_worlds_hold_instances():
    cluster, pods = build([(True, 0, "ReplicaSet", 0), (True, 2, "none", 0)])
    assert len(pods) == 2
    assert slot_of(cluster, "r0")[1].profile == "1g.10gb"  # type: ignore[union-attr]
    assert slot_of(cluster, "r1")[1].profile == "3g.40gb"  # type: ignore[union-attr]


@EXACT
def test_a_pod_that_fits_an_instance_now_is_placed_without_moves(exact_s):
    """Five 1g instances book 75 % of the GPU's compute (15 % each, rounded up); a 2g
    (29 %) still has its placement at 0. The planner's room index read 25 % free, below
    the 29 asked, so the pod that fits now was planned for with moves."""
    cluster = world([mig_node("node-0", 1)], [])
    for i in range(5):
        assert place(cluster, mig_pod(f"one-{i}", 8000))
    plan = Planner(cluster, MGR, MovePolicy.build(), exact_time_limit_s=exact_s).plan(
        [pending("two", mem=16000, cores=29)]
    )
    (outcome,) = plan.outcomes
    assert outcome.placed and not plan.moves, outcome
    assert slot_of(cluster, "two")[1] == MigSlot(
        profile="2g.20gb", placement=MigPlacement(start=0, size=2)
    )


# -- the integer program on MIG GPUs --------------------------------------------------------


def program_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search fails loudly: what is placed, the program placed."""
    pytest.importorskip("highspy")

    def search(self: Planner, pod: Any) -> Any:
        raise AssertionError(f"the search was asked for {pod['metadata']['name']}")

    monkeypatch.setattr(Planner, "_plan_moves", search)


def test_the_program_empties_a_mig_gpu_for_a_whole_instance(monkeypatch):
    """The first scenario above, annotated (``nvidia.com/vgpu-mode: mig``): the program
    models the MIG GPUs (each placement a binary, no two instances on a slice) and its
    answer, carried out by the fit, is the one move."""
    program_only(monkeypatch)
    cluster = world([mig_node("node-0", 2)], [])
    assert place(cluster, mig_pod("bare", 8000, owned=False), gpu_id("node-0", 0))
    assert place(cluster, mig_pod("small", 8000), gpu_id("node-0", 0))
    assert place(cluster, mig_pod("half", 30000), gpu_id("node-0", 1))
    plan = Planner(cluster, MGR, MovePolicy.build()).plan([mig_pod("whole", 60000)])
    assert [(m.pod, m.to_gpus) for m in plan.moves] == [("default/half", (gpu_id("node-0", 0),))]
    assert slot_of(cluster, "whole") == (
        gpu_id("node-0", 1),
        MigSlot(profile="7g.80gb", placement=MigPlacement(start=0, size=8)),
    )


def test_the_program_moves_a_share_onto_an_instance_to_free_a_whole_card(monkeypatch):
    """A whole card needs the shared GPU's two small pods gone; only the MIG node has
    room for them, as instances (a 1g holds 8000 MiB at 10 %, a 2g 16000 at 20 %). A
    bare pod's instance on the MIG GPU stays where it is."""
    program_only(monkeypatch)
    cluster = world([gpu_node("node-0", 1), mig_node("node-1", 1)], [])
    for name, mem, cores in (("a", 8000, 10), ("b", 16000, 20)):
        pod = pending(name, mem=mem, cores=cores)
        pod["metadata"]["ownerReferences"] = [owner("ReplicaSet", f"rs-{name}")]
        assert place(cluster, pod, gpu_id("node-0", 0))
    assert place(cluster, mig_pod("bare", 30000, owned=False))  # a 3g at 4
    plan = Planner(cluster, MGR, MovePolicy.build()).plan([pending("card")])
    assert sorted((m.pod, m.to_node) for m in plan.moves) == [
        ("default/a", "node-1"),
        ("default/b", "node-1"),
    ]
    assert plan.outcomes[0].gpus == (gpu_id("node-0", 0),)
    held = instances(cluster, "node-1")[gpu_id("node-1", 0)].mig_in_use
    assert sorted(s.profile for s in held) == ["1g.10gb", "2g.20gb", "3g.40gb"]
    assert slot_of(cluster, "bare")[1] == MigSlot(
        profile="3g.40gb", placement=MigPlacement(start=4, size=4)
    )


def test_the_program_reads_one_mode_and_leaves_other_mode_lists_and_named_profiles_out():
    planner = Planner(world([mig_node("node-0", 1)], []), MGR, MovePolicy.build())
    assert exactplan.shape_of(planner, mig_pod("a", 8000)).mode == "mig"  # type: ignore[union-attr]
    assert exactplan.shape_of(planner, pending("b", mem=8000, cores=10)).mode == ""  # type: ignore[union-attr]
    both = mig_pod("c", 8000)
    both["metadata"]["annotations"]["nvidia.com/vgpu-mode"] = "mig,mps"
    assert exactplan.shape_of(planner, both) is None
    named = mig_pod("d", 8000)
    named["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    del named["metadata"]["annotations"]["nvidia.com/vgpu-mode"]
    assert exactplan.shape_of(planner, named) is None
