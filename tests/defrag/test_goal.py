"""The goal "N whole free GPUs (of model M)": parsing, the fewest moves that empty GPUs,
the model filter, the rules of who may move, and ``hami defrag --goal``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.defrag import exact
from hami_core.defrag.goal import WholeGpus, parse_goal
from hami_core.defrag.movable import MovePolicy
from hami_core.defrag.planner import Planner
from hami_core.errors import InvalidInputError
from hami_core.facts.holdings import HoldingsReader, ProblemLog
from hami_core.facts.nodes import read_node
from hami_core.scheduling.scheduler import utcnow
from tests.builders import gpu, manager, node
from tests.defrag.world import MIB, gpu_id, gpu_node, owner, running, world

HALF = MIB // 2


@pytest.fixture(scope="module")
def mgr():
    return manager()


def model_node(name: str, model: str, gpus: int = 2) -> dict[str, Any]:
    obj = node(
        name,
        [gpu(gpu_id(name, i), index=i, memory_mib=MIB, model=model) for i in range(gpus)],
    )
    obj["metadata"]["labels"] = {"kubernetes.io/hostname": name}
    return obj


def halves(nodes: int = 2, **kw: Any) -> list[dict[str, Any]]:
    """Every GPU of ``nodes`` nodes of 2 GPUs half full with one pod."""
    kw.setdefault("owned_by", owner())
    return [
        running(f"h-{n}-{g}", f"node-{n}", (g,), mem=HALF, cores=50, **kw)
        for n in range(nodes)
        for g in range(2)
    ]


def free_gpus(mgr, cluster, nodes: list[str]) -> set[str]:
    """GPUs no pod holds, read back from the pods as the scheduler reads them."""
    reader = HoldingsReader(mgr, ProblemLog(__import__("logging").getLogger("test")))
    free = set()
    for name in nodes:
        info = read_node(cluster.get_node(name), mgr.device_types(), now=utcnow())
        for uuid, usage in reader.usage_from_pods(
            info, cluster.pods_on_node(name), exclude_uid=None
        ).items():
            if usage.used_count == 0:
                free.add(uuid)
    return free


def test_parse_goal():
    assert parse_goal("whole-gpus=4") == WholeGpus(count=4)
    assert parse_goal("whole-gpus=2, model=A100,priority=-5") == WholeGpus(
        count=2, model="A100", priority=-5
    )
    assert parse_goal("whole-gpus=3,model=H100").text() == "whole-gpus=3,model=H100"


@pytest.mark.parametrize(
    "text, named",
    [
        ("", "KEY=VALUE"),
        ("gpus=2", "unknown key 'gpus'"),
        ("model=A100", "whole-gpus=N is required"),
        ("whole-gpus=two", "whole-gpus must be an integer"),
        ("whole-gpus=0", "whole-gpus must be 1.."),
        ("whole-gpus=1,whole-gpus=2", "whole-gpus given twice"),
        ("whole-gpus=1,model=", "model is empty"),
        ("whole-gpus=1,priority=high", "priority must be an integer"),
    ],
)
def test_bad_goals_are_named(text, named):
    with pytest.raises(InvalidInputError, match=named):
        parse_goal(text)


def test_free_gpus_are_counted_without_moves(mgr):
    pods = halves()[:2]  # node-1's GPUs are free
    cluster = world([gpu_node("node-0"), gpu_node("node-1")], pods)
    plan = Planner(cluster, mgr, MovePolicy.build()).plan_goal(WholeGpus(count=2))
    assert plan.goal is not None and plan.goal.met
    assert (plan.goal.free_before, plan.goal.reached, plan.moves) == (2, 2, ())
    assert {g for _, g in plan.goal.gpus} == {gpu_id("node-1", 0), gpu_id("node-1", 1)}
    assert plan.gpus == ()  # the goal's pods leave nothing behind


def test_two_whole_gpus_from_four_half_full_take_two_moves(mgr):
    cluster = world([gpu_node("node-0"), gpu_node("node-1")], halves())
    plan = Planner(cluster, mgr, MovePolicy.build()).plan_goal(WholeGpus(count=2))
    assert plan.goal is not None and plan.goal.met and plan.goal.free_before == 0
    assert len(plan.moves) == 2  # the fewest: each move empties one GPU
    found = {g for _, g in plan.goal.gpus}
    assert len(found) == 2
    # the end state: those GPUs hold nothing, every pod is still placed, nothing over-full
    assert found <= free_gpus(mgr, cluster, ["node-0", "node-1"])
    assert len(cluster.list_pods()) == 4
    for m in plan.moves:
        assert set(m.from_gpus) <= found and not set(m.to_gpus) & found
        assert m.for_pod.startswith("(goal)/")
    after = {(c.node, c.uuid): c.after for c in plan.gpus}
    for n, g in plan.goal.gpus:
        assert after[n, g].sharers == 0 and after[n, g].memory_mib == 0


def test_a_goal_it_cannot_reach_says_how_far_it_got(mgr):
    # node-0's pods are bare (never moved) and leave room for no half; node-1's two pods
    # can only share one GPU: one whole GPU is reachable of two
    pods = [running(f"b-{g}", "node-0", (g,), mem=HALF + 8000, cores=60) for g in range(2)] + [
        running(f"o-{g}", "node-1", (g,), mem=HALF, cores=50, owned_by=owner()) for g in range(2)
    ]
    cluster = world([gpu_node("node-0"), gpu_node("node-1")], pods)
    plan = Planner(cluster, mgr, MovePolicy.build()).plan_goal(WholeGpus(count=2))
    assert plan.goal is not None and not plan.goal.met
    assert plan.goal.reached == 1 and len(plan.moves) == 1
    assert all(m.pod.startswith("default/o-") for m in plan.moves)
    (missed,) = [o for o in plan.outcomes if not o.placed]
    assert "no movable pods" in missed.reason


def test_the_model_filter_counts_only_that_model(mgr):
    nodes = [model_node("node-0", "NVIDIA A100-SXM4-80GB"), model_node("node-1", "NVIDIA H100")]
    pods = [
        running("a-0", "node-0", (0,), mem=HALF, cores=50, owned_by=owner()),
        running("h-0", "node-1", (0,), mem=HALF, cores=50, owned_by=owner()),
        running("h-1", "node-1", (1,), mem=HALF, cores=50, owned_by=owner()),
    ]
    cluster = world(nodes, pods)
    plan = Planner(cluster, mgr, MovePolicy.build()).plan_goal(WholeGpus(count=1, model="H100"))
    assert plan.goal is not None and plan.goal.met and plan.goal.free_before == 0
    # the free A100 does not count; one H100 pod moves to share the other H100
    (move,) = plan.moves
    assert move.from_node == move.to_node == "node-1"
    assert plan.goal.gpus[0][0] == "node-1"


def test_pods_above_the_goal_priority_and_opted_out_never_move(mgr):
    high = running("high", "node-0", (0,), mem=HALF, cores=50, owned_by=owner(), priority=10)
    mine = running(
        "mine",
        "node-0",
        (1,),
        mem=HALF,
        cores=50,
        owned_by=owner(),
        namespace="tenant",
        annotations={"hami.io/defrag": "never"},
    )
    low = [running(f"low{g}", "node-1", (g,), mem=HALF, cores=50, owned_by=owner()) for g in (0, 1)]
    cluster = world([gpu_node("node-0"), gpu_node("node-1")], [high, mine, *low])
    plan = Planner(cluster, mgr, MovePolicy.build()).plan_goal(WholeGpus(count=2))
    # nothing of node-0 moves; the integer program finds both of node-1's GPUs (its two
    # pods join high and mine), the search alone one (it moves one pod beside the other)
    assert {m.pod for m in plan.moves} <= {"default/low0", "default/low1"}
    assert plan.goal is not None and {n for n, _ in plan.goal.gpus} == {"node-1"}
    assert plan.goal.reached == (2 if exact.available() else 1)
    # node-1 full of bare pods: only high could make room, and only at its priority
    bare = [running(f"b{g}", "node-1", (g,), mem=HALF + 8000, cores=60) for g in (0, 1)]
    for priority, reached, moved in ((0, 0, set()), (10, 1, {"default/high"})):
        cluster = world([gpu_node("node-0"), gpu_node("node-1")], [high, mine, *bare])
        goal = WholeGpus(count=1, priority=priority)
        plan = Planner(cluster, mgr, MovePolicy.build()).plan_goal(goal)
        assert plan.goal is not None and plan.goal.reached == reached
        assert {m.pod for m in plan.moves} == moved


def snapshot(tmp_path: Path) -> str:
    items = [gpu_node("node-0"), gpu_node("node-1"), *halves()]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def test_cli_goal_json_and_text(tmp_path):
    snap = snapshot(tmp_path)
    result = CliRunner().invoke(
        cli, ["defrag", "--snapshot", snap, "--goal", "whole-gpus=2,model=A100", "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["goal"]["asked"] == "whole-gpus=2,model=A100"
    assert data["goal"]["met"] is True and data["goal"]["reached"] == 2
    assert len(data["goal"]["gpus"]) == 2 and data["summary"]["moves"] == 2
    result = CliRunner().invoke(cli, ["defrag", "--snapshot", snap, "--goal", "whole-gpus=5"])
    assert result.exit_code == 0, result.output
    # two pods per GPU at most: two GPUs of four can be made whole
    assert result.output.startswith("goal whole-gpus=5: 2 of 5 whole free GPU(s)")


def test_cli_bad_goal_is_refused_by_name(tmp_path):
    snap = snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["defrag", "--snapshot", snap, "--goal", "whole-gpus=x"])
    assert result.exit_code != 0
    assert "whole-gpus must be an integer" in result.output
    result = CliRunner().invoke(
        cli, ["defrag", "--snapshot", snap, "--goal", "whole-gpus=1", "--pod", "default/x"]
    )
    assert result.exit_code != 0 and "--goal" in result.output and "--pod" in result.output
