"""The planner's choices on hand-made clusters: the fewest moves, the GPUs before and
after, and every rule of who may move (controller, budget, priority, opt-out), including
the tenant who tries to use them against another namespace."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hami_core.defrag.movable import MovePolicy
from hami_core.defrag.planner import Planner
from tests.builders import manager
from tests.defrag.world import MIB, gpu_id, gpu_node, owner, pending, running, world

HALF = MIB // 2


@pytest.fixture(scope="module")
def mgr():
    return manager()


def halves(**kw: Any) -> list[dict[str, Any]]:
    """Two nodes of 2 GPUs, each GPU half full with one pod (``kw`` for every pod)."""
    kw.setdefault("owned_by", owner())
    return [
        running(f"h-{n}-{g}", f"node-{n}", (g,), mem=HALF, cores=50, **kw)
        for n in range(2)
        for g in range(2)
    ]


def plan(mgr, pods, targets, policy: MovePolicy | None = None, nodes: int = 2):
    c = world([gpu_node(f"node-{n}") for n in range(nodes)], pods)
    return Planner(c, mgr, policy or MovePolicy.build()).plan(targets)


def test_a_whole_card_gets_one_by_one_move_and_the_gpus_say_so(mgr):
    p = plan(mgr, halves(), [pending("big")])
    (out,) = p.outcomes
    assert out.placed and len(out.moves) == 1
    move = out.moves[0]
    # the moved pod leaves a GPU that the big pod then takes whole, and shares another
    assert move.to_gpus != move.from_gpus
    assert out.gpus == move.from_gpus
    changes = {(c.node, c.uuid): c for c in p.gpus}
    freed = changes[move.from_node, move.from_gpus[0]]
    assert (freed.before.memory_mib, freed.before.cores_pct) == (HALF, 50)
    assert (freed.after.memory_mib, freed.after.cores_pct, freed.after.sharers) == (MIB, 100, 1)
    shared = changes[move.to_node, move.to_gpus[0]]
    assert (shared.before.cores_pct, shared.after.cores_pct, shared.after.sharers) == (50, 100, 2)


def test_the_planner_reads_the_store_s_pods_without_changing_one(mgr):
    """The planner keeps the store's own pod objects (shared snapshots, not copies):
    a plan that evicts, replaces and places leaves every object it was given as it was."""
    c = world([gpu_node(f"node-{n}") for n in range(2)], halves())
    given = c.cached_pods()
    before = copy.deepcopy(given)
    (out,) = Planner(c, mgr, MovePolicy.build()).plan([pending("big")]).outcomes
    assert out.placed and len(out.moves) == 1
    assert given == before
    moved = out.moves[0].pod.split("/")[-1]
    assert all(
        p["spec"]["nodeName"] == out.moves[0].from_node
        for p in given
        if p["metadata"]["name"] == moved
    )


def test_a_pod_that_fits_is_placed_without_moves(mgr):
    (out,) = plan(mgr, halves(), [pending("small", mem=8000, cores=10)]).outcomes
    assert out.placed and out.moves == ()


def test_bare_pods_never_move(mgr):
    (out,) = plan(mgr, halves(owned_by=None), [pending("big")]).outcomes
    assert not out.placed and out.moves == ()
    assert "no movable pods" in out.reason


def test_the_opt_out_annotation_protects_the_pod_that_carries_it_only(mgr):
    pods = halves()
    # every pod but h-1-1 opts out: the one move must be h-1-1's
    for p in pods:
        if p["metadata"]["name"] != "h-1-1":
            p["metadata"]["annotations"]["hami.io/defrag"] = "never"
    (out,) = plan(mgr, pods, [pending("big")]).outcomes
    assert [m.pod for m in out.moves] == ["default/h-1-1"]


def test_a_pdb_at_its_limit_stops_the_move(mgr):
    pods = halves(labels={"app": "web"})
    budget = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0},
    }
    (out,) = plan(mgr, pods, [pending("big")], MovePolicy.build(budgets=[budget])).outcomes
    assert not out.placed
    budget["status"]["disruptionsAllowed"] = 1
    (out,) = plan(mgr, pods, [pending("big")], MovePolicy.build(budgets=[budget])).outcomes
    assert out.placed and len(out.moves) == 1


def test_one_disruption_allowed_is_spent_once_across_pending_pods(mgr):
    pods = halves(labels={"app": "web"})
    budget = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1},
    }
    # two whole cards need two moves, the budget allows one
    outs = plan(
        mgr, pods, [pending("big-a"), pending("big-b")], MovePolicy.build(budgets=[budget])
    ).outcomes
    assert sum(len(o.moves) for o in outs) == 1
    assert [o.placed for o in outs] == [True, False]


def test_a_higher_priority_pod_is_never_moved_for_a_lower_one(mgr):
    (out,) = plan(mgr, halves(priority=10), [pending("big", priority=5)]).outcomes
    assert not out.placed and "no movable pods" in out.reason
    (out,) = plan(mgr, halves(priority=10), [pending("big", priority=10)]).outcomes
    assert out.placed


def test_jobs_move_only_with_restarts_left(mgr):
    pods = halves(owned_by=owner("Job", "train"))
    job = {
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"backoffLimit": 2},
        "status": {"failed": 2},
    }
    (out,) = plan(mgr, pods, [pending("big")], MovePolicy.build(jobs=[job])).outcomes
    assert not out.placed
    job["status"]["failed"] = 1
    (out,) = plan(mgr, pods, [pending("big")], MovePolicy.build(jobs=[job])).outcomes
    assert out.placed
    (out,) = plan(mgr, pods, [pending("big")], MovePolicy.build()).outcomes  # Job unread
    assert not out.placed


def test_daemonset_pods_and_protected_namespaces_never_move(mgr):
    (out,) = plan(mgr, halves(owned_by=owner("DaemonSet", "ds")), [pending("big")]).outcomes
    assert not out.placed
    pods = halves(namespace="team-b")
    policy = MovePolicy.build(protected_namespaces=["team-b"])
    assert not plan(mgr, pods, [pending("big")], policy).outcomes[0].placed
    policy = MovePolicy.build(namespace_labels={"team-b": {"hami.io/defrag": "never"}})
    assert not plan(mgr, pods, [pending("big")], policy).outcomes[0].placed
    assert plan(mgr, pods, [pending("big")]).outcomes[0].placed


def test_a_tenant_cannot_make_or_keep_another_namespace_s_pods_movable(mgr):
    """A tenant of team-a writes what it can on its own objects: an opt-out-looking
    annotation with other values, a PDB in its namespace selecting team-b's labels, a
    pending pod claiming the top priority in annotations. None of it reaches team-b's
    pods, which the administrator protected by label; and team-a's own opt-out keeps
    only team-a's pod."""
    b_pods = halves(namespace="team-b", labels={"app": "web"})
    greedy = pending(
        "greedy",
        namespace="team-a",
        annotations={"hami.io/defrag": "always", "hami.io/defrag-namespaces": "team-b"},
    )
    forged_pdb = {
        "metadata": {"name": "steal", "namespace": "team-a"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 100},
    }
    policy = MovePolicy.build(
        namespace_labels={"team-b": {"hami.io/defrag": "never"}}, budgets=[forged_pdb]
    )
    (out,) = plan(mgr, b_pods, [greedy], policy).outcomes
    assert not out.placed and out.moves == ()
    # team-b's real PDB at 0 is not lifted by team-a's PDB of 100 over the same labels
    real = {**forged_pdb, "metadata": {"name": "web", "namespace": "team-b"}}
    real = {**real, "status": {"disruptionsAllowed": 0}}
    policy = MovePolicy.build(budgets=[forged_pdb, real])
    assert not plan(mgr, b_pods, [greedy], policy).outcomes[0].placed


