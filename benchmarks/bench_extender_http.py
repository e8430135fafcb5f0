"""What the extender's HTTP path adds to kube-scheduler's wait per pod, server by server.

kube-scheduler 1.20 calls ``/filter`` then ``/prioritize`` for each pod, one pod at a
time, and cannot start the next pod's cycle until both answered; whatever the HTTP
server adds beyond the handlers' own time is paid once per pod. This bench serves the
real extender app (``create_extender_app`` over a ``KubeCluster`` fed 1000 nodes and a
~50 % preload, as ``bench_filter.py``) with each candidate server in turn, and posts
kube-scheduler's real request bodies (``ExtenderArgs`` with the pod, ``"Nodes": null``
and every node name, then the feasible names) over one keep-alive connection, as Go's
``http.Transport`` does. Per server it prints the round trip's median and p90 for the
pod's filter + prioritize, the handlers' own time in-process (the WSGI app called
directly with the same bodies), the difference (the server's cost), and the TCP
connections the server accepted (1 when keep-alive holds). ``--load N`` adds N
busy Python threads in the server's process (the informer watch threads and the GIL
contention of a loaded scheduler).

    .venv/bin/python benchmarks/bench_extender_http.py [--nodes 1000] [--pods 200]
        [--load 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.client
import io
import json
import multiprocessing
import random
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubernetes import client as k8s
from workload import node_object, pod_object, pod_shape, preload

from hami_core.cluster.kube import KubeCluster
from hami_core.plugin import BackendManager
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.extender import create_extender_app
from hami_core.servers.keepalive import KeepAliveServer
from hami_core.servers.scheduler_main import settle_gc


class _NoApi:
    def request(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the filter path must not call the API server")

    urlopen = request


def build_app(nodes: int, seed: int) -> tuple[Any, list[str]]:
    """The extender app over ``nodes`` nodes (8 GPUs each, ~50 % used) and their names."""
    api = k8s.ApiClient(k8s.Configuration())
    api.rest_client.pool_manager = _NoApi()
    store = KubeCluster(api)
    names = [f"node-{i:05}" for i in range(nodes)]
    for n in names:
        store.nodes.put(node_object(n))
    for p in preload(names, fill=0.5, seed=seed):
        store.pods.put(p)
    scheduler = Scheduler(store, BackendManager.from_entry_points())
    settle_gc()
    return create_extender_app(scheduler, is_leader=lambda: False), names


def bodies(names: list[str], pods: int, seed: int, app: Any) -> list[tuple[bytes, bytes]]:
    """Per pod: the ``/filter`` body and the ``/prioritize`` body (its feasible names),
    encoded as Go's encoding/json writes ``ExtenderArgs``."""
    rng = random.Random(seed)
    out = []
    for i in range(pods):
        pod = pod_object(f"bench-{i}", pod_shape(rng))
        filt = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
        _, answer = call_wsgi(app, "/filter", filt)
        feasible = json.loads(answer)["NodeNames"] or names[:1]
        prio = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": feasible}).encode()
        out.append((filt, prio))
    return out


