"""API calls per ``/filter`` and per bind, and device-plugin ``Allocate`` latency,
against a real kube-apiserver (v1.20, started by ``tests/e2e/controlplane.py``).

The scheduler (``KubeCluster`` caches + ``Scheduler``) and the device plugin
(``NodeKubeCluster``: its node and its pods, watched + the real ``Allocator`` of
hami-nvidia) run in this process, each with its own API client whose HTTP requests are
counted (watch streams left out: they are opened once). Each pod is created, seen by
the scheduler's cache, filtered over every node, bound (node lock, allocation
annotations, Binding), seen bound by the plugin's cache (as kubelet sees it bound before
it calls ``Allocate``), and allocated. ``Allocate`` is timed from the call to its
answer; the lock is released after the answer, in one call.

    .venv/bin/python benchmarks/bench_allocate.py [--quick]
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hami_nvidia.plugin  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from workload import devices, node_object, pod_object  # noqa: E402

from hami_core.cluster.direct import NodeKubeCluster  # noqa: E402
from hami_core.cluster.events import EventRecorder  # noqa: E402
from hami_core.cluster.kube import KubeCluster  # noqa: E402
from hami_core.deviceplugin import Allocator  # noqa: E402
from hami_core.plugin import BackendManager  # noqa: E402
from hami_core.protocol import annotations as keys  # noqa: E402
from hami_core.protocol.config import parse_config  # noqa: E402
from hami_core.scheduling.scheduler import Scheduler  # noqa: E402
from tests.e2e.controlplane import ControlPlane, find_kube_binaries  # noqa: E402


class Counted:
    """Wraps an API client's pool manager; counts requests by method (watches apart),
    and apart those of the calling thread (what a caller waits for)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.counts: collections.Counter[str] = collections.Counter()
        self.by_thread: dict[int, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self._lock = threading.Lock()

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        fields = kwargs.get("fields") or []
        watch = "watch=True" in url or "watch=true" in url or ("watch", True) in list(fields)
        if not watch:
            with self._lock:
                self.counts[method] += 1
                self.by_thread[threading.get_ident()][method] += 1
        return self._pool.request(method, url, *args, **kwargs)

    def snapshot(self) -> collections.Counter[str]:
        with self._lock:
            return collections.Counter(self.counts)

    def mine(self) -> collections.Counter[str]:
        """This thread's requests so far."""
        with self._lock:
            return collections.Counter(self.by_thread[threading.get_ident()])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def counted_client(cp: ControlPlane) -> tuple[k8s.ApiClient, Counted]:
    api = cp.api_client(new=True)
    pool = Counted(api.rest_client.pool_manager)
    api.rest_client.pool_manager = pool
    return api, pool


def wait(cond: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.001)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def delta(after: collections.Counter[str], before: collections.Counter[str]) -> dict[str, int]:
    return {m: after[m] - before[m] for m in sorted(after) if after[m] - before[m]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer pods")
    args = ap.parse_args()
    pods_n = 40 if args.quick else 75  # one node: 8 GPUs x split 10 = 80 slices
    nodes_n = 20
    bins = find_kube_binaries()
    with ControlPlane(bins) as cp, tempfile.TemporaryDirectory() as hooks:
        core = k8s.CoreV1Api(cp.api_client())
        names = [f"alloc-node-{i:02}" for i in range(nodes_n)]
        for n in names:
            obj = node_object(n)
            cp.add_fake_node(
                n,
                annotations=obj["metadata"]["annotations"],
                capacity={"nvidia.com/gpu": "80"},
            )
        base = BackendManager.from_plugins({"nvidia": hami_nvidia.plugin})
        manager = base.with_config(
            parse_config({"version": "v1", "nvidia": {"hookPath": hooks}}, backends=base.infos)
        )
        sched_api, sched_calls = counted_client(cp)
        store = KubeCluster(sched_api)
        store.start()
        events = EventRecorder(store).start()
        scheduler = Scheduler(store, manager, events=events, lock_wait_s=5.0)
        target = names[0]
        plugin_api, plugin_calls = counted_client(cp)
        pstore = NodeKubeCluster(plugin_api, node=target)
        pstore.start()
        wait(lambda: pstore.nodes.peek(target) is not None, "plugin node cache")
        ids = frozenset(f"{d.uuid}-{i}" for d in devices(target) for i in range(10))
        allocator = Allocator(
            pstore,
            manager,
            vendor="NVIDIA",
            node=target,
            known_ids=lambda: ids,
            after_answer=lambda fn: threading.Thread(target=fn, daemon=True).start(),
        )
        filter_calls: list[dict[str, int]] = []
        bind_calls: list[dict[str, int]] = []
        alloc_calls: list[dict[str, int]] = []
        alloc_s: list[float] = []
        live_fallbacks = 0
        plugin_base = plugin_calls.snapshot()
        for i in range(pods_n):
            limits = {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": "1000",
                "nvidia.com/gpucores": "1",
            }
            body = pod_object(f"alloc-{i}", limits)
            body["metadata"].pop("uid")
            body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": target}
            created = core.create_namespaced_pod("default", body)
            key = f"default/{created.metadata.name}"
            wait(lambda key=key: store.pods.peek(key) is not None, "scheduler pod cache")
            pod = store.pods.peek(key)
            assert pod is not None
            before = sched_calls.snapshot()
            result = scheduler.filter(pod, names)
            filter_calls.append(delta(sched_calls.snapshot(), before))
            assert target in result.feasible, result.failed.get(target)
            before = sched_calls.snapshot()
            scheduler.bind("default", created.metadata.name, uid=created.metadata.uid, node=target)
            bind_calls.append(delta(sched_calls.snapshot(), before))

            def bound(key: str = key) -> bool:
                p = pstore.pods.peek(key)
                ann = ((p or {}).get("metadata") or {}).get("annotations") or {}
                return ann.get(keys.BIND_PHASE) == keys.BIND_PHASE_ALLOCATING

            wait(bound, "plugin pod cache")
            uuid = result.fits[target].allocation.all_devices()[0].uuid  # type: ignore[union-attr]
            before = plugin_calls.mine()
            t0 = time.perf_counter()
            allocator.allocate([[f"{uuid}-0"]])
            alloc_s.append(time.perf_counter() - t0)
            used = delta(plugin_calls.mine(), before)  # the release runs on another thread
            alloc_calls.append(used)
            live_fallbacks += used.get("GET", 0) > 0

            def released() -> bool:
                node = store.nodes.peek(target) or {}
                return keys.NODE_LOCK not in ((node.get("metadata") or {}).get("annotations") or {})

            wait(released, "lock released")
        release_total = delta(plugin_calls.snapshot(), plugin_base)
        events.stop()
        pstore.stop()
        store.stop()

    def summary(rows: list[dict[str, int]]) -> str:
        c: collections.Counter[str] = collections.Counter()
        for r in rows:
            c.update(r)
        return ", ".join(f"{m} {c[m] / len(rows):.2f}" for m in sorted(c)) or "none"

    print(f"real kube-apiserver 1.20; {nodes_n} nodes x 8 GPUs; {pods_n} pods, one at a time")
    print(f"{'step':<28} {'API requests per pod (mean)':<40}")
    print(f"{'/filter (all nodes)':<28} {summary(filter_calls):<40}")
    print(f"{'bind':<28} {summary(bind_calls):<40}")
    print(f"{'Allocate (until the answer)':<28} {summary(alloc_calls):<40}")
    rest = {
        m: (release_total.get(m, 0) - sum(r.get(m, 0) for r in alloc_calls)) / pods_n
        for m in release_total
    }
    print(
        f"{'after the answer (release)':<28} {', '.join(f'{m} {v:.2f}' for m, v in sorted(rest.items()) if v)}"
    )
    p50, p99 = statistics.median(alloc_s), percentile(alloc_s, 0.99)
    print(
        f"Allocate latency: p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms; live reads on a cache miss: {live_fallbacks}"
    )
    print(
        f"headline: Allocate p99 = {p99 * 1000:.2f} ms (target <= 10), writes before the answer = "
        f"{max(r.get('PATCH', 0) + r.get('POST', 0) for r in alloc_calls)} (target <= 1), "
        f"bind = {summary(bind_calls)} (target <= 3 writes, no reads), filter = {summary(filter_calls)}"
    )


if __name__ == "__main__":
    main()
