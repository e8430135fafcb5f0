"""Properties of every plan, on random small clusters (hypothesis):

- no plan evicts a pod the rules keep (``MovePolicy.why_not``, budgets spent in order);
- every plan's end state is feasible and over-commits nothing: each GPU's memory,
  compute and sharers within its inventory, each placed or moved pod where the plan says;
- a pending pod's outcome is the same as in a plan of the pending pods of its priority
  and above only: lower-priority pods never make it worse off.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.defrag.movable import MovePolicy
from hami_core.defrag.planner import Planner
from hami_core.facts.holdings import HoldingsReader, ProblemLog
from hami_core.facts.nodes import read_node
from hami_core.scheduling.scheduler import utcnow
from tests.builders import manager
from tests.defrag.world import MIB, gpu_node, owner, pending, running, world

MGR = manager()
NODES, GPUS = 3, 2
SIZES = [(MIB // 4, 25), (MIB // 2, 50), (MIB, 100), (8000, 10), (20000, 30)]

running_pod = st.tuples(
    st.integers(0, NODES - 1),
    st.sampled_from([(0,), (1,), (0,), (1,), (0, 1)]),
    st.sampled_from(SIZES[:2] + SIZES[3:]),
    st.sampled_from(["ReplicaSet", "ReplicaSet", "ReplicaSet", "none", "DaemonSet", "opt-out"]),
    st.integers(0, 2),
    st.booleans(),  # covered by the budget
)
pending_pod = st.tuples(
    st.sampled_from([1, 1, 2]), st.sampled_from([(MIB, 100), (MIB // 2, 50)]), st.integers(0, 2)
)


def build(spec: list[Any], waiting: list[Any], allowed: int):
    load: dict[tuple[int, int], tuple[int, int, int]] = {}
    pods = []
    for i, (n, gpus, (mem, cores), kind, prio, in_pdb) in enumerate(spec):
        if any(
            load.get((n, g), (0, 0, 0))[0] + mem > MIB
            or load.get((n, g), (0, 0, 0))[1] + cores > 100
            for g in gpus
        ):
            continue
        for g in gpus:
            m, c, k = load.get((n, g), (0, 0, 0))
            load[n, g] = (m + mem, c + cores, k + 1)
        pods.append(
            running(
                f"r{i}",
                f"node-{n}",
                gpus,
                mem=mem,
                cores=cores,
                priority=prio,
                owned_by=None if kind in ("none", "opt-out") else owner(kind, f"o{i}"),
                labels={"pdb": "yes"} if in_pdb else {},
                annotations={"hami.io/defrag": "never"} if kind == "opt-out" else {},
            )
        )
        if kind == "opt-out":  # owned, but opted out
            pods[-1]["metadata"]["ownerReferences"] = [owner("ReplicaSet", f"o{i}")]
    targets = [
        pending(f"p{j}", gpus=g, mem=mem, cores=cores, priority=prio)
        for j, (g, (mem, cores), prio) in enumerate(waiting)
    ]
    budget = {
        "metadata": {"name": "b", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"pdb": "yes"}}},
        "status": {"disruptionsAllowed": allowed},
    }
    return pods, targets, budget


#: The planner with its integer program (when HiGHS is installed) and the search alone.
EXACT = pytest.mark.parametrize("exact_s", [10.0, 0], ids=["program", "search"])


def run(pods, targets, budget, exact_s=10.0):
    cluster = world([gpu_node(f"node-{n}", GPUS) for n in range(NODES)], pods)
    planner = Planner(cluster, MGR, MovePolicy.build(budgets=[budget]), exact_time_limit_s=exact_s)
    return planner.plan(targets), cluster


@EXACT
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(running_pod, min_size=6, max_size=16),
    st.lists(pending_pod, min_size=1, max_size=3),
    st.integers(0, 2),
)
def test_every_plan_keeps_the_rules_and_ends_feasible(exact_s, spec, waiting, allowed):
    pods, targets, budget = build(spec, waiting, allowed)
    plan, cluster = run(pods, targets, budget, exact_s)
    by_key = {f"default/{p['metadata']['name']}": p for p in pods}
    priority = {o.pod: o.priority for o in plan.outcomes}
    fresh = MovePolicy.build(budgets=[budget])
    for move in plan.moves:
        original = by_key[move.pod]
        assert fresh.why_not(original, for_priority=priority[move.for_pod]) is None, move
        fresh.spend(original)
        # and read directly, not through the rules' code
        meta = original["metadata"]
        assert meta["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert meta["annotations"].get("hami.io/defrag") != "never"
        assert original["spec"]["priority"] <= priority[move.for_pod]
    in_budget = [m for m in plan.moves if by_key[m.pod]["metadata"]["labels"].get("pdb")]
    assert len(in_budget) <= allowed
    # the end state: usage recomputed from the pods, as the scheduler reads it
    reader = HoldingsReader(MGR, ProblemLog(__import__("logging").getLogger("test")))
    for n in range(NODES):
        name = f"node-{n}"
        info = read_node(cluster.get_node(name), MGR.device_types(), now=utcnow())
        for usage in reader.usage_from_pods(
            info, cluster.pods_on_node(name), exclude_uid=None
        ).values():
            assert usage.used_memory_mib <= usage.device.memory_mib
            assert usage.used_cores_pct <= usage.device.cores_pct
            assert usage.used_count <= usage.device.split_count
    for o in plan.outcomes:
        if o.placed:
            ns, _, pod_name = o.pod.partition("/")
            assert cluster.get_pod(ns, pod_name)["spec"]["nodeName"] == o.node
    for move in plan.moves:
        placed = cluster.get_pod("default", move.pod.partition("/")[2])
        assert placed["spec"]["nodeName"] == move.to_node
        held = info_gpus(placed)
        assert held == set(move.to_gpus)


def info_gpus(pod: dict[str, Any]) -> set[str]:
    from hami_core.protocol.devicelist import decode_pod_devices

    devices = decode_pod_devices(pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"])
    return {d.uuid for c in devices for d in c}


@EXACT
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(running_pod, min_size=6, max_size=16),
    st.lists(pending_pod, min_size=2, max_size=4),
    st.integers(0, 2),
)
def test_lower_priority_pods_never_change_a_higher_one_s_outcome(exact_s, spec, waiting, allowed):
    pods, targets, budget = build(spec, waiting, allowed)
    whole, _ = run(pods, targets, budget, exact_s)
    for o in whole.outcomes:
        alone, _ = run(
            pods, [t for t in targets if t["spec"]["priority"] >= o.priority], budget, exact_s
        )
        (same,) = [x for x in alone.outcomes if x.pod == o.pod]
        assert same == o
