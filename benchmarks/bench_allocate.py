"""API calls per ``/filter`` and per bind, and device-plugin ``Allocate`` latency,
against a real kube-apiserver (v1.20, started by ``tests/e2e/controlplane.py``), under
each ``--trust`` mode side by side (``pipeline_stack.trust_options``):

- ``signed`` (shipped, measured first): ``hami scheduler`` signs every allocation
  (``--allocation-signing-key``), the device plugin verifies it
  (``--allocation-public-keys``) and tells the pod being admitted by kubelet's
  PodResources, so its node claims that capability and binds take no node lock
  (PROTOCOL.md §4a);
- ``off``: HAMi's node-lock protocol (nodes still running HAMi's device plugin): every
  bind locks the node, only the pod the lock names is served, and the lock is released
  after the answer;
- ``all`` (only when asked): every allocation trusted, no signature read.

The scheduler (``KubeCluster`` caches + ``Scheduler`` signing as ``hami scheduler``
does) and the device plugin (``NodeKubeCluster``, its node and its pods, watched, under
the product's ``DevicePluginProcess``, whose ``Allocator`` of hami-nvidia is what is
called; its devices given as discovery would find them) run in this process, each with
its own API client whose HTTP requests are counted (watch streams left out: they are
opened once). kubelet's PodResources is the stand-in kubelets' (``KubeletPods``): a pod
is listed from its admission on, each container with the IDs its answered ``Allocate``
gave it. Each pod is created, seen by the scheduler's cache, filtered over every node,
bound, seen bound by the plugin's cache (as kubelet sees it bound before it calls
``Allocate``), and allocated with the IDs kubelet would pick (the plugin's
``GetPreferredAllocation`` among the free ones). ``Allocate`` is timed from the call
to its answer; its writes follow on the plugin's one background thread, as in
``hami device-plugin``, and the next pod starts once they are seen.

    .venv/bin/python benchmarks/bench_allocate.py [--quick] [--trust signed,off]
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
from pipeline_stack import (  # noqa: E402
    TRUST_MODES,
    claims_podresources,
    published_annotations,
    trust_options,
)
from workload import devices, pod_object  # noqa: E402

from hami_core.cluster.direct import NodeKubeCluster  # noqa: E402
from hami_core.cluster.events import EventRecorder  # noqa: E402
from hami_core.cluster.kube import KubeCluster  # noqa: E402
from hami_core.deviceplugin import PreferredRequest  # noqa: E402
from hami_core.plugin import BackendManager  # noqa: E402
from hami_core.protocol import annotations as keys  # noqa: E402
from hami_core.protocol.config import parse_config  # noqa: E402
from hami_core.servers.deviceplugin_main import DevicePluginProcess  # noqa: E402
from hami_core.servers.options import DevicePluginOptions, SchedulerOptions  # noqa: E402
from hami_core.servers.scheduler_main import SIGNING_KEY_FLAG, build_scheduler  # noqa: E402
from hami_core.servers.signingkeys import signer_from_setting  # noqa: E402
from tests.e2e.controlplane import ControlPlane, find_kube_binaries  # noqa: E402
from tests.e2e.hami_servers import signing_keys  # noqa: E402
from tests.standin_kubelet import KubeletPods  # noqa: E402

#: What each ``--trust`` mode stands for, in the table's header.
MODE_NAMES = {
    "signed": "signed (shipped)",
    "off": "off (HAMi's node lock)",
    "all": "all (trust, no check)",
}


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


def summary(rows: list[dict[str, int]]) -> str:
    """``PATCH 2.00, POST 1.00``: mean requests per row by method, or ``none``."""
    c: collections.Counter[str] = collections.Counter()
    for r in rows:
        c.update(r)
    return ", ".join(f"{m} {c[m] / len(rows):.2f}" for m in sorted(c)) or "none"


def measure(
    cp: ControlPlane, mode: str, *, pods_n: int, nodes_n: int, workdir: Path
) -> dict[str, Any]:
    """``pods_n`` pods one at a time on the first of ``nodes_n`` fresh nodes under
    ``--trust`` mode ``mode`` (module docstring). Requests per pod by step (method ->
    count), ``Allocate`` latencies in seconds."""
    core = k8s.CoreV1Api(cp.api_client())
    claims = claims_podresources(mode)
    names = [f"alloc-{mode}-{i:02}" for i in range(nodes_n)]
    for n in names:
        cp.add_fake_node(
            n,
            annotations=published_annotations(n, claims=claims),
            capacity={"nvidia.com/gpu": "80"},
        )
    hooks = workdir / f"hooks-{mode}"
    base = BackendManager.from_plugins({"nvidia": hami_nvidia.plugin})
    manager = base.with_config(
        parse_config({"version": "v1", "nvidia": {"hookPath": str(hooks)}}, backends=base.infos)
    )
    private_key, public_key = signing_keys(cp)
    sched_api, sched_calls = counted_client(cp)
    # as run_scheduler builds them
    store = KubeCluster(sched_api, scheduler_name=manager.config.scheduler_name)
    store.start()
    events = EventRecorder(store).start()
    opts = SchedulerOptions()
    scheduler = build_scheduler(opts, store, manager, events)
    # as run_scheduler: every allocation signed, whatever the nodes claim
    scheduler.binder.signer = signer_from_setting(str(private_key), flag=SIGNING_KEY_FLAG)
    target = names[0]
    plugin_api, plugin_calls = counted_client(cp)
    pstore = NodeKubeCluster(plugin_api, node=target)
    pstore.start()
    wait(lambda: pstore.nodes.peek(target) is not None, "plugin node cache")
    kubelet = KubeletPods("nvidia.com/gpu")
    process = DevicePluginProcess(
        DevicePluginOptions(
            node_name=target,
            backend="nvidia",
            plugin_dir=str(workdir / f"plugins-{mode}"),
            state_dir=str(workdir / f"state-{mode}"),
        ),
        store=pstore,
        manager=manager,
        async_release=True,  # as hami device-plugin: the writes after the answer
        pod_resources=kubelet.source(target),
        **trust_options(mode, public_key),
    )
    process.state.update(devices(target))  # what discovery finds on the node
    allocator = process.allocator
    filter_calls: list[dict[str, int]] = []
    bind_calls: list[dict[str, int]] = []
    alloc_calls: list[dict[str, int]] = []
    alloc_s: list[float] = []
    live_fallbacks = 0
    plugin_base = plugin_calls.snapshot()
    try:
        for i in range(pods_n):
            limits = {
                "nvidia.com/gpu": "1",
                "nvidia.com/gpumem": "1000",
                "nvidia.com/gpucores": "1",
            }
            body = pod_object(f"alloc-{mode}-{i}", limits)
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
            seen = pstore.pods.peek(key)
            assert seen is not None
            # kubelet admits it: listed, then the plugin's preferred free ID (else the first)
            kubelet.admit(target, seen)
            used = {i for ids in kubelet.held_ids(target).values() for i in ids}
            free = tuple(sorted(process.state.known_ids() - used))
            (ids,) = allocator.preferred([PreferredRequest(available=free, size=1)])
            if len(ids) != 1 or ids[0] not in free:
                ids = list(free[:1])
            before_mine = plugin_calls.mine()
            t0 = time.perf_counter()
            allocator.allocate([list(ids)])
            alloc_s.append(time.perf_counter() - t0)
            made = delta(plugin_calls.mine(), before_mine)  # the writes run on another thread
            alloc_calls.append(made)
            live_fallbacks += made.get("GET", 0) > 0
            kubelet.give(target, str(created.metadata.uid), "main", ids)

            def written(key: str = key) -> bool:  # the plugin's writes after the answer
                p = store.pods.peek(key) or {}
                ann = (p.get("metadata") or {}).get("annotations") or {}
                n = (store.nodes.peek(target) or {}).get("metadata") or {}
                return ann.get(keys.BIND_PHASE) == keys.BIND_PHASE_SUCCESS and (
                    keys.NODE_LOCK not in (n.get("annotations") or {})
                )

            wait(written, "the device plugin's writes")
        after_total = delta(plugin_calls.snapshot(), plugin_base)
    finally:
        process.state.close()
        events.stop()
        pstore.stop()
        store.stop()
    after = {
        m: (after_total.get(m, 0) - sum(r.get(m, 0) for r in alloc_calls)) / pods_n
        for m in after_total
    }
    return {
        "mode": mode,
        "filter": filter_calls,
        "bind": bind_calls,
        "allocate": alloc_calls,
        "after": after,
        "alloc_s": alloc_s,
        "live": live_fallbacks,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer pods")
    ap.add_argument(
        "--trust",
        default="signed,off",
        help=f"comma-separated --trust modes to measure, in order ({', '.join(TRUST_MODES)}; "
        "default signed,off: the shipped path, then HAMi's node lock)",
    )
    args = ap.parse_args()
    modes = [m.strip() for m in args.trust.split(",") if m.strip()]
    for m in modes:
        if m not in TRUST_MODES:
            ap.error(f"--trust {m!r}: expected {', '.join(TRUST_MODES)}")
    pods_n = 40 if args.quick else 75  # one node: 8 GPUs x split 10 = 80 slices
    nodes_n = 20
    with (
        ControlPlane(find_kube_binaries()) as cp,
        tempfile.TemporaryDirectory() as tmp,
    ):
        rows = [measure(cp, m, pods_n=pods_n, nodes_n=nodes_n, workdir=Path(tmp)) for m in modes]

    width = 30
    print(
        f"real kube-apiserver 1.20; {nodes_n} nodes x 8 GPUs per mode; {pods_n} pods, one at a "
        "time; API requests per pod (mean)"
    )
    print(f"{'--trust':<28} " + " ".join(f"{MODE_NAMES[r['mode']]:<{width}}" for r in rows))

    def line(step: str, cells: list[str]) -> None:
        print(f"{step:<28} " + " ".join(f"{c:<{width}}" for c in cells).rstrip())

    line("/filter (all nodes)", [summary(r["filter"]) for r in rows])
    line("bind", [summary(r["bind"]) for r in rows])
    line("Allocate (until the answer)", [summary(r["allocate"]) for r in rows])
    line(
        "after the answer",
        [
            ", ".join(f"{m} {v:.2f}" for m, v in sorted(r["after"].items()) if v) or "none"
            for r in rows
        ],
    )
    line(
        "Allocate p50 / p99 (ms)",
        [
            f"{statistics.median(r['alloc_s']) * 1000:.2f} / "
            f"{percentile(r['alloc_s'], 0.99) * 1000:.2f}"
            for r in rows
        ],
    )
    line("live reads on a cache miss", [str(r["live"]) for r in rows])
    print(
        "headline: "
        + "; ".join(
            f"{r['mode']}: Allocate p99 = {percentile(r['alloc_s'], 0.99) * 1000:.2f} ms "
            f"(target <= 10), writes before the answer = "
            f"{max(a.get('PATCH', 0) + a.get('POST', 0) for a in r['allocate'])} (target <= 1), "
            f"bind = {summary(r['bind'])} (target <= 3 writes, no reads), "
            f"filter = {summary(r['filter'])}"
            for r in rows
        )
    )


if __name__ == "__main__":
    main()
