"""``/filter`` (and ``/prioritize`` where kube-scheduler would call it) over HTTP at
100 / 1000 / 5000 nodes, served as ``hami scheduler`` serves them.

The server is the product's: ``scheduler_main.extender_server`` over ``SchedulerOptions()``
(its defaults: ``KeepAliveServer``, a thread per kept-alive connection, 32 at most;
``--filter-answer best``), after ``favour_request_latency`` (the 0.5 ms GIL switch
interval) and ``settle_gc``, as ``run_scheduler`` calls them; the app is the leader's
(``create_extender_app`` with ``filter_answer`` from the options) with an
``EventRecorder`` off the request thread, as ``hami scheduler`` writes events (here into
a counter instead of the API server). The caches are a ``KubeCluster`` whose informers
are fed the nodes and a ~50 % preload of bound pods through the same ``put`` the watch
threads use (no API server: the filter path makes no API request, which ``api
requests`` counts).

Each measured pod then goes the way kube-scheduler 1.20 sends it with
``nodeCacheCapable: true``, over one kept-alive connection: ``/filter`` with
``ExtenderArgs`` as it encodes them (the pod, ``"Nodes": null`` and every node name;
the recorded bodies are ``tests/fixtures/extender/``); ``/prioritize`` only when more
than one node is answered (``genericScheduler.Schedule`` uses a lone feasible node
without scoring, so under ``best`` a pod asking devices gets none); then its binding
arrives as a watch event (the pod bound to the chosen node, with the allocation the
bind's re-fit writes), which also ends the placement ``/filter`` held for it
(``scheduling/assumed.py``), so each next filter sees one node changed, as in a real
scheduling stream. kube-scheduler sends fewer names by default
(``percentageOfNodesToScore``: ~420 of 1000, 500 of 5000); every name is the case of
``percentageOfNodesToScore: 100``. Pod shapes are drawn from the bundled examples' mix;
the first pod of each shape is warm-up (reported separately as ``cold``). The driver is
a thread of the server's process, so it shares the GIL (and the switch interval) with
the handlers, where kube-scheduler is a process of its own.

    .venv/bin/python benchmarks/bench_filter.py [--quick] [--filter-answer best|all]
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
from workload import bound_copy, node_object, pod_object, pod_shape, preload

from hami_core.cluster.events import EventRecorder
from hami_core.cluster.kube import KubeCluster
from hami_core.plugin import BackendManager
from hami_core.scheduling.bind import allocation_annotations
from hami_core.servers.extender import create_extender_app
from hami_core.servers.options import FILTER_ANSWERS, SchedulerOptions
from hami_core.servers.scheduler_main import (
    build_scheduler,
    extender_server,
    favour_request_latency,
    settle_gc,
)


class CountingPool:
    """Counts the requests the client would send (none are expected)."""

    def __init__(self) -> None:
        self.requests = 0

    def request(self, *args: Any, **kwargs: Any) -> Any:
        self.requests += 1
        raise RuntimeError("the filter path must not call the API server")

    urlopen = request


class CountedEvents:
    """The API server's side of ``EventRecorder`` (a ``SeriesStore``): counts the Events
    it would create or update, by reason."""

    def __init__(self) -> None:
        self.written: dict[str, int] = {}
        self._lock = threading.Lock()

    def record_event_series(
        self,
        obj: Any,
        *,
        type: str,
        reason: str,
        message: str,
        count: int,
        existing: str | None,
    ) -> str:
        with self._lock:
            self.written[reason] = self.written.get(reason, 0) + 1
        return existing or f"{reason}.{self.written[reason]}"


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


def extender_args(pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """``ExtenderArgs`` as kube-scheduler 1.20 encodes them with ``nodeCacheCapable:
    true`` (``tests/fixtures/extender/filter-request.json``): the pod, no Node objects,
    the candidate names."""
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def run(nodes: int, pods: int, seed: int, opts: SchedulerOptions) -> dict[str, Any]:
    """One size: ``nodes`` nodes ~50 % full, ``pods`` pods through the extender served
    under ``opts`` (module docstring). Latencies in seconds."""
    api = k8s.ApiClient(k8s.Configuration())
    pool = CountingPool()
    api.rest_client.pool_manager = pool  # type: ignore[assignment]
    manager = BackendManager.from_entry_points()
    store = KubeCluster(api, scheduler_name=manager.config.scheduler_name)  # our pods only
    names = [f"node-{i:05}" for i in range(nodes)]
    for n in names:
        store.nodes.put(node_object(n))
    for p in preload(names, fill=0.5, seed=seed):
        store.pods.put(p)
    written = CountedEvents()
    events = EventRecorder(written).start()  # off the request thread, as hami scheduler's
    scheduler = build_scheduler(opts, store, manager, events)
    settle_gc()  # as ``hami scheduler`` does once its caches are listed
    app = create_extender_app(scheduler, filter_answer=opts.filter_answer)  # the leader
    server = extender_server(app, opts)
    serving = threading.Thread(target=server.run, name="extender-http", daemon=True)
    serving.start()
    conn = http.client.HTTPConnection("127.0.0.1", server.effective_port, timeout=60)
    rng = random.Random(seed)
    seen: set[str] = set()
    cold: list[float] = []
    filt: list[float] = []
    prio: list[float] = []
    answered: list[int] = []
    rv = 10_000_000
    try:
        for i in range(pods):
            limits = pod_shape(rng)
            pod = pod_object(f"bench-{i}", limits)
            rv += 1
            pod["metadata"]["resourceVersion"] = str(rv)
            store.pods.put(pod)
            t0 = time.perf_counter()
            out = post(conn, "/filter", extender_args(pod, names))
            dt = time.perf_counter() - t0
            key = json.dumps(limits, sort_keys=True)
            if out["Error"]:
                raise RuntimeError(out["Error"])
            feasible = out["NodeNames"]
            answered.append(len(feasible))
            if key in seen:
                filt.append(dt)
            else:
                seen.add(key)
                cold.append(dt)
            if not feasible:
                continue
            best = feasible[0]
            if len(feasible) > 1:  # kube-scheduler scores only when more than one is left
                t0 = time.perf_counter()
                scores = post(conn, "/prioritize", extender_args(pod, feasible))
                prio.append(time.perf_counter() - t0)
                best = max(scores, key=lambda s: (s["Score"], s["Host"]))["Host"]
            # The binding, as the watch delivers it: the allocation the bind's re-fit
            # writes, and nodeName (which lets go of the placement /filter held).
            fit = scheduler.binder.refit(pod, best).fits[best]
            if fit.allocation is None:
                continue
            alloc = allocation_annotations(fit.allocation, scheduler.manager, scheduler.clock())
            rv += 1
            store.pods.put(bound_copy(pod, best, alloc, rv))
        events.flush()
    finally:
        conn.close()  # its connection thread ends on EOF
        server.close()  # stops the accept loop and waits for it
        serving.join(5)
        events.stop()
    return {
        "nodes": nodes,
        "pods": pods,
        "filter": filt,
        "prioritize": prio,
        "cold": cold,
        "answered": answered,
        "api": pool.requests,
        "events": sum(written.written.values()),
    }


def ms(x: float) -> str:
    return f"{x * 1000:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="100 and 1000 nodes only")
    ap.add_argument(
        "--filter-answer",
        choices=FILTER_ANSWERS,
        default=SchedulerOptions().filter_answer,
        help="hami scheduler --filter-answer (default: its default)",
    )
    args = ap.parse_args()
    sizes = [(100, 300), (1000, 300)] if args.quick else [(100, 400), (1000, 400), (5000, 200)]
    # hami scheduler's defaults but the address: loopback, any free port
    opts = SchedulerOptions(bind_address="127.0.0.1", port=0, filter_answer=args.filter_answer)
    favour_request_latency()  # as run_scheduler, before anything is served
    print(
        f"over HTTP as hami scheduler serves it (extender_server: keep-alive, up to "
        f"{opts.threads} connections; switch interval {sys.getswitchinterval() * 1000:g} ms; "
        f'--filter-answer {opts.filter_answer}); every node name sent, "Nodes": null; '
        "8 A100 per node, ~50 % preloaded"
    )
    print(
        f"{'nodes':>6} {'pods':>5} {'filter p50':>10} {'p99':>7} {'prio calls':>10} "
        f"{'prio p50':>9} {'p99':>7} {'cold max':>9} {'answered':>8} {'events':>6} "
        f"{'api requests':>12}  (ms)"
    )
    rows = []
    for nodes, pods in sizes:
        r = run(nodes, pods, seed=nodes, opts=opts)
        rows.append(r)
        prio = r["prioritize"]
        print(
            f"{nodes:>6} {pods:>5} {ms(statistics.median(r['filter'])):>10} "
            f"{ms(percentile(r['filter'], 0.99)):>7} {len(prio) / pods:>10.2f} "
            f"{ms(statistics.median(prio)) if prio else '-':>9} "
            f"{ms(percentile(prio, 0.99)) if prio else '-':>7} {ms(max(r['cold'])):>9} "
            f"{statistics.mean(r['answered']):>8.2f} {r['events'] / pods:>6.2f} {r['api']:>12}"
        )
    by = {r["nodes"]: r for r in rows}
    p99_1000 = percentile(by[1000]["filter"], 0.99)
    line = f"headline: /filter p99 at 1000 nodes = {ms(p99_1000)} ms (target <= 20)"
    if 5000 in by:
        line += f"; at 5000 nodes = {ms(percentile(by[5000]['filter'], 0.99))} ms (target <= 100)"
    print(line)


if __name__ == "__main__":
    main()
