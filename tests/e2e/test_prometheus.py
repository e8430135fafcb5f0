"""A real Prometheus (Debian's 2.42) scraping a running test cluster: ``hami scheduler``
behind kube-scheduler on the real kube-apiserver, and ``hami monitor`` for the node the
pod is bound to. The pod's container is played on this host by a shim probe with the
container's environment (the region in ``<containers>/<pod UID>_main/``, the limit the
scheduler allocated, the stand-in driver), which allocates 3000 MiB.

Every PromQL expression of the chart's dashboards, of its alert rules and of HAMi's own
dashboard is queried through Prometheus's HTTP API and must return series; the ones
with a known answer must return exactly it (3000 MiB used of a 3100 MiB limit, ...).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hami_core.protocol import encode_inventory
from hami_core.protocol.handshake import HandshakeState, encode_handshake
from tests.builders import gpu
from tests.e2e.controlplane import LOOPBACK, ControlPlane, free_port
from tests.e2e.hami_servers import HAMI, scheduler_argv
from tests.e2e.hami_stack import MANAGED
from tests.e2e.kubenode import BUSYBOX_IMAGE
from tests.monitor.support import Container
from tests.prometheus import (
    RULES,
    PrometheusServer,
    PrometheusUnavailable,
    dashboard_queries,
    hami_queries,
    prometheus_bin,
    rule_queries,
    substitute,
)
from tests.shim.conftest import build  # noqa: F401  (fixture: libvgpu.so + stand-in driver)
from tests.shim.support import GPU0, GPU1, stop

pytestmark = pytest.mark.e2e

MiB = 1 << 20
GPU_MIB = 4000
STUB_TYPE = "NVIDIA-Stub GPU"  # the stand-in NVML's name, as the inventory writes it


class Cluster:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.core = client.CoreV1Api(cp.api_client())
        sfx = uuid.uuid4().hex[:6]
        self.sfx = sfx
        self.node = f"prom-node-{sfx}"
        self.sick = f"prom-sick-{sfx}"
        self.stale = f"prom-stale-{sfx}"
        self.namespace = f"prom-{sfx}"
        self.node_regex = f"prom-(node|sick|stale)-{sfx}"
        self.extender = ""
        self.scheduler_metrics = ""
        self.monitor_metrics = ""
        self.pod: dict[str, Any] = {}


def _wait_http(cp: ControlPlane, url: str, what: str) -> None:
    def ok() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    cp.wait_for(ok, timeout=90, message=f"{what} at {url}")


@pytest.fixture(scope="module")
def prometheus_dir() -> Path:
    try:
        return prometheus_bin()
    except PrometheusUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, build, tmp_path_factory) -> Iterator[Cluster]:  # noqa: F811
    cp = control_plane
    c = Cluster(cp)
    work = tmp_path_factory.mktemp("prometheus-e2e")
    sched_port, sched_metrics, mon_port = free_port(), free_port(), free_port()
    cp.start_process(
        "prom-hami-scheduler",
        scheduler_argv(
            cp, sched_port, sched_metrics, "--no-leader-elect", "--handshake-period", "3600"
        ),
        env={"PYTHONUNBUFFERED": "1"},
    )
    c.extender = f"http://{LOOPBACK}:{sched_port}"
    c.scheduler_metrics = f"{LOOPBACK}:{sched_metrics}"
    c.monitor_metrics = f"{LOOPBACK}:{mon_port}"
    probes: list[Any] = []
    try:
        _wait_http(cp, f"{c.extender}/readyz", "hami scheduler")
        cp.start_scheduler(extender_url=c.extender, managed_resources=MANAGED)
        stubs = [
            gpu(GPU0, index=0, memory_mib=GPU_MIB, model=STUB_TYPE),
            gpu(GPU1, index=1, memory_mib=GPU_MIB, model=STUB_TYPE),
        ]
        cp.add_fake_node(
            c.node,
            annotations={"hami.io/node-nvidia-register": encode_inventory(stubs)},
            capacity={"nvidia.com/gpu": "20"},
        )
        cp.add_fake_node(
            c.sick,
            annotations={
                "hami.io/node-nvidia-register": encode_inventory(
                    [gpu(f"GPU-sick-{c.sfx}", memory_mib=8000, model=STUB_TYPE, healthy=False)]
                )
            },
            capacity={"nvidia.com/gpu": "10"},
        )
        asked = encode_handshake(
            HandshakeState.REQUESTING, dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)
        )
        cp.add_fake_node(
            c.stale,
            annotations={
                "hami.io/node-nvidia-register": encode_inventory(
                    [gpu(f"GPU-stale-{c.sfx}", model=STUB_TYPE)]
                ),
                "hami.io/node-handshake": asked,
            },
            capacity={"nvidia.com/gpu": "0"},
        )
        c.core.create_namespace({"metadata": {"name": c.namespace}})
        c.core.create_namespaced_resource_quota(
            c.namespace,
            {
                "metadata": {"name": "gpu-quota"},
                "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}},
            },
        )
        root = work / "containers"
        root.mkdir()
        state = work / "gpu.state"
        stub_env = {
            "LD_LIBRARY_PATH": str(build.stubs),
            "STUB_GPUS": f"{GPU0},{GPU1}",
            "STUB_GPU_MEM": f"{GPU_MIB}m",
            "STUB_STATE_FILE": str(state),
            "STUB_NVML_UTIL": "37",
            "STUB_NVML_MEM_UTIL": "12",
        }
        cp.start_process(
            "prom-hami-monitor",
            [
                HAMI,
                "monitor",
                "--node-name",
                c.node,
                "--kubeconfig",
                str(cp.kubeconfig_path),
                "--bind-address",
                LOOPBACK,
                "--port",
                str(mon_port),
                "--containers-dir",
                str(root),
            ],
            env={"PYTHONUNBUFFERED": "1", **stub_env},
        )
        _wait_http(cp, f"http://{c.monitor_metrics}/metrics", "hami monitor")
        c.root = root  # type: ignore[attr-defined]
        c.state = state  # type: ignore[attr-defined]
        c.stub_env = stub_env  # type: ignore[attr-defined]
        c.build = build  # type: ignore[attr-defined]
        c.probes = probes  # type: ignore[attr-defined]
        c.work = work  # type: ignore[attr-defined]
        yield c
    finally:
        for p in probes:
            stop(p)
        for name in ("prom-hami-monitor", "prom-hami-scheduler"):
            cp.stop_process(name)
        cp.stop_scheduler()
        with contextlib.suppress(ApiException):
            cp.delete_pods([c.namespace])  # no namespace controller runs to delete them
            c.core.delete_namespace(c.namespace)
        for n in (c.node, c.sick, c.stale):
            with contextlib.suppress(ApiException):
                cp.delete_node(n)


@pytest.fixture(scope="module")
def prom(cluster: Cluster, prometheus_dir: Path) -> Iterator[PrometheusServer]:
    server = PrometheusServer(
        prometheus_dir,
        cluster.work / "prometheus",  # type: ignore[attr-defined]
        {"hami-scheduler": [cluster.scheduler_metrics], "hami-monitor": [cluster.monitor_metrics]},
        rule_files=[RULES],
    ).start()
    try:
        yield server
    finally:
        server.stop()


def _until(
    cp: ControlPlane, prom: PrometheusServer, expr: str, ok, what: str, timeout: float = 60
) -> list:
    def check():
        result = prom.query(expr)
        return result if ok(result) else None

    try:
        return cp.wait_for(check, timeout=timeout, interval=0.5, message=what)
    except Exception as exc:
        raise AssertionError(f"{what}: {exc}\n{prom.logs(2000)}\n{cp.format_logs(3000)}") from None


def _values(result: list) -> list[float]:
    return [float(r["value"][1]) for r in result]


@pytest.fixture(scope="module")
def scenario(cluster: Cluster, prom: PrometheusServer) -> Cluster:
    """Prometheus scrapes both targets first; then the pod is scheduled, its container
    allocates 3000 MiB, a bind fails: every rate has samples before and after."""
    cp, c = cluster.cp, cluster
    _until(
        cp,
        prom,
        'up{job=~"hami-scheduler|hami-monitor"} == 1',
        lambda r: len(r) == 2,
        "both targets up",
    )
    time.sleep(2)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "annotations": {"nvidia.com/use-gpuuuid": GPU0}},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,  # imported by a real node, never pulled
                    "imagePullPolicy": "Never",
                    "resources": {
                        "limits": {
                            "nvidia.com/gpu": "1",
                            "nvidia.com/gpumem": "3100",
                            "nvidia.com/gpucores": "30",
                        }
                    },
                },
                {"name": "sidecar", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never"},
            ],
        },
    }
    c.core.create_namespaced_pod(c.namespace, body)

    def bound():
        pod = json.loads(
            c.core.read_namespaced_pod("trainer", c.namespace, _preload_content=False).data
        )
        return pod if pod["spec"].get("nodeName") else None

    c.pod = cp.wait_for(bound, timeout=90, message="pod trainer bound")
    assert c.pod["spec"]["nodeName"] == c.node
    assert (
        c.pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
        == f"{GPU0},NVIDIA,3100,30:;;"
    )
    uid = c.pod["metadata"]["uid"]
    ctr = Container(c.build, c.root, uid, "main", c.work)  # type: ignore[attr-defined]
    ctr.shim.base.update(c.stub_env)  # type: ignore[attr-defined]
    ctr.shim.base["LD_LIBRARY_PATH"] = f"{c.build.stubs}:{c.build.programs}"  # type: ignore[attr-defined]
    c.probes.append(
        ctr.hold("init", "ctx", "0", "alloc", "3000m", CUDA_DEVICE_MEMORY_LIMIT_0="3100m")
    )  # type: ignore[attr-defined]
    sidecar = c.root / f"{uid}_sidecar"  # type: ignore[attr-defined]
    sidecar.mkdir()
    (sidecar / "vgpu.cache").write_bytes(b"x" * 593920)  # a tenant's garbage: skipped, counted
    req = urllib.request.Request(
        f"{c.extender}/bind",
        data=json.dumps(
            {"PodName": "ghost", "PodNamespace": c.namespace, "PodUID": "0", "Node": c.node}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.loads(r.read())["Error"], "binding a pod that does not exist fails"
    ns = c.namespace
    _until(
        cp,
        prom,
        f'hami_vgpu_memory_used_bytes{{namespace="{ns}"}}',
        lambda r: _values(r) == [3000 * MiB],
        "3000 MiB used in Prometheus",
    )
    _until(
        cp,
        prom,
        "sum(increase(hami_scheduler_bind_failure_total[1m]))",
        lambda r: r and _values(r)[0] > 0,
        "the failed bind in Prometheus",
    )
    _until(
        cp,
        prom,
        f'hami_host_gpu_memory_used_bytes{{device_uuid="{GPU0}"}}',
        lambda r: _values(r) == [3000 * MiB],
        "NVML's 3000 MiB in Prometheus",
    )
    time.sleep(3)  # a few more scrapes after the last event, for the rates
    return c


def _expected(c: Cluster) -> dict[str, Any]:
    """Known answers, by expression with variables substituted: a float for a single
    series, a dict of (label -> value) -> float for several."""
    n = f'{{node=~"{c.node_regex}"}}'
    ns = f'{{namespace=~"{c.namespace}"}}'
    total = (2 * GPU_MIB + 8000) * MiB
    return {
        f"count(hami_gpu_memory_limit_bytes{n})": 3,
        f"sum(hami_gpu_memory_limit_bytes{n})": total,
        f"sum(hami_gpu_memory_allocated_bytes{n})": 3100 * MiB,
        f"100 * sum(hami_gpu_memory_allocated_bytes{n}) / sum(hami_gpu_memory_limit_bytes{n})": 100
        * 3100
        * MiB
        / total,
        f"sum(hami_gpu_shared_count{n})": 1,
        f"hami_host_gpu_memory_used_bytes and on (device_uuid) hami_gpu_memory_limit_bytes{n}": {
            ("device_uuid", GPU0): 3000 * MiB,
            ("device_uuid", GPU1): 0,
        },
        f"hami_host_gpu_utilization_ratio and on (device_uuid) hami_gpu_memory_limit_bytes{n}": {
            ("device_uuid", GPU0): 37,
            ("device_uuid", GPU1): 37,
        },
        f"sum by (node) (hami_gpu_memory_allocated_bytes{n})": {
            ("node", c.node): 3100 * MiB,
            ("node", c.sick): 0,
        },
        f"sum by (node) (hami_gpu_memory_limit_bytes{n})": {
            ("node", c.node): 2 * GPU_MIB * MiB,
            ("node", c.sick): 8000 * MiB,
        },
        f"hami_node_gpu_memory_allocated_ratio{n}": {
            ("device_uuid", GPU0): 3100 / GPU_MIB,
            ("device_uuid", GPU1): 0,
            ("device_uuid", f"GPU-sick-{c.sfx}"): 0,
        },
        f"hami_gpu_shared_count{n}": {
            ("device_uuid", GPU0): 1,
            ("device_uuid", GPU1): 0,
            ("device_uuid", f"GPU-sick-{c.sfx}"): 0,
        },
        f"hami_vgpu_memory_used_bytes{ns}": 3000 * MiB,
        f"hami_vgpu_memory_limit_bytes{ns}": 3100 * MiB,
        f"100 * hami_vgpu_memory_used_bytes{ns} / hami_vgpu_memory_limit_bytes{ns}": 100
        * 3000
        / 3100,
        f"topk(10, hami_vgpu_memory_used_bytes{ns})": 3000 * MiB,
        # our dashboards
        f"sum(hami_host_gpu_memory_used_bytes{n})": 3000 * MiB,
        f"100 * avg(hami_gpu_core_allocated_share{n})": 100 * 30 / 300,
        f"sum by (node) (hami_gpu_memory_limit_bytes{n}) - sum by (node) (hami_gpu_memory_allocated_bytes{n})": {
            ("node", c.node): (2 * GPU_MIB - 3100) * MiB,
            ("node", c.sick): 8000 * MiB,
        },
        f"hami_resource_quota_used{ns}": 3100,
        f"hami_resource_quota_limit{ns}": 20000,
        f"100 * hami_vgpu_memory_used_bytes{ns} / (hami_vgpu_memory_limit_bytes{ns} > 0)": 100
        * 3000
        / 3100,
        f"sum by (namespace, pod) (hami_vgpu_memory_allocated_bytes{ns})": 3100 * MiB,
        f"sum by (namespace, pod) (hami_vgpu_memory_used_bytes{ns})": 3000 * MiB,
        f"100 * hami_vgpu_core_allocated_share{ns}": 30,
        # no AWS Neuron device in this cluster: the NeuronCores stat reads 0, not "no data"
        f'sum(hami_gpu_core_allocated_units{{unit="NeuronCores",{n[1:-1]}}}) or vector(0)': 0,
        f'sum(hami_gpu_core_limit_units{{unit="NeuronCores",{n[1:-1]}}}) or vector(0)': 0,
        f"hami_gpu_healthy{n} == 0": {("device_uuid", f"GPU-sick-{c.sfx}"): 0},
        f"hami_node_unregistered{n}": {("node", c.stale): 1},
        # alert rules (no variables)
        "hami_vgpu_memory_used_bytes / (hami_vgpu_memory_limit_bytes > 0) > 0.95": 3000 / 3100,
        "(hami_gpu_memory_total_bytes - hami_host_gpu_memory_used_bytes) < 1073741824": {
            ("device_uuid", GPU0): (GPU_MIB - 3000) * MiB
        },
        "hami_node_unregistered == 1": {("node", c.stale): 1},
    }


def _check(
    prom: PrometheusServer, c: Cluster, where: str, expr: str, expected: dict[str, Any]
) -> None:
    result = prom.query(expr)
    assert result, f"{where}: no series for {expr}"
    for r in result:
        v = float(r["value"][1])
        assert not math.isnan(v), f"{where}: NaN for {expr}: {r}"
    want = expected.get(expr)
    if want is None:
        return
    if isinstance(want, dict):
        got: dict[tuple[str, str], float] = {}
        for r in result:
            key = next(
                (
                    (k, r["metric"].get(k))
                    for k, _ in want
                    if r["metric"].get(k) is not None and (k, r["metric"].get(k)) in want
                ),
                None,
            )
            assert key is not None, f"{where}: unexpected series {r['metric']} for {expr}"
            got[key] = float(r["value"][1])
        assert got == pytest.approx(want), f"{where}: {expr}"
    else:
        assert len(result) == 1, f"{where}: {expr} -> {result}"
        assert float(result[0]["value"][1]) == pytest.approx(want), f"{where}: {expr}"


def test_hamis_own_dashboard_works_unchanged_on_our_metrics(
    scenario: Cluster, prom: PrometheusServer
):
    variables = {"node": scenario.node_regex, "namespace": scenario.namespace}
    expected = _expected(scenario)
    queries = hami_queries()
    assert len(queries) == 17
    for where, expr in queries:
        _check(prom, scenario, where, substitute(expr, variables), expected)


def test_every_expression_of_our_dashboards_returns_data(scenario: Cluster, prom: PrometheusServer):
    variables = {"node": scenario.node_regex, "namespace": scenario.namespace}
    expected = _expected(scenario)
    for where, expr in dashboard_queries():
        _check(prom, scenario, where, substitute(expr, variables), expected)


def test_every_alert_expression_returns_its_case(scenario: Cluster, prom: PrometheusServer):
    expected = _expected(scenario)
    checked = 0
    for alert, expr in rule_queries():
        result = prom.query(expr)
        assert result, f"{alert}: no series for {expr}"
        if alert == "HamiBindFailureRateHigh":
            assert _values(result) == pytest.approx([0.5]), "one bind of two failed"
        elif alert == "HamiGPUUnhealthy":
            assert [r["metric"]["device_uuid"] for r in result] == [f"GPU-sick-{scenario.sfx}"]
        elif alert == "HamiNodeHandshakeUnanswered":
            assert [r["metric"]["node"] for r in result] == [scenario.stale]
            assert _values(result)[0] >= 600
        else:
            _check(prom, scenario, alert, expr, expected)
        checked += 1
    assert checked == 6
    # Prometheus evaluates the rules file itself: the alerts are pending (their `for`).
    rules = prom.api("rules")
    health = {r["name"]: r["health"] for g in rules["groups"] for r in g["rules"]}
    assert set(health.values()) == {"ok"}, health
    pending = _until(
        scenario.cp,
        prom,
        'ALERTS{alertstate="pending"}',
        lambda r: (
            {"HamiContainerGPUMemoryNearLimit", "HamiGPUMemoryLow", "HamiGPUUnhealthy"}
            <= {x["metric"]["alertname"] for x in r}
        ),
        "alerts pending",
    )
    assert pending


def test_hami_top_against_the_real_api_server_and_prometheus(
    scenario: Cluster, prom: PrometheusServer
):
    """``hami top`` lists nodes and pods from the real API server and the monitor's
    figures from this Prometheus: allocated 3100 MiB, used 3000 MiB, the pod, health."""
    import subprocess

    cp = scenario.cp
    base = [HAMI, "top", "--kubeconfig", str(cp.kubeconfig_path), "--prometheus", prom.url]
    proc = subprocess.run(
        [*base, "-o", "json", scenario.node, scenario.sick, scenario.stale],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    rows = {d["uuid"]: d for d in data["devices"]}
    g0 = rows[GPU0]
    assert g0["node"] == scenario.node and g0["model"] == STUB_TYPE
    assert (g0["memory_allocated_mib"], g0["memory_total_mib"]) == (3100, GPU_MIB)
    assert g0["memory_used_mib"] == 3000 and g0["utilization_pct"] == 37
    assert g0["cores_allocated_pct"] == 30 and g0["sharers"] == 1
    assert g0["pods"] == [f"{scenario.namespace}/trainer"]
    assert rows[GPU1]["memory_used_mib"] == 0 and rows[GPU1]["pods"] == []
    sick = rows[f"GPU-sick-{scenario.sfx}"]
    assert not sick["healthy"] and sick["memory_free_mib"] == 0
    nodes = {n["node"]: n for n in data["nodes"]}
    assert "NVIDIA" in nodes[scenario.stale]["unregistered"]
    assert data["totals"]["memory_free_mib"] == 2 * GPU_MIB - 3100
    table = subprocess.run([*base, scenario.node], capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    assert f"3100/{GPU_MIB} MiB (78%)" in table.stdout and "3000" in table.stdout
    # -o wide's per-pod figures: through Prometheus, and from the monitor's own page
    (held,) = g0["slices"]
    assert held["pod"] == f"{scenario.namespace}/trainer" and held["memory_used_mib"] == 3000
    assert data["usage"] == {"source": "prometheus", "unreachable": []}
    direct = [HAMI, "top", "--kubeconfig", str(cp.kubeconfig_path)]
    direct += ["--monitor", f"http://{scenario.monitor_metrics}/metrics", scenario.node]
    wide = subprocess.run([*direct, "-o", "wide"], capture_output=True, text=True, timeout=60)
    assert wide.returncode == 0, wide.stderr
    (row,) = [line for line in wide.stdout.splitlines() if line.startswith(held["pod"] + " ")]
    assert "3000 of 3100 MiB" in row and " shim " in row, wide.stdout
