"""The real pipeline: pods/s of kube-scheduler 1.20 alone versus the same kube-scheduler
with our extender and webhook, on the same fake nodes (100, 500, 1000 x 8 GPUs), with
kubelet played honestly.

Everything is real but the kubelets: etcd + kube-apiserver (``tests/e2e/controlplane.py``),
``hami webhook`` (auto certificates, mutating every pod of the benchmark namespace),
``hami scheduler`` (its own process, leader-elected, informer caches), kube-scheduler
with ``nodeCacheCapable: true`` and filter / prioritize / bind verbs. Each node's kubelet
and device plugin are played by ``tests/standin_kubelet.py``: it admits a pod
``--admission-delay`` seconds (default 0.3) after seeing it bound, one pod at a time per
node, and calls the real ``hami_core.deviceplugin.Allocator`` (preferred allocation,
then ``Allocate`` per container with device IDs it picks as kubelet does); the device
plugin's writes (the node lock's release, the pod's progress) follow its answer as in
``hami device-plugin``. So a node lock is held as long as in a cluster, not released the
instant the pod is bound.

Workloads: ``mixed``, the bundled examples' shapes (memory, cores, 1-4 GPUs, seeded), and
``burst``, identical 1-GPU 8000 MiB pods (the default binpack policy piles them onto few
nodes: the worst case for a per-node lock). Arrivals: ``before`` (pods created with
kube-scheduler stopped, the clock from its start until every pod is bound) and
``during`` (kube-scheduler running, the clock from the first create until every pod is
bound). The alone run schedules pods asking only ``nvidia.com/gpu`` (an extended
resource to kube-scheduler). Every cell runs alone then ours, ``--runs`` times (default
3); a ratio is ours / alone within one run, and each figure printed is the median of the
runs with its min-max spread.

Also per cell: the API writes per bound pod beyond the Binding that the scheduler side
made (from kube-apiserver's ``apiserver_request_total``: writes to pods and nodes, less
the benchmark's creates, the Bindings and the stand-in device plugins' writes, which it
counts in its own client), the mean node-lock wait per bind and the mean bind (from
``hami scheduler``'s histograms), and admissions the device plugin refused (0 expected);
per run, each phase's CPU milliseconds per pod by process (``/proc``: on a shared machine
the pace follows the CPU a pod costs), the extender calls per pod and every API write per
pod (events included). ``--noop python,go`` also runs kube-scheduler against a no-op
extender in its own process in each run (``noop_extender.py``, hami scheduler's HTTP
transport; ``noop_extender.go``, Go's): what any extender pays, printed as ours / no-op
and no-op / alone. ``--filter-answer`` is passed to ``hami scheduler``.

    .venv/bin/python benchmarks/bench_pipeline.py [--quick] [--runs N] [--sizes 100,500]
        [--workloads mixed,burst] [--arrivals before,during] [--pods N]
        [--admission-delay S] [--trust signed|off|all] [--noop auto|none|python,go]
        [--filter-answer best|all] [--profile DIR]

``--trust`` (default ``signed``, the shipped path): ``hami scheduler`` signs every
allocation (``--allocation-signing-key``, a key generated for the run) and the stand-in
device plugins verify it with the real ``AllocationVerifier`` given the public key
(``--allocation-public-keys``), read PodResources, and their nodes claim it, so binds
take no node lock; ``off``: no trust check, every bind takes HAMi's node lock (nodes still
running HAMi's device plugin); ``all``: every allocation trusted unread (no lock, no
verifying).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import random
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline_stack  # noqa: E402
from kubernetes import client as k8s  # noqa: E402
from noop_floor import cpu_per_pod, process_cpu, settle, start_noop  # noqa: E402
from pipeline_stack import (  # noqa: E402
    HAMI_NS,
    MANAGED,
    TRUST_MODES,
    WRITES,
    BoundWatch,
    StandIn,
    claims_podresources,
    published_annotations,
    running_stack,
)
from workload import pod_shape  # noqa: E402

from tests.e2e.controlplane import (  # noqa: E402
    ControlPlane,
)
from tests.standin_kubelet import DEFAULT_ADMISSION_DELAY_S  # noqa: E402

ALONE_NS, NOOP_NS = "bench-alone", "bench-noop"
BURST_SHAPE = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}


def apiserver_requests(
    cp: ControlPlane, verbs: Sequence[str] = ("GET", "LIST", "WATCH", *WRITES)
) -> collections.Counter[tuple[str, str]]:
    """Requests of ``verbs`` kube-apiserver has served so far, by (verb,
    resource[/subresource]), from its ``apiserver_request_total`` counter (pods, nodes
    and events only; a pod create refused while the webhook warms up not counted)."""
    assert cp.api_url is not None and cp.ca_cert_path is not None
    request = urllib.request.Request(
        f"{cp.api_url}/metrics", headers={"Authorization": f"Bearer {cp.token}"}
    )
    tls = ssl.create_default_context(cafile=str(cp.ca_cert_path))
    with urllib.request.urlopen(request, timeout=60, context=tls) as r:
        text = r.read().decode()
    out: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(
            part.split("=", 1)
            for part in line[line.index("{") + 1 : line.rindex("}")].replace('"', "").split(",")
            if "=" in part
        )
        verb, resource = labels.get("verb", ""), labels.get("resource", "")
        if verb not in verbs or resource not in ("pods", "nodes", "events"):
            continue
        sub = labels.get("subresource", "")
        if (verb, resource, sub) == ("POST", "pods", "") and not labels.get("code", "").startswith(
            "2"
        ):
            continue  # the benchmark's creates retried while the webhook warms up
        out[(verb, f"{resource}/{sub}" if sub else resource)] += int(float(line.split()[-1]))
    return out


def extender_seconds() -> dict[str, tuple[float, float]]:
    """verb -> (calls, seconds) from ``hami scheduler``'s own histograms."""
    out: dict[str, list[float]] = {}
    # A generous timeout: on a loaded machine the scheduler's metrics thread answers
    # behind its request threads (a 5 s limit once ended a whole run).
    with urllib.request.urlopen(pipeline_stack.METRICS_URL, timeout=60) as r:
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


