"""The real pipeline: pods/s of kube-scheduler 1.20 alone versus the same kube-scheduler
with our extender and webhook, on the same fake nodes (100, 500, 1000 x 8 GPUs).

Everything is real but the kubelets: etcd + kube-apiserver (``tests/e2e/controlplane.py``),
``hami webhook`` (auto certificates, mutating every pod of the benchmark namespace),
``hami scheduler`` (its own process, leader-elected, informer caches), kube-scheduler
with ``nodeCacheCapable: true`` and filter / prioritize / bind verbs. The device plugin's
part is played by an allocator that watches pods and, for each pod our scheduler bound,
does what ``Allocate`` writes after answering kubelet: releases the node lock in one
conditional patch, then ``bind-phase: success``; so each node lock is held until
"Allocate", as in production.

Per size: the pods are created first (kube-scheduler stopped), then kube-scheduler
starts and the clock runs until every pod is bound. The alone run schedules pods asking
only ``nvidia.com/gpu`` (kube-scheduler counts it as an extended resource); the run with
our extender schedules pods shaped like the bundled examples (memory, cores, 1-4 GPUs),
through the webhook. Ratio = our pods/s / alone pods/s, measured in the same run.

    .venv/bin/python benchmarks/bench_pipeline.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubernetes import client as k8s  # noqa: E402
from workload import node_object, pod_shape  # noqa: E402

from hami_core.cluster.kube import CONNECTION_POOL_SIZE, KubeCluster  # noqa: E402
from hami_core.protocol import annotations as keys  # noqa: E402
from tests.e2e.controlplane import LOOPBACK, ControlPlane, find_kube_binaries, free_port  # noqa: E402
from tests.e2e.hami_servers import scheduler_argv, start_webhook  # noqa: E402

MANAGED = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/cores",
    "nvidia.com/priority",
]
ALONE_NS, HAMI_NS = "bench-alone", "bench-hami"


class Allocator:
    """The device plugin's writes for every pod our scheduler bound (see the docstring)."""

    def __init__(self, cp: ControlPlane) -> None:
        cfg = cp.client_configuration()
        cfg.connection_pool_maxsize = CONNECTION_POOL_SIZE  # as the device plugin's client
        self.store = KubeCluster(k8s.ApiClient(cfg), component="bench-allocator")
        self.store.start()
        self._todo: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._stop = False
        self._done: set[str] = set()
        self.store.subscribe(self._on_event)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _on_event(self, kind: str, old: Any, new: Any) -> None:
        if kind != "Pod" or new is None:
            return
        ann = new["metadata"].get("annotations") or {}
        if ann.get(keys.BIND_PHASE) == keys.BIND_PHASE_ALLOCATING and new["spec"].get("nodeName"):
            with self._cond:
                self._todo.append(new)
                self._cond.notify()

    def _run(self) -> None:
        # One worker per node at a time, many nodes at once: each node has its own
        # device plugin in a real cluster.
        pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="allocate")
        busy: set[str] = set()
        while True:
            with self._cond:
                while not self._todo and not self._stop:
                    self._cond.wait()
                if self._stop:
                    pool.shutdown(wait=False)
                    return
                pod = self._todo.pop(0)
                uid = pod["metadata"].get("uid", "")
                if uid in busy or uid in self._done:
                    continue  # kubelet calls Allocate once per pod: later events are not calls
                busy.add(uid)
                self._done.add(uid)
            pool.submit(self._allocate, pod, busy)

    def _allocate(self, pod: dict[str, Any], busy: set[str]) -> None:
        try:
            self._allocate_one(pod)
        finally:
            with self._cond:
                busy.discard(pod["metadata"].get("uid", ""))

    def _allocate_one(self, pod: dict[str, Any]) -> None:
        # The device plugin's writes after it answered kubelet, in its order
        # (``Allocator._commit``): the lock first, then the pod's phase.
        meta, node = pod["metadata"], pod["spec"]["nodeName"]
        with contextlib.suppress(Exception):  # a stale event: its pod is done already
            lock = (
                (self.store.cached_node(node).get("metadata") or {}).get("annotations") or {}
            ).get(keys.NODE_LOCK)
            if lock and lock.endswith(f",{meta['namespace']},{meta['name']}"):
                self.store.remove_node_annotation(node, keys.NODE_LOCK, value=lock)
            self.store.patch_pod_metadata(
                meta["namespace"],
                meta["name"],
                annotations={keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS},
            )

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self.store.stop()