def call_wsgi(app: Any, path: str, body: bytes) -> tuple[str, bytes]:
    """The app called in-process, no server: the handlers' own time."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    got: list[str] = []
    data = b"".join(app(environ, lambda status, headers, *a: got.append(status)))
    return got[0], data


@contextlib.contextmanager
def serve(kind: str, app: Any, threads: int) -> Iterator[tuple[int, Callable[[], int]]]:
    """Serve ``app`` on 127.0.0.1 with the named server; yields (port, accepted())."""
    accepted = [0]
    real_accept = socket.socket.accept

    def counting_accept(self: socket.socket) -> Any:
        conn = real_accept(self)
        accepted[0] += 1  # one server per process: every accept is its
        return conn

    socket.socket.accept = counting_accept  # type: ignore[method-assign]
    try:
        if kind == "waitress":
            from waitress.server import create_server

            server = create_server(app, host="127.0.0.1", port=0, threads=threads)
            port = server.effective_port  # type: ignore[union-attr]
            t = threading.Thread(target=server.run, daemon=True)
            t.start()
            try:
                yield port, lambda: accepted[0]
            finally:
                server.close()
        elif kind == "cheroot":
            from cheroot.wsgi import Server

            cs = Server(("127.0.0.1", 0), app, numthreads=threads, max=threads)
            cs.prepare()
            t = threading.Thread(target=cs.serve, daemon=True)
            t.start()
            try:
                yield int(cs.bind_addr[1]), lambda: accepted[0]
            finally:
                cs.stop()
        elif kind == "hami":  # hami_core.servers.keepalive, what `hami scheduler` serves
            ks = KeepAliveServer(app, host="127.0.0.1", port=0, max_connections=threads)
            threading.Thread(target=ks.run, daemon=True).start()
            try:
                yield ks.port, lambda: accepted[0]
            finally:
                ks.close()
        else:
            raise ValueError(f"unknown server {kind}")
    finally:
        socket.socket.accept = real_accept  # type: ignore[method-assign]


def post(conn: http.client.HTTPConnection, path: str, body: bytes) -> bytes:
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}")
    return data


def busy(stop: threading.Event) -> None:
    """A Python thread that wants the GIL all the time (a watch thread decoding events)."""
    x = 0
    while not stop.is_set():
        for _ in range(1000):
            x += 1


def timed_pod(send: Callable[[str, bytes], Any], filt: bytes, prio: bytes) -> float:
    t0 = time.perf_counter()
    send("/filter", filt)
    send("/prioritize", prio)
    return time.perf_counter() - t0


def server_process(spec: str, app: Any, threads: int, load: int, pipe: Any) -> None:
    """Child process: serve ``app`` with ``spec`` (``server`` or ``server@switch-interval-s``)
    beside ``load`` busy threads; send the port, then the accepted count when told to stop."""
    kind, _, interval = spec.partition("@")
    if interval:
        sys.setswitchinterval(float(interval))
    stop = threading.Event()
    for _ in range(load):
        threading.Thread(target=busy, args=(stop,), daemon=True).start()
    with serve(kind, app, threads) as (port, accepted):
        pipe.send(port)
        pipe.recv()
        pipe.send(accepted())
    stop.set()


def measure(
    specs: list[str],
    app: Any,
    work: list[tuple[bytes, bytes]],
    threads: int,
    rounds: int,
    load: int,
) -> dict[str, dict[str, Any]]:
    """Each server in its own process (as kube-scheduler is in another), all up at once;
    each pod goes to every one (and to the app in this process, unloaded) in a rotated
    order, so each comparison is paired under the same machine load."""
    ctx = multiprocessing.get_context("fork")
    senders: dict[str, Callable[[str, bytes], Any]] = {
        "in-process": lambda path, body: call_wsgi(app, path, body)
    }
    children = {}
    conns = []
    for spec in specs:
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=server_process, args=(spec, app, threads, load, theirs))
        proc.start()
        port = mine.recv()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conns.append(conn)
        senders[spec] = functools.partial(post, conn)
        children[spec] = (proc, mine)
    names = list(senders)
    for filt, prio in work[:5]:  # warm-up
        for name in names:
            timed_pod(senders[name], filt, prio)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for i, (filt, prio) in enumerate(work):
            shift = (i + r) % len(names)
            for name in names[shift:] + names[:shift]:
                times[name].append(timed_pod(senders[name], filt, prio))
    for conn in conns:
        conn.close()
    accepted = {}
    for spec, (proc, pipe) in children.items():
        pipe.send("stop")
        accepted[spec] = pipe.recv()
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    return {name: {"per_pod": times[name], "accepted": accepted.get(name, 0)} for name in names}


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--threads", type=int, default=4, help="server worker threads")
    ap.add_argument(
        "--load", type=int, default=0, help="busy Python threads in each server's process"
    )
    ap.add_argument(
        "--hogs", type=int, default=0, help="busy processes beside (a loaded machine's run queue)"
    )
    ap.add_argument("--rounds", type=int, default=3, help="servers measured in turn, N times")
    ap.add_argument(
        "--servers",
        default="waitress,cheroot,hami",
        help="comma list of SERVER[@SWITCH_INTERVAL_S]; SERVER: waitress, cheroot, hami",
    )
    args = ap.parse_args()
    app, names = build_app(args.nodes, seed=args.nodes)
    work = bodies(names, args.pods, seed=1, app=app)
    hogs = [
        multiprocessing.get_context("fork").Process(target=busy, args=(threading.Event(),))
        for _ in range(args.hogs)
    ]
    for hog in hogs:
        hog.start()
    try:
        results = measure(args.servers.split(","), app, work, args.threads, args.rounds, args.load)
    finally:
        for hog in hogs:
            hog.kill()
    print(
        f"{args.nodes} nodes, {args.pods} pods x {args.rounds} rounds, {args.threads} threads, "
        f"{args.load} busy threads, {args.hogs} busy processes; per pod (filter + prioritize), ms"
    )
    base = results["in-process"]["per_pod"]
    print(
        f"{'server':>11} {'median':>7} {'p90':>7} {'over handlers, median of pairs':>31} {'connections':>11}"
    )
    for kind, r in results.items():
        per = r["per_pod"]
        over = statistics.median(a - b for a, b in zip(per, base, strict=True))
        print(
            f"{kind:>11} {statistics.median(per) * 1e3:7.2f} {p90(per) * 1e3:7.2f} "
            f"{over * 1e3:31.2f} {r['accepted'] if kind != 'in-process' else '-':>11}"
        )


if __name__ == "__main__":
    main()
