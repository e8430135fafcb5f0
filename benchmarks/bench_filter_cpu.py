"""CPU time of one in-process ``Scheduler.filter`` at 1000 nodes, for comparing two
versions of the scheduler on a machine that is not quiet.

A thread's own CPU time (``time.thread_time``) barely moves with load on other cores,
unlike ``bench_filter``'s wall-clock latency over HTTP, so two checkouts measured
alternately in one sitting compare within a few percent where wall-clock p99 moved by
4x. Same cluster and pod stream as ``bench_filter`` (``workload.py``); each fitting pod
is bound to a node drawn from its feasible ones, as the watch would deliver it.

    .venv/bin/python benchmarks/bench_filter_cpu.py [NODES] [PODS]
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubernetes import client as k8s
from workload import bound_copy, node_object, pod_object, pod_shape, preload

from hami_core.cluster.kube import KubeCluster
from hami_core.plugin import BackendManager
from hami_core.scheduling.bind import allocation_annotations
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.scheduler_main import settle_gc


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    pods = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    store = KubeCluster(k8s.ApiClient(k8s.Configuration()))
    names = [f"node-{i:05}" for i in range(nodes)]
    for n in names:
        store.nodes.put(node_object(n))
    for p in preload(names, fill=0.5, seed=1):
        store.pods.put(p)
    scheduler = Scheduler(store, BackendManager.from_entry_points())
    settle_gc()
    rng = random.Random(1)
    rv = 10_000_000
    seen: set[str] = set()
    cpu: list[float] = []
    placed = 0
    for i in range(pods):
        limits = pod_shape(rng)
        pod = pod_object(f"bench-{i}", limits)
        rv += 1
        pod["metadata"]["resourceVersion"] = str(rv)
        store.pods.put(pod)
        t0 = time.thread_time()
        result = scheduler.filter(pod, names)
        spent = time.thread_time() - t0
        key = json.dumps(limits, sort_keys=True)
        if key in seen:
            cpu.append(spent)  # the first pod of a shape is warm-up
        seen.add(key)
        feasible = sorted(result.fits)
        if not feasible:
            continue
        best = feasible[rng.randrange(len(feasible))]
        allocation = result.fits[best].allocation
        if allocation is None:
            continue
        annotations = allocation_annotations(allocation, scheduler.manager, scheduler.clock())
        rv += 1
        store.pods.put(bound_copy(pod, best, annotations, rv))
        placed += 1
    ordered = sorted(cpu)
    print(
        f"nodes={nodes} pods={pods} placed={placed} filter CPU ms: "
        f"p50 {statistics.median(ordered) * 1e3:.2f}, "
        f"p90 {ordered[int(0.9 * len(ordered))] * 1e3:.2f}, "
        f"mean {statistics.mean(ordered) * 1e3:.2f}"
    )


if __name__ == "__main__":
    main()
