"""What ``hami explain`` costs: at most one reading of each pod of the cluster for a Pending pod
(the filter, quota, node locks, preemption's and consolidation's dry runs share one
scheduler state), and for a bound pod its own pod and node only. At 1000 nodes x 8 GPUs
reading the pods is most of the time (``benchmarks/bench_explain.py``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from hami_core.defrag.sources import DefragInput
from hami_core.explain import explain
from hami_core.plugin import BackendManager
from tests.defrag.world import MIB, gpu_node, owner, pending, running, world


@pytest.fixture
def counted() -> tuple[BackendManager, Counter[str]]:
    """A manager counting, per pod name, how often its containers' requests are read."""
    manager = BackendManager.from_entry_points()
    reads: Counter[str] = Counter()
    inner = manager.parse_requests

    def parse_requests(pod: Any, container: Any, *, init: bool) -> Any:
        reads[str((pod.get("metadata") or {}).get("name"))] += 1
        return inner(pod, container, init=init)

    manager.parse_requests = parse_requests  # type: ignore[method-assign]
    return manager, reads


def cluster(waiting: dict[str, Any] | None = None) -> DefragInput:
    nodes = [gpu_node(f"node-{n}", gpus=2) for n in range(6)]
    pods = [
        running(f"h-{n}-{g}", f"node-{n}", (g,), mem=MIB // 2, cores=50, owned_by=owner())
        for n in range(6)
        for g in range(2)
    ]
    return DefragInput(cluster=world(nodes, pods), pending=(waiting,) if waiting else ())


def test_a_pending_pod_reads_each_pod_of_the_cluster_once(counted):
    manager, reads = counted
    big = pending("big", priority=100)
    answer = explain(cluster(big), manager, "default/big", lookup=lambda ns, n: None)
    assert answer["status"] == "pending"
    assert answer["preemption"]["victims"] and answer["consolidation"]["moves"]
    # the pods the dry runs evict or move are fitted again by them; every other at most
    # once, and the replicas of one content (all twelve here) once between them
    # (``HoldingsReader.requested_vendors`` keeps the answer by ``request_key``)
    acted = {m["pod"].split("/")[1] for m in answer["consolidation"]["moves"]}
    acted |= {v["pod"].split("/")[1] for v in answer["preemption"]["victims"]}
    bound = {k: v for k, v in reads.items() if k != "big"}
    assert len(acted) < 12
    assert all(v == 1 for k, v in bound.items() if k not in acted), bound
    assert sum(v for k, v in bound.items() if k not in acted) <= 1, bound


def test_a_bound_pod_reads_only_itself(counted):
    manager, reads = counted
    answer = explain(cluster(), manager, "default/h-3-1", lookup=lambda ns, n: None)
    assert answer["status"] == "placed" and answer["node"] == "node-3"
    assert set(reads) == {"h-3-1"}


def test_the_planner_refuses_a_scheduler_of_another_store():
    from hami_core.defrag.movable import MovePolicy
    from hami_core.defrag.planner import Planner
    from hami_core.model import NodePolicy
    from hami_core.scheduling.scheduler import Scheduler

    manager = BackendManager.from_entry_points()
    here, there = cluster().cluster, cluster().cluster
    with pytest.raises(ValueError, match="shared scheduler"):
        Planner(here, manager, MovePolicy.build(), scheduler=Scheduler(there, manager))
    with pytest.raises(ValueError, match="shared scheduler"):
        Planner(
            here,
            manager,
            MovePolicy.build(),
            scheduler=Scheduler(here, manager),
            node_policy=NodePolicy.SPREAD,
        )


def test_preemption_is_tried_only_where_a_lower_priority_pod_runs(monkeypatch):
    """Preemption evicts only pods of lower priority: its dry run is given the nodes
    that run one (at 1000 nodes it tried every node), and none when no such pod runs."""
    from hami_core.explain import engine

    tried: list[list[str]] = []
    real = engine.choose_victims

    def spy(state, eng, cycle, names, **kw):
        tried.append(sorted(names))
        return real(state, eng, cycle, names, **kw)

    monkeypatch.setattr(engine, "choose_victims", spy)
    manager = BackendManager.from_entry_points()
    read = cluster(pending("big", priority=0))
    low = running("low", "node-2", (0,), mem=1000, cores=1, priority=-10)
    read.cluster.add_pod(low)
    answer = explain(read, manager, "default/big", lookup=lambda ns, n: None)
    assert tried == [["node-2"]]
    assert answer["preemption"]["victims"] == []

    tried.clear()
    answer = explain(
        cluster(pending("big", priority=0)), manager, "default/big", lookup=lambda ns, n: None
    )
    assert tried == []
    assert answer["preemption"]["reason"] == (
        "no eviction of lower-priority pods (priority < 0) makes room: no pod of lower "
        "priority runs on any of 6 node(s)"
    )


def test_preemptions_dry_run_is_bounded_to_the_nodes_closest_to_fitting(monkeypatch):
    """Every node runs lower-priority pods: the dry run gets the ``PREEMPTION_NODES``
    closest to fitting (most memory per GPU left, as the text orders them) with a bounded
    search per node, and the answer says how many of how many it looked at."""
    from hami_core.explain import engine

    tried: list[tuple[list[str], int]] = []
    real = engine.choose_victims

    def spy(state, eng, cycle, names, **kw):
        tried.append((list(names), kw["max_fits_per_node"]))
        return real(state, eng, cycle, names, **kw)

    monkeypatch.setattr(engine, "choose_victims", spy)
    monkeypatch.setattr(engine, "PREEMPTION_NODES", 2)
    read = cluster(pending("big", priority=100))
    # node-4 has the most room left: 30000 MiB of one GPU taken instead of 40960
    read.cluster.delete_pod("default", "h-4-0")
    read.cluster.add_pod(running("h-4-0", "node-4", (0,), mem=30000, cores=50, owned_by=owner()))
    manager = BackendManager.from_entry_points()
    answer = explain(read, manager, "default/big", lookup=lambda ns, n: None)
    ((names, cap),) = tried
    assert names == ["node-4", "node-0"] and cap == engine.PREEMPTION_FITS_PER_NODE
    pre = answer["preemption"]
    assert pre["victims"] and pre["node"] in names
    assert pre["nodesTried"] == 2 and pre["nodesWithLowerPriority"] == 6
    from hami_core.explain import render_text

    text = render_text(answer)
    assert f"  preemption would evict on {pre['node']}: " in text
    assert (
        "    (a bounded dry run: the 2 of 6 node(s) running lower-priority pods closest "
        "to fitting" in text
    )
