"""The integer program (``hami_core.defrag.exact``) behind the planner: fewer moves than
the search where the search is not the fewest, never fewer pods placed, and the search
alone whenever the program cannot be trusted to model a pod (filters), is too large, or
HiGHS is absent; a tenant's own filter annotations never reach the program."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.defrag import exact, exactplan
from hami_core.defrag.movable import MovePolicy
from hami_core.defrag.planner import Planner
from tests.builders import manager
from tests.defrag.test_properties import GPUS, NODES, SIZES, build
from tests.defrag.world import MIB, gpu_node, owner, pending, running, world

pytest.importorskip("highspy")
MGR = manager()
HALF = MIB // 2

# A cluster where the search takes 2 moves for the 2-GPU pod and the program 1 (found
# by comparing the two on random clusters of test_properties' kind).
SPEC = [
    (1, (0,), (20000, 30)),
    (0, (0,), (HALF, 50)),
    (0, (1,), (20000, 30)),
    (2, (1,), (8000, 10)),
    (1, (0, 1), (HALF, 50)),
    (0, (1,), (20000, 30)),
    (1, (0,), (20000, 30)),
    (0, (0,), (HALF, 50)),
    (2, (0,), (20480, 25)),
    (0, (1,), (20000, 30)),
    (1, (1,), (20480, 25)),
    (0, (0,), (20480, 25)),
    (2, (0,), (HALF, 50)),
    (2, (0,), (20000, 30)),
    (2, (0, 1), (20000, 30)),
]
WAITING = [(2, (HALF, 50), 0), (1, (MIB, 100), 0)]


def fixture_plan(exact_s: float, **kw: Any):
    spec = [(n, g, size, "ReplicaSet", 0, False) for n, g, size in SPEC]
    pods, targets, budget = build(spec, WAITING, 2)
    cluster = world([gpu_node(f"node-{n}", GPUS) for n in range(NODES)], pods)
    planner = Planner(cluster, MGR, MovePolicy.build(budgets=[budget]), exact_time_limit_s=exact_s)
    return planner.plan(targets), pods


def test_the_program_finds_fewer_moves_than_the_search():
    searched, _ = fixture_plan(0)
    solved, _ = fixture_plan(exact.DEFAULT_TIME_LIMIT_S)
    placed = [o.pod for o in solved.outcomes if o.placed]
    assert placed == [o.pod for o in searched.outcomes if o.placed] and len(placed) == 1
    assert (len(searched.moves), len(solved.moves)) == (2, 1)
    # the move is real: the pod leaves GPUs the pending pod then holds, and is placed
    (move,) = solved.moves
    (out,) = [o for o in solved.outcomes if o.placed]
    assert move.for_pod == out.pod and set(move.from_gpus) & set(out.gpus)


def test_without_highs_or_above_the_size_the_search_plans(monkeypatch):
    monkeypatch.setattr(exact, "available", lambda: False)
    assert len(fixture_plan(exact.DEFAULT_TIME_LIMIT_S)[0].moves) == 2
    monkeypatch.undo()
    monkeypatch.setattr(exact, "MAX_TERMS", 0)
    assert len(fixture_plan(exact.DEFAULT_TIME_LIMIT_S)[0].moves) == 2


def test_pods_with_device_filters_stay_out_of_the_program():
    plain = pending("plain")
    assert exactplan.shape_of(Planner(world([], []), MGR, MovePolicy.build()), plain) is not None
    for key in ("nvidia.com/use-gputype", "nvidia.com/nouse-gpuuuid", "nvidia.com/numa-bind"):
        filtered = pending("f", annotations={key: "x"})
        planner = Planner(world([], []), MGR, MovePolicy.build())
        assert exactplan.shape_of(planner, filtered) is None


def test_a_tenant_s_uuid_filter_is_kept_and_the_pin_never_left_on_a_pod():
    """The tenant's pending pod may use only GPU 1 of node-0 (its own filter): the plan
    must place it there or not at all; no placed pod keeps the planner's pin."""
    pods = [
        running(f"h-{g}", "node-0", (g,), mem=HALF, cores=50, owned_by=owner()) for g in range(2)
    ]
    mine = pending(
        "mine", namespace="tenant", annotations={"nvidia.com/use-gpuuuid": "GPU-node-0-1"}
    )
    cluster = world([gpu_node("node-0"), gpu_node("node-1")], pods)
    plan = Planner(cluster, MGR, MovePolicy.build()).plan([mine])
    (out,) = plan.outcomes
    assert out.placed and out.gpus == ("GPU-node-0-1",)
    for pod in cluster.list_pods():
        annotations = pod["metadata"].get("annotations") or {}
        if pod["metadata"]["name"] != "mine":
            assert exactplan.PIN not in annotations
        else:
            assert annotations[exactplan.PIN] == "GPU-node-0-1"  # its own, as written


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, NODES - 1),
            st.sampled_from([(0,), (1,), (0, 1)]),
            st.sampled_from(SIZES[:2] + SIZES[3:]),
        ),
        min_size=6,
        max_size=16,
    ),
    st.lists(
        st.tuples(st.sampled_from([1, 1, 2]), st.sampled_from([(MIB, 100), (HALF, 50)])),
        min_size=1,
        max_size=3,
    ),
)
def test_the_program_never_places_fewer_nor_moves_more(spec, waiting):
    """One priority: the program's plan places at least as many pods as the search's,
    and the same pods with no more moves."""
    full = [(n, g, size, "ReplicaSet", 0, False) for n, g, size in spec]
    pods, targets, budget = build(full, [(c, size, 0) for c, size in waiting], 2)
    results = []
    for exact_s in (0, 10.0):
        cluster = world([gpu_node(f"node-{n}", GPUS) for n in range(NODES)], pods)
        planner = Planner(
            cluster, MGR, MovePolicy.build(budgets=[budget]), exact_time_limit_s=exact_s
        )
        plan = planner.plan(targets)
        results.append(({o.pod for o in plan.outcomes if o.placed}, len(plan.moves)))
    (searched, search_moves), (solved, solved_moves) = results
    assert len(solved) >= len(searched), results
    if solved == searched:  # (as many, others: the program prefers the older pods)
        assert solved_moves <= search_moves, results


