"""``hami explain``: wall time of one answer at 100 and 1000 nodes x 8 GPUs.

The cluster is ``workload.preload``'s at 50 % (every A100-80GB about half full of 1-GPU
slices of 4-16 GiB, ~3.5 pods a GPU, every pod owned by a ReplicaSet so consolidation
may move it). Three answers, each on a fresh reading of the cluster (``DefragInput``, as
``hami explain`` reads the API server; the listing itself is not timed):

- ``pending``: a whole card (priority 0) fits on no GPU: the filter on every node, every
  node's reasons, quota, locks, preemption (no pod of lower priority: no dry run) and
  consolidation's dry run (one plan, its moves);
- ``pending, preempting``: the same pod at priority 1000: preemption's dry run over every
  node (every pod is of lower priority);
- ``bound``: a running pod (its node and slices only).

Each is the engine's answer and its text (``explain`` + ``render_text``); median of
``--runs`` with the spread. Beside them, from the same run: the scheduler's state built
from scratch over that cluster (reading every pod: the floor of any answer about a
pending pod that starts from a listing) and one ``/filter`` of the pod on the warm
state of a ``Scheduler`` built as ``hami scheduler`` builds it, with its pre-filter
(what the scheduler's server pays for the same question; explain's own has the
pre-filter off, so that every node names its reason).

    .venv/bin/python benchmarks/bench_explain.py [--quick] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workload import node_object, pod_object, preload

from hami_core.cluster import MemoryCluster
from hami_core.defrag.sources import DefragInput
from hami_core.explain import explain, render_text
from hami_core.explain.oneshot import paused_collector
from hami_core.plugin import BackendManager
from hami_core.scheduling.scheduler import Scheduler

GPUS = 8
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs"}
WHOLE_CARD = {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}


def cluster_objects(nodes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The nodes and the bound pods of the bench's cluster."""
    names = [f"node-{i}" for i in range(nodes)]
    pods = preload(names, fill=0.5, seed=7, gpus=GPUS)
    for pod in pods:
        pod["metadata"]["ownerReferences"] = [{**OWNER, "controller": True}]
    return [node_object(n, GPUS) for n in names], pods


def reading(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], priority: int) -> DefragInput:
    """A fresh reading holding the pending whole-card pod ``default/big``."""
    store = MemoryCluster()
    for node in nodes:
        store.add_node(node)
    for pod in pods:
        store.add_pod(pod)
    big = pod_object("big", WHOLE_CARD)
    big["spec"]["priority"] = priority
    return DefragInput(cluster=store, pending=(big,))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def timed_cpu(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall s, this process's CPU s, the answer): on a shared, loaded machine the CPU
    seconds say what the answer costs, the wall what a user waited."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def answer(read: DefragInput, manager: BackendManager, ref: str) -> tuple[dict[str, Any], str]:
    with paused_collector():  # as `hami explain` answers
        data = explain(read, manager, ref, lookup=lambda ns, name: None)
        return data, render_text(data)


def check(case: str, data: dict[str, Any], nodes: int) -> None:
    """The answer is the one the case is about (a fast wrong answer is no figure)."""
    if case == "bound":
        assert data["status"] == "placed" and data["devices"], data
        return
    assert data["status"] == "pending", data["reason"]
    assert f"fits on none of {nodes} node(s)" in data["reason"], data["reason"]
    assert len(data["nodes"]) == nodes
    if case == "pending":
        assert "no pod of lower priority runs" in data["preemption"]["reason"]
    else:
        assert data["preemption"]["victims"], data["preemption"]
    assert data["consolidation"]["moves"], data["consolidation"]


def measure(manager: BackendManager, nodes: int, runs: int) -> None:
    node_objs, pods = cluster_objects(nodes)
    bound_ref = f"default/{pods[0]['metadata']['name']}"
    cases = {
        "pending": (0, "default/big"),
        "pending, preempting": (1000, "default/big"),
        "bound": (0, bound_ref),
    }
    walls: dict[str, list[float]] = {c: [] for c in cases}
    cpus: dict[str, list[float]] = {c: [] for c in cases}
    builds, filters = [], []
    for _ in range(runs):
        for case, (priority, ref) in cases.items():
            read = reading(node_objs, pods, priority)
            wall, cpu, (data, _text) = timed_cpu(lambda: answer(read, manager, ref))  # noqa: B023
            check(case, data, nodes)
            walls[case].append(wall)
            cpus[case].append(cpu)
        read = reading(node_objs, pods, 0)
        # explain's own (pre-filter off: every node names its reason)
        with paused_collector():  # as explain builds it
            _, build, _ = timed_cpu(
                lambda: Scheduler(read.cluster, manager, prefilter=False)  # noqa: B023
            )
        server = Scheduler(read.cluster, manager)  # as hami scheduler builds it
        server.filter(read.pending[0])  # the pod's shape seen once, as a server has
        took, _ = timed(lambda: server.filter(read.pending[0]))  # noqa: B023
        builds.append(build)
        filters.append(took)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{nodes} nodes x {GPUS} GPUs, {len(pods)} bound pods, {runs} run(s), load {load}:")
    for case, ws in walls.items():
        print(
            f"  explain {case:<20} median {statistics.median(ws):6.2f} s wall "
            f"(min {min(ws):.2f}, max {max(ws):.2f}), {statistics.median(cpus[case]):6.2f} s CPU"
        )
    build = statistics.median(builds)
    pending = statistics.median(cpus["pending"])
    print(
        f"  scheduler state from scratch  median {build:6.2f} s "
        f"CPU ({100 * build / pending:.0f} % of the pending answer's CPU)"
    )
    print(f"  one /filter on the warm state median {1000 * statistics.median(filters):6.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="100 nodes only, one run")
    ap.add_argument("--runs", type=int, default=3, help="runs per size (median reported)")
    args = ap.parse_args()
    manager = BackendManager.from_entry_points()
    sizes, runs = ((100,), 1) if args.quick else ((100, 1000), args.runs)
    print("hami explain: one answer (engine + text) on a fresh reading, 50 % full")
    for nodes in sizes:
        measure(manager, nodes, runs)
    print("target: <= 2 s at 1000 nodes for a pending pod (docs/performance.md)")


if __name__ == "__main__":
    main()
