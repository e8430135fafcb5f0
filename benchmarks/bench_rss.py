"""Scheduler resident memory at 5000 nodes and 50 000 pods.

A fresh process holds what ``hami scheduler`` holds: ``KubeCluster``'s informer caches
(the nodes, and pods bound with allocation annotations, fed through the same ``put`` the
watch threads use; managedFields dropped as there), the ``Scheduler`` and its
incremental state, its ``EventRecorder``, the extender app (``create_extender_app`` under
``SchedulerOptions``' ``--filter-answer``, with its ``SchedulerMetrics``), the caches
moved out of the collector's sight (``settle_gc``), after a stream of ``/filter`` calls
over every node through the app (which fills the per-node fit memo and holds each
answered placement, as no bind follows). Its peak RSS (``getrusage``) is reported
against the 1 GiB target.

    .venv/bin/python benchmarks/bench_rss.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(nodes: int, pods: int) -> None:
    sys.path.insert(0, str(HERE))
    from bench_filter import CountedEvents, extender_args
    from kubernetes import client as k8s
    from workload import node_object, pod_object, pod_shape, preload

    from hami_core.cluster.events import EventRecorder
    from hami_core.cluster.kube import KubeCluster
    from hami_core.plugin import BackendManager
    from hami_core.servers.extender import create_extender_app
    from hami_core.servers.metrics import SchedulerMetrics
    from hami_core.servers.options import SchedulerOptions
    from hami_core.servers.scheduler_main import build_scheduler, settle_gc

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    manager = BackendManager.from_entry_points()
    # as hami scheduler's: our scheduler's pods only
    store = KubeCluster(
        k8s.ApiClient(k8s.Configuration()), scheduler_name=manager.config.scheduler_name
    )
    names = [f"node-{i:05}" for i in range(nodes)]
    for n in names:
        store.nodes.put(node_object(n))
    # ~50 % preload gives ~11 pods per node; trim or pad to ``pods`` with the probes.
    probes = 30
    bound = preload(names, fill=0.5, seed=1)[: pods - probes]
    rng = random.Random(2)
    i = 0
    while len(bound) < pods - probes:  # pending pods (not yet scheduled) make up the rest
        bound.append(pod_object(f"pending-{i}", pod_shape(rng)))
        i += 1
    for p in bound:
        p["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update"}]
        store.pods.put(p)
    del bound
    opts = SchedulerOptions()
    events = EventRecorder(CountedEvents()).start()
    scheduler = build_scheduler(opts, store, manager, events)
    settle_gc()
    metrics = SchedulerMetrics(
        scheduler,
        informers={"nodes": store.nodes, "pods": store.pods, "resourcequotas": store.quotas},
    )
    app = create_extender_app(scheduler, metrics=metrics, filter_answer=opts.filter_answer)
    client = app.test_client()
    t0 = time.perf_counter()
    for k in range(probes):
        pod = pod_object(f"probe-{k}", pod_shape(rng))
        pod["metadata"]["resourceVersion"] = str(k + 1)
        store.pods.put(pod)
        answer = client.post("/filter", json=extender_args(pod, names))
        assert answer.status_code == 200 and not answer.json["Error"], answer.json
    filters_s = time.perf_counter() - t0
    events.stop()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "nodes": nodes,
                "pods": len(store.pods.items()),
                "peak_mib": peak_kib / 1024,
                "interpreter_mib": base / 1024,
                "filters_s": filters_s,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="1000 nodes / 10 000 pods")
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    nodes, pods = (1000, 10_000) if args.quick else (5000, 50_000)
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(nodes), str(pods)],
        check=True,
        capture_output=True,
        text=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print("a fresh scheduler process: informer caches + incremental state + fit memo")
    print(
        f"{'nodes':>6} {'pods':>7} {'peak RSS MiB':>13} {'(interpreter)':>14} {'30 filters s':>13}"
    )
    print(
        f"{r['nodes']:>6} {r['pods']:>7} {r['peak_mib']:>13.0f} {r['interpreter_mib']:>14.0f} "
        f"{r['filters_s']:>13.1f}"
    )
    print(
        f"headline: scheduler RSS at {r['nodes']} nodes / {r['pods']} pods = "
        f"{r['peak_mib']:.0f} MiB = {r['peak_mib'] / 1024:.2f} GiB (target <= 1 GiB)"
    )


if __name__ == "__main__":
    main()