def start_hami(cp: ControlPlane, workdir: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port, metrics = free_port(), free_port()
    log = open(workdir / "hami-scheduler.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        scheduler_argv(cp, port, metrics, "--lease-namespace", "default", "--log-level", "warning"),
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://{LOOPBACK}:{port}"
    cp.wait_for(lambda: _ok(f"{url}/-/leader", b'"leader":true'), timeout=90, message="hami leader")
    global METRICS_URL
    METRICS_URL = f"http://{LOOPBACK}:{metrics}/metrics"
    return url, proc


METRICS_URL = ""


def extender_seconds() -> dict[str, tuple[float, float]]:
    """verb -> (calls, seconds) from ``hami scheduler``'s own histograms."""
    out: dict[str, list[float]] = {}
    # A generous timeout: on a loaded machine the scheduler's metrics thread answers
    # behind its request threads (a 5 s limit once ended a whole run).
    with urllib.request.urlopen(METRICS_URL, timeout=60) as r:
        for line in r.read().decode().splitlines():
            for verb in ("filter", "score", "bind", "node_lock_wait"):
                for part, i in (("_count", 0), ("_sum", 1)):
                    name = (
                        "hami_scheduler_node_lock_wait_seconds"
                        if verb == "node_lock_wait"
                        else f"hami_scheduler_{verb}_duration_seconds"
                    )
                    if line.startswith(name + part + " ") or line.startswith(name + part + "{"):
                        out.setdefault(verb, [0.0, 0.0])[i] += float(line.split()[-1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def _ok(url: str, needle: bytes) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200 and needle in r.read()
    except OSError:
        return False


def pod_body(name: str, limits: dict[str, str], *, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "command": ["sleep", "3600"],
                "resources": {"limits": dict(limits), "requests": {"cpu": "10m", **limits}},
            }
        ]
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create_pods(core: k8s.CoreV1Api, ns: str, bodies: list[dict[str, Any]]) -> None:
    errors: list[BaseException] = []

    def worker(chunk: list[dict[str, Any]]) -> None:
        for b in chunk:
            for attempt in range(20):
                try:
                    core.create_namespaced_pod(ns, b)
                    break
                except k8s.exceptions.ApiException as exc:
                    if exc.status == 409:
                        break
                    if attempt == 19:
                        errors.append(exc)
                    time.sleep(0.5)  # the webhook warming up

    threads = [threading.Thread(target=worker, args=(bodies[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def bound_count(core: k8s.CoreV1Api, ns: str) -> int:
    pods = core.list_namespaced_pod(ns, _preload_content=False)
    import json

    items = json.loads(pods.data)["items"]
    return sum(1 for p in items if (p.get("spec") or {}).get("nodeName"))


def time_until_bound(core: k8s.CoreV1Api, ns: str, n: int, start: float, timeout_s: float) -> float:
    while True:
        done = bound_count(core, ns)
        if done >= n:
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise TimeoutError(f"{ns}: only {done}/{n} pods bound after {timeout_s:.0f} s")
        time.sleep(0.25)  # each poll lists the pods: keep the load it adds small


def clear(core: k8s.CoreV1Api, ns: str) -> None:
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    deadline = time.monotonic() + 120
    while core.list_namespaced_pod(ns, limit=1).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods of {ns} not deleted")
        time.sleep(0.2)


def add_nodes(cp: ControlPlane, first: int, last: int) -> None:
    def worker(indices: list[int]) -> None:
        for i in indices:
            name = f"bench-node-{i:04}"
            obj = node_object(name)
            cp.add_fake_node(
                name,
                annotations=obj["metadata"]["annotations"],
                capacity={"nvidia.com/gpu": "80", "pods": "250"},
            )

    idx = list(range(first, last))
    threads = [threading.Thread(target=worker, args=(idx[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def profiler(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """``py-spy record`` of process ``pid`` into ``out`` until it gets SIGINT (only
    with ``--profile``: ``pip install py-spy`` into the venv first; it needs ptrace
    rights over the process, which root has)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    spy = str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--rate", "200", "--format", "raw", "-o", str(out)]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="100 nodes only, fewer pods")
    ap.add_argument("--pods", type=int, default=0, help="pods per run (default 300; quick 100)")
    ap.add_argument(
        "--profile",
        type=Path,
        help="record py-spy profiles of `hami scheduler` (one per size, while it schedules "
        "the pods with the extender) into this folder, as collapsed stacks (one line per "
        "stack and its sample count: flamegraph.pl or speedscope read them)",
    )
    args = ap.parse_args()
    sizes = [100] if args.quick else [100, 500, 1000]
    pods_n = args.pods or (100 if args.quick else 300)
    rows = []
    with ControlPlane(find_kube_binaries(), ready_timeout=180) as cp:
        assert cp.workdir is not None
        core = k8s.CoreV1Api(cp.api_client())
        core.create_namespace({"metadata": {"name": ALONE_NS}})
        core.create_namespace({"metadata": {"name": HAMI_NS, "labels": {"hami-bench": "on"}}})
        start_webhook(
            cp,
            config_name="hami-bench",
            secret_name="hami-bench-webhook",
            namespace_labels={"hami-bench": "on"},
            extra=("--threads", "8"),
        )
        url, hami = start_hami(cp, cp.workdir)
        allocator = Allocator(cp)
        have = 0
        try:
            for size in sizes:
                add_nodes(cp, have, size)
                have = size
                rng = random.Random(size)
                shapes = [pod_shape(rng) for _ in range(pods_n)]
                # kube-scheduler alone
                cp.stop_process("kube-scheduler")
                create_pods(
                    core,
                    ALONE_NS,
                    [
                        pod_body(
                            f"alone-{i}", {"nvidia.com/gpu": s["nvidia.com/gpu"]}, scheduler=None
                        )
                        for i, s in enumerate(shapes)
                    ],
                )
                t0 = time.monotonic()
                cp.start_default_scheduler()
                alone_s = time_until_bound(core, ALONE_NS, pods_n, t0, 600)
                cp.stop_process("kube-scheduler-default")
                clear(core, ALONE_NS)
                # kube-scheduler + our extender + webhook
                create_pods(
                    core,
                    HAMI_NS,
                    [pod_body(f"hami-{i}", s, scheduler=None) for i, s in enumerate(shapes)],
                )
                before = extender_seconds()
                spy = (
                    profiler(hami.pid, args.profile / f"hami-scheduler-{size}.txt")
                    if args.profile
                    else None
                )
                t0 = time.monotonic()
                cp.start_scheduler(extender_url=url, managed_resources=MANAGED, http_timeout="30s")
                ours_s = time_until_bound(core, HAMI_NS, pods_n, t0, 900)
                after = extender_seconds()
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                    spy.wait(60)
                for verb, (calls, secs) in after.items():
                    c0, s0 = before.get(verb, (0.0, 0.0))
                    if calls > c0:
                        print(
                            f"  {size} nodes: {verb} {calls - c0:.0f} calls, "
                            f"mean {(secs - s0) / (calls - c0) * 1000:.1f} ms",
                            flush=True,
                        )
                cp.stop_process("kube-scheduler")
                clear(core, HAMI_NS)
                rows.append((size, pods_n, pods_n / alone_s, pods_n / ours_s))
                print(
                    f"  {size} nodes: alone {pods_n / alone_s:.1f} pods/s, "
                    f"with extender {pods_n / ours_s:.1f} pods/s",
                    flush=True,
                )
        finally:
            allocator.stop()
            hami.terminate()
            with contextlib.suppress(Exception):
                hami.wait(10)
    print("real kube-apiserver + kube-scheduler 1.20; fake nodes x 8 GPUs; pods bound, not run")
    print(f"{'nodes':>6} {'pods':>5} {'alone pods/s':>13} {'ours pods/s':>12} {'ratio':>6}")
    for size, n, alone, ours in rows:
        print(f"{size:>6} {n:>5} {alone:>13.1f} {ours:>12.1f} {ours / alone:>6.2f}")
    worst = min(ours / alone for _, _, alone, ours in rows)
    print(f"headline: worst pods/s ratio (with extender / alone) = {worst:.2f} (target >= 0.5)")


if __name__ == "__main__":
    main()