def test_an_evicted_pod_must_fit_elsewhere(mgr):
    # one node, both GPUs 60 % full: a move frees nothing, since the evicted pod fits
    # nowhere else with the big pod's room held
    pods = [
        running(f"h-{g}", "node-0", (g,), mem=HALF + 8000, cores=60, owned_by=owner())
        for g in range(2)
    ]
    (out,) = plan(mgr, pods, [pending("big")], nodes=1).outcomes
    assert not out.placed


def test_fewest_moves_prefers_the_node_needing_one(mgr):
    # node-0: four 25 % pods on GPU 0 and GPU 1 half full; node-1: one 50 % pod per GPU
    pods = [
        *(
            running(f"q-{g}-{i}", "node-0", (g,), mem=MIB // 4, cores=25, owned_by=owner())
            for g in range(2)
            for i in range(2)
        ),
        *(
            running(f"h-{g}", "node-1", (g,), mem=HALF, cores=50, owned_by=owner())
            for g in range(2)
        ),
    ]
    (out,) = plan(mgr, pods, [pending("big")]).outcomes
    assert out.placed and len(out.moves) == 1


def test_multi_gpu_pods_move_whole(mgr):
    pods = [
        running("pair", "node-0", (0, 1), mem=HALF, cores=50, owned_by=owner()),
        running("h-1-0", "node-1", (0,), mem=HALF, cores=50, owned_by=owner()),
        running("h-1-1", "node-1", (1,), mem=HALF, cores=50, owned_by=owner()),
    ]
    (out,) = plan(mgr, pods, [pending("two", gpus=2)]).outcomes
    assert out.placed
    assert {m.pod for m in out.moves} in ({"default/pair"}, {"default/h-1-0", "default/h-1-1"})
    if out.moves[0].pod == "default/pair":
        assert out.moves[0].from_gpus == (gpu_id("node-0", 0), gpu_id("node-0", 1))


def test_an_evicted_pod_that_fits_nowhere_gets_moves_of_its_own(mgr, monkeypatch):
    """Found by search over the property test's clusters: the whole card fits on node-0
    only after r6 (2 GPUs at 25 %) leaves, and r6 fits only where r0 sits; so r0 moves
    first (chained), then r6. Without chained moves there is no plan."""
    from hami_core.defrag import planner as planner_module
    from tests.defrag.test_properties import build, run

    spec = [
        (2, (1,), (40960, 50), "ReplicaSet", 0, False),
        (1, (1,), (40960, 50), "ReplicaSet", 0, False),
        (1, (0, 1), (40960, 50), "ReplicaSet", 0, False),
        (0, (0,), (20480, 25), "ReplicaSet", 0, False),
        (1, (1,), (20480, 25), "ReplicaSet", 0, False),
        (1, (0,), (20000, 30), "ReplicaSet", 0, False),
        (0, (0, 1), (20480, 25), "ReplicaSet", 0, False),
        (2, (0, 1), (40960, 50), "ReplicaSet", 0, False),
        (0, (1,), (20480, 25), "ReplicaSet", 0, False),
        (2, (1,), (20000, 30), "ReplicaSet", 0, False),
        (0, (0,), (20480, 25), "ReplicaSet", 0, False),
    ]
    pods, targets, budget = build(spec, [(1, (MIB, 100), 0)], 0)
    plan, _ = run(pods, targets, budget, 0)  # the search's chains (the program finds another)
    (out,) = plan.outcomes
    assert out.placed and out.node == "node-0"
    moved = [m.pod for m in out.moves]
    assert "default/r6" in moved and "default/r0" in moved
    assert moved.index("default/r0") < moved.index("default/r6")  # chained ones first
    monkeypatch.setattr(planner_module, "MOVE_DEPTH", 0)
    assert not run(pods, targets, budget, 0)[0].outcomes[0].placed


def test_a_plan_never_changes_a_pod_object_it_reads(mgr):
    """The planner copies only what a move changes (metadata, labels, annotations, spec,
    status) and shares the rest with the pod it read: every pod object it holds before
    planning and every pending pod it is given are as they were after a plan with
    moves, chained ones included (the evicted pods' replacements and the bound pods
    are built from them)."""
    from tests.defrag.test_properties import build

    spec = [  # test_an_evicted_pod_that_fits_nowhere_gets_moves_of_its_own's cluster
        (2, (1,), (40960, 50), "ReplicaSet", 0, False),
        (1, (1,), (40960, 50), "ReplicaSet", 0, False),
        (1, (0, 1), (40960, 50), "ReplicaSet", 0, False),
        (0, (0,), (20480, 25), "ReplicaSet", 0, False),
        (1, (1,), (20480, 25), "ReplicaSet", 0, False),
        (1, (0,), (20000, 30), "ReplicaSet", 0, False),
        (0, (0, 1), (20480, 25), "ReplicaSet", 0, False),
        (2, (0, 1), (40960, 50), "ReplicaSet", 0, False),
        (0, (1,), (20480, 25), "ReplicaSet", 0, False),
        (2, (1,), (20000, 30), "ReplicaSet", 0, False),
        (0, (0,), (20480, 25), "ReplicaSet", 0, False),
    ]
    pods, targets, _ = build(spec, [(1, (MIB, 100), 0), (1, (8000, 10), 0)], 0)
    for exact_s in (0, 10.0):  # the search's moves and the program's
        planner = Planner(
            world([gpu_node(f"node-{n}") for n in range(3)], pods),
            mgr,
            MovePolicy.build(),
            exact_time_limit_s=exact_s,
        )
        read = list(planner._objects.values())
        before = copy.deepcopy((read, targets))
        result = planner.plan(targets)
        assert len(result.moves) >= 2 and all(o.placed for o in result.outcomes)
        assert (read, targets) == before


def test_a_replacement_and_a_bound_pod_share_nothing_they_change(mgr):
    """``_replacement`` and ``bound_pod`` leave their pod as it was, and what they
    change is their own: writing to it (as ``hold_nominated`` writes an annotation)
    never reaches the pod they were made from."""
    from hami_core.defrag.planner import _replacement, bound_pod
    from hami_core.scheduling.scheduler import Scheduler, utcnow

    original = running(
        "r", "node-0", (0,), mem=HALF, cores=50, owned_by=owner(), labels={"app": "web"}
    )
    kept = copy.deepcopy(original)
    again = _replacement(original)
    assert original == kept
    assert again["metadata"]["uid"] == "uid-default-r-moved"
    assert "nodeName" not in again["spec"] and again["status"] == {"phase": "Pending"}
    assert again["metadata"]["labels"] == {"app": "web"}
    assert not any(k.startswith("hami.io/vgpu-") for k in again["metadata"]["annotations"])
    assert again["spec"]["containers"] == original["spec"]["containers"]

    cluster = world([gpu_node("node-0"), gpu_node("node-1")], [])
    result = Scheduler(cluster, mgr).filter(again, ["node-1"])
    allocation = result.fits["node-1"].allocation
    assert allocation is not None
    kept_again = copy.deepcopy(again)
    bound = bound_pod(again, allocation, mgr, utcnow())
    assert again == kept_again
    assert bound["spec"]["nodeName"] == "node-1" and bound["status"] == {"phase": "Running"}
    assert bound["metadata"]["labels"] == {"app": "web", "hami.io/vgpu-node": "node-1"}
    assert bound["metadata"]["annotations"]["hami.io/vgpu-node"] == "node-1"
    for obj in (again, bound):
        obj["metadata"]["annotations"]["x"] = "y"
        obj["metadata"]["labels"]["x"] = "y"
        obj["metadata"]["uid"] = "changed"
        obj["spec"]["nodeName"] = "elsewhere"
        obj["status"]["phase"] = "Failed"
    assert original == kept and again["metadata"]["uid"] == "changed"
    assert bound_pod(kept_again, allocation, mgr, utcnow())["metadata"]["uid"] == (
        "uid-default-r-moved"
    )
