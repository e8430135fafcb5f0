"""What one reading of the web view costs: the page is built from one scheduler state
and one top view, whatever the number of pending pods; each pending pod adds its filter
(and its own request) only, never another reading of the cluster's nodes or pods. At
1000 nodes x 8 GPUs with 20 pending pods, re-reading every node per pending pod was
most of the page's time (``benchmarks/bench_ui.py``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from hami_core.defrag.sources import DefragInput
from hami_core.plugin import BackendManager
from hami_core.scheduling import state as state_module
from hami_core.ui.page import build_page
from tests.defrag.world import MIB, gpu_node, owner, pending, running, world

NODES = 6


@pytest.fixture
def counted(monkeypatch) -> tuple[BackendManager, Counter[str]]:
    """A manager counting reads: ``node:NAME`` per reading of a node's devices,
    ``pod:NAME`` per reading of a pod's container requests, ``state`` per scheduler
    state built."""
    manager = BackendManager.from_entry_points()
    reads: Counter[str] = Counter()
    parse, devices = manager.parse_requests, manager.node_devices

    def parse_requests(pod: Any, container: Any, *, init: bool) -> Any:
        reads[f"pod:{(pod.get('metadata') or {}).get('name')}"] += 1
        return parse(pod, container, init=init)

    def node_devices(vendor: str, node: Any) -> Any:
        reads[f"node:{(node.get('metadata') or {}).get('name')}"] += 1
        return devices(vendor, node)

    manager.parse_requests = parse_requests  # type: ignore[method-assign]
    manager.node_devices = node_devices  # type: ignore[method-assign]
    init = state_module.ClusterState.__init__

    def counting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        reads["state"] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(state_module.ClusterState, "__init__", counting_init)
    return manager, reads


def cluster(waiting: int) -> DefragInput:
    nodes = [gpu_node(f"node-{n}", gpus=2) for n in range(NODES)]
    pods = [
        running(f"h-{n}-{g}", f"node-{n}", (g,), mem=MIB // 2, cores=50, owned_by=owner())
        for n in range(NODES)
        for g in range(2)
    ]
    big = [pending(f"big-{i}", mem=MIB - i, namespace=f"team-{i % 2}") for i in range(waiting)]
    return DefragInput(cluster=world(nodes, pods), pending=tuple(big))


def cluster_reads(reads: Counter[str]) -> Counter[str]:
    return Counter({k: v for k, v in reads.items() if not k.startswith("pod:big-")})


def test_one_reading_of_the_cluster_whatever_the_pending_pods(counted):
    manager, reads = counted
    one = build_page(cluster(1), manager)
    assert "fits on none of 6 node(s)" in one["pending"][0]["reason"]
    with_one = cluster_reads(reads)
    reads.clear()
    five = build_page(cluster(5), manager)
    assert len(five["pending"]) == 5
    assert all("fits on none of 6 node(s)" in p["reason"] for p in five["pending"])
    assert with_one["state"] == 1
    # each bound pod's requests: at most once by the scheduler's state and once by the
    # top view (the replicas of one content, all twelve here, share a reading)
    bound = {k: v for k, v in with_one.items() if k.startswith("pod:")}
    assert bound and set(bound) <= {f"pod:h-{n}-{g}" for n in range(NODES) for g in range(2)}
    assert all(v <= 2 for v in bound.values()), bound
    # the nodes and bound pods are read as often with five pending pods as with one
    assert cluster_reads(reads) == with_one
    # each pending pod's own request is read a bounded number of times
    assert {k: v for k, v in reads.items() if k.startswith("pod:big-")} == {
        f"pod:big-{i}": reads["pod:big-0"] for i in range(5)
    }


def test_the_top_view_works_out_each_pods_holdings_once(monkeypatch):
    """The slices and the GPUs' usage come from one reading of each pod's allocation
    (it was read for the slices and again for the usage)."""
    from hami_core.facts import holdings, usage
    from hami_core.top import view

    worked: Counter[str] = Counter()
    real = usage.pod_holdings

    def counting(pod: Any, *args: Any, **kwargs: Any) -> Any:
        worked[str((pod.get("metadata") or {}).get("name"))] += 1
        return real(pod, *args, **kwargs)

    for module in (usage, holdings, view):
        monkeypatch.setattr(module, "pod_holdings", counting, raising=False)
    top = view.build_view(cluster(0).cluster, BackendManager.from_entry_points())
    assert sum(len(row.slices) for row in top.devices) == 2 * NODES
    assert all(row.memory_allocated_mib == MIB // 2 for row in top.devices)
    assert worked == {f"h-{n}-{g}": 1 for n in range(NODES) for g in range(2)}
