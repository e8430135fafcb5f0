"""``hami top`` on the bundled example snapshot and on hand-made clusters: exact rows,
sorting and filters like ``kubectl top``, used figures from a Prometheus API, bad input."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.top import DeviceUse, build_view, render_table
from tests.builders import cluster, gpu, manager, node

A100_0 = "GPU-4f1e9c02-5b1a-8d7e-2c44-0a9b3e6f1d21"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["top", *args])
    return result.exit_code, result.output


def test_the_bundled_example_as_json():
    code, out = run("--example", "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["totals"] == {
        "devices": 10,
        "unhealthy": 0,
        "memory_total_mib": 4 * 81920 * 2 + 2 * 15360,
        "memory_allocated_mib": 28000,
        "memory_free_mib": 4 * 81920 * 2 + 2 * 15360 - 28000,
        "cores_total_pct": 1000,
        "cores_allocated_pct": 80,
        "cores_by_unit": {"percent": {"allocated": 80, "total": 1000}},
    }
    first = data["devices"][0]
    assert first["node"] == "gpu-a100-01" and first["uuid"] == A100_0
    assert first["memory_allocated_mib"] == 20000 and first["cores_allocated_pct"] == 30
    assert first["pods"] == ["ml-team/stable-diffusion-6c8d9f7b5-x2k4p"]
    assert first["sharers"] == 1 and first["split_count"] == 10
    assert first["memory_used_mib"] is None
    # the Succeeded job's allocation and the pod without GPUs hold nothing
    held = {p for d in data["devices"] for p in d["pods"]}
    assert held == {"ml-team/stable-diffusion-6c8d9f7b5-x2k4p", "ml-team/embedding-server-0"}
    assert [n["node"] for n in data["nodes"]] == ["gpu-a100-01", "gpu-a100-02", "gpu-t4-01"]
    assert data["nodes"][2]["memory_free_mib"] == 2 * 15360 - 8000


def test_the_bundled_example_as_a_table():
    code, out = run("--example")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].split() == [
        "NODE",
        "GPU",
        "TYPE",
        "MODE",
        "HEALTH",
        "MEMORY",
        "ALLOC/TOTAL",
        "USED",
        "CORES",
        "UTIL",
        "SHARERS",
        "PODS",
    ]
    assert (
        "20000/81920 MiB (24%)" in lines[1]
        and "ml-team/stable-diffusion-6c8d9f7b5-x2k4p" in lines[1]
    )
    assert lines[-1] == (
        "10 devices (0 unhealthy): 658080 MiB free of 686080 MiB, 28000 MiB allocated (4%), "
        "compute 80/1000% allocated"
    )


def test_sorting_and_filters_like_kubectl_top():
    code, out = run("--example", "-o", "json", "--sort-by", "memory")
    assert code == 0, out
    assert [d["memory_allocated_mib"] for d in json.loads(out)["devices"]][:3] == [20000, 8000, 0]
    code, out = run("--example", "-o", "json", "--sort-by", "free", "gpu-t4-01")
    assert code == 0, out
    devices = json.loads(out)["devices"]
    assert [(d["node"], d["index"]) for d in devices] == [("gpu-t4-01", 1), ("gpu-t4-01", 0)]
    code, out = run("--example", "-o", "json", "-l", "kubernetes.io/hostname=gpu-a100-02")
    assert code == 0, out
    assert {d["node"] for d in json.loads(out)["devices"]} == {"gpu-a100-02"}
    code, out = run("--example", "-o", "json", "--vendor", "Ascend910B3")
    assert code == 0, out
    assert json.loads(out)["devices"] == []


def test_unhealthy_cordoned_and_unusable_nodes_are_shown_and_not_free():
    c = cluster(
        node(
            "n1",
            [gpu("GPU-1"), gpu("GPU-2", index=1, healthy=False), gpu("GPU-3", index=2)],
            annotations={"hami.io/device-cordon": "GPU-3"},
        ),
        node("bad", [], annotations={"hami.io/node-nvidia-register": "[not json"}),
    )
    view = build_view(c, manager())
    rows = {d.uuid: d for d in view.devices}
    assert rows["GPU-1"].memory_free_mib == 16384
    assert rows["GPU-2"].memory_free_mib == 0 and not rows["GPU-2"].healthy
    assert rows["GPU-3"].memory_free_mib == 0 and rows["GPU-3"].cordoned
    assert view.totals()["memory_free_mib"] == 16384
    bad = next(n for n in view.nodes if n.node == "bad")
    assert "NVIDIA" in bad.unregistered
    text = render_table(view)
    assert "UNHEALTHY" in text and "ok,cordoned" in text and "hami.io/node-nvidia-register" in text


class FakePrometheus:
    """Answers /api/v1/query like Prometheus, for the two queries hami top sends."""

    def __init__(self, series: dict[str, dict[str, float]]) -> None:
        self.queries: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                expr = parse_qs(urlsplit(self.path).query)["query"][0]
                outer.queries.append(expr)
                metric = next((m for m in series if m in expr), None)  # else: no series
                body = {
                    "status": "success",
                    "data": {
                        "resultType": "vector",
                        "result": [
                            {"metric": {"device_uuid": u}, "value": [0, str(v)]}
                            for u, v in (series[metric] if metric else {}).items()
                        ],
                    },
                }
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"


def test_used_memory_and_utilization_come_from_prometheus():
    prom = FakePrometheus(
        {
            "hami_host_gpu_memory_used_bytes": {A100_0: 3000 * 2**20},
            "hami_host_gpu_utilization_ratio": {A100_0: 37.0},
        }
    )
    try:
        code, out = run("--example", "-o", "json", "--prometheus", prom.url, "--sort-by", "used")
    finally:
        prom.http.shutdown()
    assert code == 0, out
    first = json.loads(out)["devices"][0]
    assert first["uuid"] == A100_0
    assert first["memory_used_mib"] == 3000 and first["utilization_pct"] == 37
    assert sum("hami_host_gpu" in q for q in prom.queries) == 2
    # -o wide's per-pod figures are asked too, summed over containers
    assert any("sum by (namespace, pod, device_uuid)" in q for q in prom.queries)


def test_bad_input_is_named():
    code, out = run("--snapshot", "/nonexistent.yaml")
    assert code == 1 and "/nonexistent.yaml: no such file" in out
    code, out = run("--example", "-l", "novalue")
    assert code == 2 and "'novalue' is not key=value" in out
    # an unreachable Prometheus is n/a with the reason, not the end of the view (a
    # --watch outlives a Prometheus restart)
    code, out = run("--example", "--prometheus", "http://127.0.0.1:1")
    assert code == 0 and "usage: n/a from Prometheus at http://127.0.0.1:1: " in out
    # a mistyped node is named, as kubectl top node <name> does (was an empty table)
    code, out = run("--example", "gpu-t4-01", "gpu-t4-1")
    assert code == 1
    assert out == "Error: no node named 'gpu-t4-1' (nodes: gpu-a100-01, gpu-a100-02, gpu-t4-01)\n"


def test_device_use_is_optional_per_device():
    view = build_view(
        cluster(node("n", [gpu("GPU-1")])),
        manager(),
        usage={"GPU-9": DeviceUse(memory_used_mib=1, utilization_pct=1)},
    )
    assert view.devices[0].memory_used_mib is None
    with pytest.raises(ValueError, match="--sort-by"):
        build_view(cluster(), manager(), sort_by="bogus")


def test_an_unreachable_api_server_is_named(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    code, out = run("--kubeconfig", str(kubeconfig))
    assert code == 1 and "list nodes: the API server is unreachable" in out