def test_a_highspy_that_does_not_import_leaves_the_search(tmp_path, monkeypatch):
    """Installed but broken (an import error inside it): the planner's search plans, no
    crash (``find_spec`` alone said it was there)."""
    fake = tmp_path / "highspy"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "raise ImportError('numpy.core.multiarray failed to import')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "highspy", raising=False)
    exact.available.cache_clear()
    try:
        assert exact.available() is False
    finally:
        exact.available.cache_clear()


def test_the_scheduler_says_at_start_which_planner_it_has(monkeypatch, caplog):
    """``hami scheduler --consolidation`` logs whether its plans have the integer program
    (the image ships the defrag extra) or the search alone, and why."""
    import logging

    from kubernetes import client as k8s

    from hami_core.scheduling.scheduler import Scheduler
    from hami_core.servers.consolidation import start_consolidation
    from hami_core.servers.options import SchedulerOptions
    from tests.builders import cluster

    store = cluster()
    scheduler = Scheduler(store, MGR)
    opts = SchedulerOptions(consolidation=True, leader_elect=False)
    for has_highs, says in (
        (True, "planning with the integer program (highspy "),
        (False, "planning with the search alone (no HiGHS: the defrag extra"),
    ):
        monkeypatch.setattr(exact, "available", lambda has=has_highs: has)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="hami_core.servers.consolidation"):
            c = start_consolidation(
                opts, k8s.ApiClient(), scheduler, store, is_leader=lambda: False
            )
        assert c is not None
        c.stop()
        assert says in caplog.text, caplog.text
    assert "the integer program is off" in exact.describe(0)
    assert (
        start_consolidation(
            SchedulerOptions(), k8s.ApiClient(), scheduler, store, is_leader=lambda: False
        )
        is None
    )