def kube_scheduler_algorithm_ms(cp: ControlPlane) -> float:
    """kube-scheduler's mean ``scheduling_algorithm_duration`` since it started, in ms:
    the filter and prioritize of one pod as kube-scheduler sees them (our extender's
    calls included, one pod at a time); 0 when it cannot be read."""
    if not cp.scheduler_healthz_url:
        return 0.0
    url = cp.scheduler_healthz_url.replace("/healthz", "/metrics")
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    found: dict[str, float] = {}
    for line in text.splitlines():
        for part in ("_sum", "_count"):
            if line.startswith(f"scheduler_scheduling_algorithm_duration_seconds{part} "):
                found[part] = float(line.split()[-1])
    count = found.get("_count", 0.0)
    return found.get("_sum", 0.0) / count * 1000 if count else 0.0


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


def clear(core: k8s.CoreV1Api, ns: str) -> None:
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    deadline = time.monotonic() + 120
    while core.list_namespaced_pod(ns, limit=1).items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods of {ns} not deleted")
        time.sleep(0.2)


def add_nodes(cp: ControlPlane, first: int, last: int, *, claims: bool) -> None:
    """Nodes ``first`` .. ``last - 1`` as their device plugins publish them
    (``pipeline_stack.published_annotations``: with ``claims``, binds to them take no
    node lock)."""

    def worker(indices: list[int]) -> None:
        for i in indices:
            name = f"bench-node-{i:04}"
            cp.add_fake_node(
                name,
                annotations=published_annotations(name, claims=claims),
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
    if not Path(spy).exists():
        spy = shutil.which("py-spy") or spy
    return subprocess.Popen(
        [
            spy,
            "record",
            *(os.environ.get("HAMI_BENCH_PYSPY", "--idle").split()),
            "--pid",
            str(pid),
            "--rate",
            "100",
            "--format",
            "raw",
            "-o",
            str(out),
        ]
    )


@contextlib.contextmanager
def profiling(pid: int, out: Path | None) -> Iterator[None]:
    """``profiler`` around the block when ``out`` is set."""
    spy = profiler(pid, out) if out is not None else None
    try:
        yield
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            spy.wait(60)


def shapes_of(workload: str, n: int, seed: int) -> list[dict[str, str]]:
    """``n`` pods' limits: the examples' mix (seeded), or the burst's one shape."""
    if workload == "burst":
        return [dict(BURST_SHAPE) for _ in range(n)]
    rng = random.Random(seed)
    return [pod_shape(rng) for _ in range(n)]


def timed_run(
    core: k8s.CoreV1Api,
    bound: BoundWatch,
    ns: str,
    bodies: list[dict[str, Any]],
    *,
    arrival: str,
    start_scheduler: Callable[[], None],
    timeout_s: float,
) -> float:
    """Seconds until every pod of ``bodies`` is bound: created first and timed from the
    scheduler's start (``before``), or created while the scheduler runs and timed from
    the first create (``during``)."""
    if arrival == "before":
        create_pods(core, ns, bodies)
        t0 = time.monotonic()
        start_scheduler()
        return bound.time_until_bound(ns, len(bodies), t0, timeout_s)
    start_scheduler()
    t0 = time.monotonic()
    creator = threading.Thread(target=create_pods, args=(core, ns, bodies), daemon=True)
    creator.start()
    took = bound.time_until_bound(ns, len(bodies), t0, timeout_s)
    creator.join()
    return took


class Cell:
    """One (size, workload, arrival) cell: the figures of each run."""

    def __init__(self) -> None:
        self.alone: list[float] = []
        self.ours: list[float] = []
        self.ratio: list[float] = []
        self.writes: list[float] = []
        self.lock_wait_ms: list[float] = []
        self.bind_ms: list[float] = []
        self.filter_ms: list[float] = []
        # per no-op extender (python, go): pods/s, ours / no-op, no-op / alone
        self.noop: dict[str, list[float]] = collections.defaultdict(list)
        self.ours_per_noop: dict[str, list[float]] = collections.defaultdict(list)
        self.noop_per_alone: dict[str, list[float]] = collections.defaultdict(list)
        self.refused = 0
        self.breakdown: collections.Counter[tuple[str, str]] = collections.Counter()


def median_spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """``median (min-max)`` of ``values``."""
    if not values:
        return "-"
    med = fmt.format(statistics.median(values))
    if len(values) == 1:
        return med
    return f"{med} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def run_cell(
    cp: ControlPlane,
    core: k8s.CoreV1Api,
    standin: StandIn,
    hami_pid: int,
    url: str,
    *,
    size: int,
    workload: str,
    arrival: str,
    pods_n: int,
    seed: int,
    cell: Cell,
    profile: Path | None,
    noop_urls: dict[str, str] | None = None,
    pids: dict[str, int] | None = None,
    kube_qps: float | None = None,
) -> None:
    """One run of one cell: kube-scheduler alone, then with each no-op extender of
    ``noop_urls`` (language -> URL), then with our extender + webhook. Prints each
    phase's CPU per pod by process (``pids``: processes beyond the control plane's).
    ``kube_qps``: kube-scheduler's client rate limit in every phase (None: its
    defaults, 50 requests/s, burst 100)."""
    shapes = shapes_of(workload, pods_n, seed)
    label = f"{size} nodes, {workload}, {arrival}"
    pids = pids or {}
    # kube-scheduler alone
    cp.stop_process("kube-scheduler")
    settled = [settle(cp, pids)]
    cpu0 = process_cpu(cp, pids)
    alone_s = timed_run(
        core,
        standin.bound,
        ALONE_NS,
        [
            pod_body(f"alone-{i}", {"nvidia.com/gpu": s["nvidia.com/gpu"]}, scheduler=None)
            for i, s in enumerate(shapes)
        ],
        arrival=arrival,
        start_scheduler=lambda: cp.start_default_scheduler(client_qps=kube_qps),
        timeout_s=600,
    )
    cpu_alone = cpu_per_pod(cpu0, process_cpu(cp, pids), pods_n)
    cp.stop_process("kube-scheduler-default")
    clear(core, ALONE_NS)
    noop_s: dict[str, float] = {}
    for language, noop_url in (noop_urls or {}).items():  # the floor: no-op extenders
        settled.append(settle(cp, pids))
        cpu0 = process_cpu(cp, pids)
        noop_s[language] = timed_run(
            core,
            standin.bound,
            NOOP_NS,
            [pod_body(f"noop-{i}", s, scheduler="hami-scheduler") for i, s in enumerate(shapes)],
            arrival=arrival,
            start_scheduler=lambda url=noop_url: cp.start_scheduler(
                extender_url=url,
                managed_resources=MANAGED,
                http_timeout="30s",
                client_qps=kube_qps,
            ),
            timeout_s=600,
        )
        cpu_noop = cpu_per_pod(cpu0, process_cpu(cp, pids), pods_n)
        noop_ms = kube_scheduler_algorithm_ms(cp)  # a scrape: after the CPU is read
        cp.stop_process("kube-scheduler")
        clear(core, NOOP_NS)
        print(
            f"  {label}: no-op extender ({language}) {pods_n / noop_s[language]:.1f} pods/s, "
            "kube-scheduler "
            f"algorithm mean {noop_ms:.1f} ms; CPU ms/pod: {cpu_noop}",
            flush=True,
        )
    # kube-scheduler + our extender + webhook, the stand-in kubelets admitting
    api_before, plugin_before = apiserver_requests(cp), standin.writes.snapshot()
    before = extender_seconds()  # a scrape: before the stack settles
    settled.append(settle(cp, pids))
    cpu0 = process_cpu(cp, pids)
    with profiling(hami_pid, profile):
        ours_s = timed_run(
            core,
            standin.bound,
            HAMI_NS,
            [pod_body(f"hami-{i}", s, scheduler=None) for i, s in enumerate(shapes)],
            arrival=arrival,
            start_scheduler=lambda: cp.start_scheduler(
                extender_url=url,
                managed_resources=MANAGED,
                http_timeout="30s",
                client_qps=kube_qps,
            ),
            timeout_s=900,
        )
    # CPU first: a scrape of hami scheduler's /metrics costs it ~1.2 s of CPU at 1000
    # nodes x 8 GPUs (98 000 series), ~4 ms a pod of a 300-pod run, and is no part of
    # scheduling them (it was counted in the CPU per pod until 2026-12-02)
    cpu_ours = cpu_per_pod(cpu0, process_cpu(cp, pids), pods_n)
    after = extender_seconds()
    algorithm_ms = kube_scheduler_algorithm_ms(cp)
    cp.stop_process("kube-scheduler")
    # every admission answered and its writes made, then the write counts
    uids = [p.metadata.uid for p in core.list_namespaced_pod(HAMI_NS).items]
    if not standin.kubelet.wait_admitted(uids, timeout_s=300):
        print(f"  {label}: not every pod admitted within 300 s", flush=True)
    time.sleep(1.0)  # the device plugins' writes follow their answers
    requests = apiserver_requests(cp) - api_before
    api = collections.Counter({k: n for k, n in requests.items() if k[0] in WRITES})
    plugin = standin.writes.snapshot() - plugin_before
    failures = standin.kubelet.failures()
    refused = len(failures)
    for failure in failures[:2]:  # what kubelet would report as UnexpectedAdmissionError
        print(f"  {label}: admission of {failure.ref} refused: {failure.error}", flush=True)
    clear(core, HAMI_NS)
    scheduler_side = collections.Counter(api)
    scheduler_side.subtract(plugin)
    scheduler_side[("POST", "pods")] -= pods_n  # the benchmark's creates
    scheduler_side[("POST", "pods/binding")] -= pods_n  # the Bindings themselves
    beyond = {k: v for k, v in scheduler_side.items() if v > 0 and not k[1].startswith("events")}
    calls = {
        verb: (calls - before.get(verb, (0.0, 0.0))[0], secs - before.get(verb, (0.0, 0.0))[1])
        for verb, (calls, secs) in after.items()
    }
    binds = calls.get("bind", (0.0, 0.0))
    waited = calls.get("node_lock_wait", (0.0, 0.0))
    filters = calls.get("filter", (0.0, 0.0))
    cell.alone.append(pods_n / alone_s)
    cell.ours.append(pods_n / ours_s)
    cell.ratio.append(alone_s / ours_s)
    for language, took in noop_s.items():
        cell.noop[language].append(pods_n / took)
        cell.ours_per_noop[language].append(took / ours_s)
        cell.noop_per_alone[language].append(alone_s / took)
    cell.writes.append(sum(beyond.values()) / pods_n)
    cell.breakdown.update(beyond)
    cell.refused += refused
    if binds[0]:
        cell.bind_ms.append(binds[1] / binds[0] * 1000)
        cell.lock_wait_ms.append(waited[1] / binds[0] * 1000)
    if filters[0]:
        cell.filter_ms.append(filters[1] / filters[0] * 1000)
    print(
        f"  {label}: alone {pods_n / alone_s:.1f} pods/s, ours {pods_n / ours_s:.1f} pods/s, "
        f"ratio {alone_s / ours_s:.2f}; writes/pod beyond the Binding "
        f"{sum(beyond.values()) / pods_n:.2f} {dict(sorted(beyond.items()))}; "
        f"bind mean {cell.bind_ms[-1] if cell.bind_ms else 0:.0f} ms, lock wait per bind "
        f"{cell.lock_wait_ms[-1] if cell.lock_wait_ms else 0:.0f} ms, filter mean "
        f"{cell.filter_ms[-1] if cell.filter_ms else 0:.1f} ms, kube-scheduler algorithm mean "
        f"{algorithm_ms:.1f} ms; refused admissions {refused}",
        flush=True,
    )
    print(
        f"  {label}: CPU ms/pod, alone: {cpu_alone}; ours: {cpu_ours}; each phase started "
        f"once the stack idled, after {', '.join(f'{s:.1f}' for s in settled)} s",
        flush=True,
    )
    every = {f"{v} {r}": round(n / pods_n, 2) for (v, r), n in sorted(api.items()) if n > 0}
    reads = {
        f"{v} {r}": round(n / pods_n, 2)
        for (v, r), n in sorted(requests.items())
        if n > 0 and v not in WRITES
    }
    print(
        f"  {label}: extender calls per pod: filter {filters[0] / pods_n:.2f}, prioritize "
        f"{calls.get('score', (0.0, 0.0))[0] / pods_n:.2f}, bind {binds[0] / pods_n:.2f}; "
        f"every API write per pod (all clients): {every}; reads per pod: {reads}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="100 nodes only, 100 pods per run")
    ap.add_argument("--pods", type=int, default=0, help="pods per run (default 300; quick 100)")
    ap.add_argument("--runs", type=int, default=3, help="runs per cell (the median is printed)")
    ap.add_argument("--sizes", default="", help="node counts, comma-separated")
    ap.add_argument("--workloads", default="mixed,burst", help="mixed and/or burst")
    ap.add_argument("--arrivals", default="before,during", help="before and/or during")
    ap.add_argument(
        "--admission-delay",
        type=float,
        default=DEFAULT_ADMISSION_DELAY_S,
        help="seconds from a pod seen bound to its kubelet's Allocate",
    )
    ap.add_argument(
        "--trust",
        choices=TRUST_MODES,
        default="signed",
        help="signed (default, the shipped path): the scheduler signs each allocation, the "
        "device plugins read PodResources and verify the signature with its public key, "
        "nodes claim it and binds take no lock; off: no trust check, only a node lock's "
        "owner is served and every bind locks (HAMi's protocol, nodes still running HAMi's "
        "device plugin); all: every allocation trusted, no signature read (no lock)",
    )
    ap.add_argument(
        "--filter-answer",
        choices=("best", "all"),
        default="best",
        help="hami scheduler --filter-answer: best (the default: /filter answers the chosen "
        "node, kube-scheduler calls no /prioritize) or all (every node that fits, then "
        "/prioritize)",
    )
    ap.add_argument(
        "--noop",
        default="auto",
        help="python and/or go, comma-separated, or none: also run kube-scheduler against "
        "that no-op extender in its own process in each run (noop_extender.py on hami "
        "scheduler's transport, noop_extender.go on Go's): the floor an extender pays; "
        "prints ours / no-op and no-op / alone (default auto: both, go only where a Go "
        "toolchain is on PATH)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        help="record py-spy profiles of `hami scheduler` (one per cell and run, while it "
        "schedules the pods with the extender) into this folder, as collapsed stacks (one "
        "line per stack and its sample count: flamegraph.pl or speedscope read them)",
    )
    ap.add_argument(
        "--kube-api-qps",
        type=float,
        help="kube-scheduler's client rate limit (clientConnection.qps, burst twice it) in "
        "every phase; default: its own, 50 requests/s (burst 100), which paces kube-scheduler "
        "alone, whose every Binding goes through it, and not an extender that binds",
    )
    args = ap.parse_args()
    sizes = (
        [int(x) for x in args.sizes.split(",")]
        if args.sizes
        else [100]
        if args.quick
        else [100, 500, 1000]
    )
    workloads = [w for w in args.workloads.split(",") if w]
    arrivals = [a for a in args.arrivals.split(",") if a]
    if set(workloads) - {"mixed", "burst"} or set(arrivals) - {"before", "during"}:
        ap.error("--workloads takes mixed,burst; --arrivals takes before,during")
    pods_n = args.pods or (100 if args.quick else 300)
    if args.noop == "auto":
        args.noop = "python,go" if shutil.which("go") else "python"
    noops = [n for n in args.noop.split(",") if n and n != "none"]
    if set(noops) - {"python", "go"}:
        ap.error("--noop takes python and/or go")
    cells: dict[tuple[int, str, str], Cell] = {}
    with running_stack(
        trust=args.trust,
        admission_delay_s=args.admission_delay,
        namespaces=[ALONE_NS, NOOP_NS],
        scheduler_args=("--filter-answer", args.filter_answer),
    ) as stack:
        noop_urls = {language: start_noop(stack.cp, language) for language in noops}
        pids = {"hami-scheduler": stack.hami.pid, "bench (stand-in kubelets)": os.getpid()}
        have = 0
        for size in sizes:
            add_nodes(stack.cp, have, size, claims=claims_podresources(args.trust))
            have = size
            for run in range(args.runs):
                for workload in workloads:
                    for arrival in arrivals:
                        cell = cells.setdefault((size, workload, arrival), Cell())
                        run_cell(
                            stack.cp,
                            stack.core,
                            stack.standin,
                            stack.hami.pid,
                            stack.url,
                            size=size,
                            workload=workload,
                            arrival=arrival,
                            pods_n=pods_n,
                            seed=size * 100 + run,
                            cell=cell,
                            profile=(
                                args.profile / f"hami-{size}-{workload}-{arrival}-{run}.txt"
                                if args.profile
                                else None
                            ),
                            noop_urls=noop_urls,
                            pids=pids,
                            kube_qps=args.kube_api_qps,
                        )
    print(
        "real kube-apiserver + kube-scheduler 1.20; fake nodes x 8 GPUs; stand-in kubelets call "
        f"the real Allocator {args.admission_delay * 1000:.0f} ms after a pod is bound "
        f"(--trust {args.trust}, --filter-answer {args.filter_answer}); kube-scheduler's "
        f"client {'at its default rate limit, 50/s' if args.kube_api_qps is None else f'at {args.kube_api_qps:g} requests/s'}; "
        f"{pods_n} pods per run; median (min-max) of {args.runs} runs"
    )
    print(
        f"{'nodes':>6} {'workload':>8} {'arrival':>7} {'alone pods/s':>18} {'ours pods/s':>18} "
        f"{'ratio':>17} {'writes/pod':>17} {'lock wait ms':>17} {'bind ms':>15} {'refused':>7}"
    )
    for (size, workload, arrival), c in cells.items():
        print(
            f"{size:>6} {workload:>8} {arrival:>7} {median_spread(c.alone, '{:.1f}'):>18} "
            f"{median_spread(c.ours, '{:.1f}'):>18} {median_spread(c.ratio):>17} "
            f"{median_spread(c.writes):>17} {median_spread(c.lock_wait_ms, '{:.0f}'):>17} "
            f"{median_spread(c.bind_ms, '{:.0f}'):>15} {c.refused:>7}"
        )
    for (size, workload, arrival), c in cells.items():
        per = {
            f"{v} {r}": round(n / (pods_n * args.runs), 2)
            for (v, r), n in sorted(c.breakdown.items())
        }
        print(f"  writes beyond the Binding, {size} nodes {workload} {arrival}: {per or 'none'}")
    for (size, workload, arrival), c in cells.items():
        for language, rates in c.noop.items():
            print(
                f"  no-op extender ({language}), {size} nodes {workload} {arrival}: "
                f"{median_spread(rates, '{:.1f}')} pods/s; ours / no-op "
                f"{median_spread(c.ours_per_noop[language])}; no-op / alone "
                f"{median_spread(c.noop_per_alone[language])}"
            )
    worst = min(statistics.median(c.ratio) for c in cells.values())
    print(
        f"headline: worst median pods/s ratio (with extender / alone) = {worst:.2f} (target >= 0.9)"
    )


if __name__ == "__main__":
    main()
