"""``/filter`` and ``/prioritize`` latency over HTTP at 100 / 1000 / 5000 nodes.

The extender app (``create_extender_app``) is served by waitress, as ``hami scheduler``
serves it, over a ``KubeCluster`` whose informer caches are fed the nodes and a ~50 %
preload of bound pods through the same ``put`` the watch threads use (no API server:
the filter path makes no API request, which ``api requests`` counts). Each measured
pod then goes the way kube-scheduler sends it with ``nodeCacheCapable: true``:
``/filter`` with every node name, ``/prioritize`` with the feasible ones, then its
binding arrives as a watch event (the pod bound to the best node), so each next
filter sees one node changed, as in a real scheduling stream. Pod shapes are drawn
from the bundled examples' mix; the first pod of each shape is warm-up (reported
separately as ``cold``).

    .venv/bin/python benchmarks/bench_filter.py [--quick]
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubernetes import client as k8s
from waitress.server import create_server
from workload import bound_copy, node_object, pod_object, pod_shape, preload

from hami_core.cluster.kube import KubeCluster
from hami_core.plugin import BackendManager
from hami_core.scheduling.bind import allocation_annotations
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.extender import create_extender_app
from hami_core.servers.scheduler_main import settle_gc


class CountingPool:
    """Counts the requests the client would send (none are expected)."""

    def __init__(self) -> None:
        self.requests = 0

    def request(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        raise RuntimeError("the filter path must not call the API server")

    urlopen = request


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def post(conn: http.client.HTTPConnection, path: str, body: dict[str, Any]) -> Any:
    data = json.dumps(body)
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = json.loads(resp.read())
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}: {out}")
    return out


def run(nodes: int, pods: int, seed: int) -> dict[str, Any]:
    api = k8s.ApiClient(k8s.Configuration())
    pool = CountingPool()
    api.rest_client.pool_manager = pool
    store = KubeCluster(api)
    names = [f"node-{i:05}" for i in range(nodes)]
    for n in names:
        store.nodes.put(node_object(n))
    for p in preload(names, fill=0.5, seed=seed):
        store.pods.put(p)
    manager = BackendManager.from_entry_points()
    scheduler = Scheduler(store, manager)
    settle_gc()  # as ``hami scheduler`` does once its caches are listed
    app = create_extender_app(scheduler, is_leader=lambda: False)  # followers write no events
    server = create_server(app, host="127.0.0.1", port=0, threads=4)
    port = server.effective_port  # type: ignore[union-attr]
    threading.Thread(target=server.run, daemon=True).start()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    rng = random.Random(seed)
    seen: set[str] = set()
    cold: list[float] = []
    filt: list[float] = []
    prio: list[float] = []
    rv = 10_000_000
    for i in range(pods):
        limits = pod_shape(rng)
        pod = pod_object(f"bench-{i}", limits)
        rv += 1
        pod["metadata"]["resourceVersion"] = str(rv)
        store.pods.put(pod)
        t0 = time.perf_counter()
        out = post(conn, "/filter", {"Pod": pod, "NodeNames": names})
        dt = time.perf_counter() - t0
        key = json.dumps(limits, sort_keys=True)
        if out["Error"]:
            raise RuntimeError(out["Error"])
        feasible = out["NodeNames"]
        if key in seen:
            filt.append(dt)
        else:
            seen.add(key)
            cold.append(dt)
        if not feasible:
            continue
        t0 = time.perf_counter()
        scores = post(conn, "/prioritize", {"Pod": pod, "NodeNames": feasible})
        prio.append(time.perf_counter() - t0)
        best = max(scores, key=lambda s: (s["Score"], s["Host"]))["Host"]
        # The binding, as the watch delivers it: allocation annotations and nodeName.
        fit = scheduler.filter(pod, [best]).fits[best]
        if fit.allocation is None:
            continue
        alloc = allocation_annotations(fit.allocation, scheduler.manager, scheduler.clock())
        rv += 1
        store.pods.put(bound_copy(pod, best, alloc, rv))
    server.close()
    return {
        "nodes": nodes,
        "pods": pods,
        "filter": filt,
        "prioritize": prio,
        "cold": cold,
        "api": pool.requests,
    }


def ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="100 and 1000 nodes only")
    args = ap.parse_args()
    sizes = [(100, 300), (1000, 300)] if args.quick else [(100, 400), (1000, 400), (5000, 200)]
    print("over HTTP (waitress, 4 threads), 8 A100 per node, ~50 % preloaded")
    print(
        f"{'nodes':>6} {'pods':>5} {'filter p50':>10} {'p99':>7} {'prio p50':>9} {'p99':>7} "
        f"{'cold max':>9} {'api requests':>12}  (ms)"
    )
    rows = []
    for nodes, pods in sizes:
        r = run(nodes, pods, seed=nodes)
        rows.append(r)
        print(
            f"{nodes:>6} {pods:>5} {ms(statistics.median(r['filter'])):>10} "
            f"{ms(percentile(r['filter'], 0.99)):>7} {ms(statistics.median(r['prioritize'])):>9} "
            f"{ms(percentile(r['prioritize'], 0.99)):>7} {ms(max(r['cold'])):>9} {r['api']:>12}"
        )
    by = {r["nodes"]: r for r in rows}
    p99_1000 = percentile(by[1000]["filter"], 0.99)
    line = f"headline: /filter p99 at 1000 nodes = {ms(p99_1000)} ms (target <= 20)"
    if 5000 in by:
        line += f"; at 5000 nodes = {ms(percentile(by[5000]['filter'], 0.99))} ms (target <= 100)"
    print(line)


if __name__ == "__main__":
    main()
