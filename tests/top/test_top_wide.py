"""``hami top -o wide``: one row per pod on each GPU with its priority (and PriorityClass),
its gang group, its mode (shim, MPS, MIG profile, or the vendor's driver) and what it
uses of its slice (memory used of the limit, compute used of the limit) read from the node
monitors' own /metrics (``--monitor``) or a Prometheus that scrapes them; "n/a", and why,
when they cannot be reached. The monitor here is the real ``NodeMonitor`` behind the real
``hami monitor`` HTTP app, so the exposition parsed is the one the monitor writes."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.model import (
    ContainerUsage,
    HostDevice,
    ProcessDeviceSample,
    ProcessSample,
    RegionDevice,
)
from tests.defrag.world import MIB, gpu_id, gpu_node, running

MiB = 2**20
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


def snapshot(tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    """One node of two 80 GiB GPUs: a high-priority trainer of gang ``train`` on GPU 0
    (40 GiB, 50 %), two low-priority inference pods sharing GPU 1."""
    trainer = running("trainer-0", "node-0", (0,), mem=MIB // 2, cores=50, priority=1000)
    trainer["metadata"]["uid"] = "0a0a0a0a-0000-4000-8000-00000000000a"  # as the API's
    trainer["spec"]["priorityClassName"] = "high"
    trainer["metadata"]["labels"][GROUP_LABEL] = "train"
    infer = [
        running(f"infer-{i}", "node-0", (1,), mem=8000, cores=20, priority=-5) for i in range(2)
    ]
    pods = [trainer, *infer]
    path = tmp_path / "snap.json"
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [gpu_node("node-0"), *pods]})
    )
    return str(path), pods


def top(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["top", *args])
    return result.exit_code, result.output


def pod_table(out: str) -> list[list[str]]:
    """The wide output's pod table: each row's cells (split on 2+ spaces)."""
    import re

    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("POD "))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith("usage: "):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def pod_rows(out: str) -> dict[str, list[str]]:
    """``pod_table`` by pod (each pod here holds one GPU)."""
    return {row[0]: row for row in pod_table(out)}


def test_wide_has_a_row_per_pod_with_priority_class_group_and_mode(tmp_path):
    snap, _ = snapshot(tmp_path)
    code, out = top("--snapshot", snap, "-o", "wide")
    assert code == 0, out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("POD "))
    for column in ("PRIORITY", "GROUP", "MODE", "MEMORY USED/LIMIT", "COMPUTE USED/LIMIT"):
        assert column in header
    rows = pod_rows(out)
    assert set(rows) == {"default/trainer-0", "default/infer-0", "default/infer-1"}
    trainer = rows["default/trainer-0"]
    assert trainer[1:5] == ["node-0", "0", gpu_id("node-0", 0), "1000 (high)"]
    assert trainer[5:7] == ["default/train", "shim"]
    # nothing says what they use: n/a, and the reason under the table
    assert trainer[7:] == [f"n/a of {MIB // 2} MiB", "n/a of 50%"]
    assert rows["default/infer-1"][4:6] == ["-5", "-"]
    assert "usage: n/a (no --monitor or --prometheus given)" in out
    # the default table stays narrow
    assert "PRIORITY" not in top("--snapshot", snap)[1]


def test_json_slices_carry_priority_group_and_usage(tmp_path):
    snap, _ = snapshot(tmp_path)
    code, out = top("--snapshot", snap, "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    (trainer,) = [s for d in data["devices"] for s in d["slices"] if s["pod"].endswith("trainer-0")]
    assert trainer["priority"] == 1000 and trainer["priority_class"] == "high"
    assert trainer["group"] == "default/train"
    assert trainer["memory_used_mib"] is None and trainer["utilization_pct"] is None
    assert data["usage"] == {"source": None, "unreachable": []}


# -- a real monitor ----------------------------------------------------------------------


class Usage:
    """The monitor's backends: each container directory's ``usage.bin`` names an entry of
    ``usage``; the host's driver reports ``host``."""

    def __init__(self) -> None:
        self.usage: dict[str, ContainerUsage] = {}
        self.host: list[HostDevice] = []

    class _Record:
        name = "fake"

    @property
    def backends(self) -> list[Any]:
        return [self._Record()]

    def usage_files(self, backend: str) -> dict[str, tuple[int, ...]]:
        return {"usage.bin": (16,)}

    def parse_usage(self, backend: str, name: str, data: bytes) -> ContainerUsage | None:
        return self.usage.get(data.decode().strip())

    def host_devices(self, backend: str) -> list[Any]:
        return self.host

    def device_types(self) -> tuple[Any, ...]:
        return ()


@pytest.fixture
def monitor(tmp_path: Path) -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    """``hami monitor``'s app over HTTP for the snapshot's node: the trainer's process
    holds 12 GiB of GPU 0; the driver says GPU 0 has 13 GiB in use at 61 %."""
    from hami_core.monitor import NodeMonitor
    from hami_core.servers.monitor import create_monitor_app
    from tests.monitor.support import Served

    snap, pods = snapshot(tmp_path)
    trainer = pods[0]
    root = tmp_path / "containers"
    container = root / f"{trainer['metadata']['uid']}_main"
    container.mkdir(parents=True)
    (container / "usage.bin").write_text("trainer".ljust(16))
    pid, start = os.getpid(), 7
    proc = tmp_path / "proc" / str(pid)
    proc.mkdir(parents=True)
    (proc / "stat").write_text(
        f"{pid} (python) " + " ".join(["S"] + ["0"] * 18 + [str(start)] + ["0"] * 10)
    )
    (proc / "status").write_text(f"Name:\tpython\nNSpid:\t{pid}\n")
    uuid = gpu_id("node-0", 0)
    usage = Usage()
    usage.usage["trainer"] = ContainerUsage(
        devices=(RegionDevice(index=0, uuid=uuid, memory_limit_bytes=MIB // 2 * MiB),),
        processes=(
            ProcessSample(
                pid=pid,
                start_time_ticks=start,
                devices={uuid: ProcessDeviceSample(buffer_bytes=12 * 1024 * MiB)},
            ),
        ),
    )
    usage.host = [
        HostDevice(
            index=0,
            uuid=uuid,
            device_type="NVIDIA-A100",
            memory_used_bytes=13 * 1024 * MiB,
            memory_total_bytes=MIB * MiB,
            utilization_pct=61.0,
        )
    ]
    node_monitor = NodeMonitor(
        usage,  # type: ignore[arg-type]
        root=str(root),
        node_name="node-0",
        pods=lambda: pods,
        proc_root=str(tmp_path / "proc"),
    )
    served = Served(create_monitor_app(node_monitor, scan_max_age_s=0))
    try:
        yield snap, served.url, pods
    finally:
        served.close()


def test_used_of_the_limit_comes_from_the_monitors_own_metrics(monitor):
    snap, url, _ = monitor
    code, out = top("--snapshot", snap, "-o", "wide", "--monitor", url)
    assert code == 0, out
    rows = pod_rows(out)
    assert rows["default/trainer-0"][7] == f"12288 of {MIB // 2} MiB"
    assert rows["default/infer-0"][7] == "n/a of 8000 MiB"  # no region: not measured
    assert "usage: n/a" not in out
    # the device row has the driver's figures
    device = next(line for line in out.splitlines() if gpu_id("node-0", 0) in line)
    assert " 13312 " in device and " 61% " in device
    code, out = top("--snapshot", snap, "-o", "json", "--monitor", url)
    data = json.loads(out)
    (trainer,) = [s for d in data["devices"] for s in d["slices"] if s["pod"].endswith("trainer-0")]
    assert trainer["memory_used_mib"] == 12288
    assert data["usage"] == {"source": "monitor", "unreachable": []}


def test_an_unreachable_monitor_is_n_a_with_the_reason_and_the_rest_is_shown(monitor):
    snap, url, _ = monitor
    dead = "http://127.0.0.1:1/metrics"
    code, out = top("--snapshot", snap, "-o", "wide", "--monitor", dead, "--monitor", url)
    assert code == 0, out
    assert pod_rows(out)["default/trainer-0"][7] == f"12288 of {MIB // 2} MiB"
    assert f"usage: n/a from monitor {dead}: " in out
    code, out = top("--snapshot", snap, "-o", "wide", "--monitor", dead)
    assert code == 0, out
    assert pod_rows(out)["default/trainer-0"][7] == f"n/a of {MIB // 2} MiB"
    code, out = top("--snapshot", snap, "-o", "json", "--monitor", dead)
    (why,) = json.loads(out)["usage"]["unreachable"]
    assert why.startswith(f"monitor {dead}: ")


class Hostile:
    """An endpoint answering ``body`` to every GET."""

    def __init__(self, body: bytes) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/metrics"

    def close(self) -> None:
        self.http.shutdown()


def test_a_hostile_endpoint_cannot_forge_escapes_or_break_the_view(tmp_path):
    """A tenant-run or compromised endpoint: terminal escapes in label values, values no
    memory can have, malformed lines. Good samples count, bad ones are skipped, nothing
    raw reaches the terminal."""
    snap, _ = snapshot(tmp_path)
    uuid = gpu_id("node-0", 1)
    body = (
        "# TYPE hami_vgpu_memory_used_bytes gauge\n"
        f'hami_vgpu_memory_used_bytes{{namespace="default",pod="infer-0",container="main",'
        f'vdevice_index="0",device_uuid="{uuid}"}} {1000 * MiB}\n'
        f'hami_vgpu_memory_used_bytes{{namespace="default",pod="infer-1",container="main",'
        f'vdevice_index="0",device_uuid="{uuid}"}} NaN\n'
        f'hami_vgpu_memory_used_bytes{{namespace="default",pod="infer-1",container="x",'
        f'vdevice_index="0",device_uuid="{uuid}"}} -5\n'
        'hami_vgpu_memory_used_bytes{namespace="\x1b[2J",pod="p\\"q"} 1\n'
        "hami_vgpu_memory_used_bytes{unterminated 1\n"
        "garbage line without value\n" + "x" * 100000 + "\n"
    ).encode()
    server = Hostile(body)
    try:
        code, out = top("--snapshot", snap, "-o", "wide", "--monitor", server.url)
    finally:
        server.close()
    assert code == 0, out
    assert "\x1b" not in out
    rows = pod_rows(out)
    assert rows["default/infer-0"][7] == "1000 of 8000 MiB"
    assert rows["default/infer-1"][7] == "n/a of 8000 MiB"


def test_the_mode_is_who_holds_the_share_for_every_vendor():
    """Every vendor's example after its workloads ran: in ``hami-core`` mode a share is
    held by a preloaded limiter only for NVIDIA (``libvgpu.so``) and for Ascend on a node
    running HAMi's vNPU core; every other vendor's (and Ascend's hardware vNPU templates,
    its default) by its own driver or runtime, never called "shim"."""
    from hami_core.simulate.runner import bundled_examples, run_files
    from hami_core.top import build_view, render_table

    examples = bundled_examples()
    sim = run_files(
        cluster_path=examples / "cluster-all-vendors.yaml",
        workload_paths=[examples / "workloads-all-vendors"],
    )
    view = build_view(sim.pipeline.cluster, sim.manager)
    modes = {d.vendor: d.mode_shown for d in view.devices}
    assert len(modes) > 10
    for vendor, mode in modes.items():
        assert mode == ("shim" if vendor == "NVIDIA" else "vendor"), (vendor, mode)
    wide = render_table(view, wide=True)
    rows = {(row[0], row[3]): row for row in pod_table(wide)}
    held = [(d, s) for d in view.devices for s in d.slices]
    assert len(held) == len(rows) > 10
    for d, s in held:
        assert rows[(s.pod, d.uuid)][6] == d.slice_mode(s) == d.mode_name
    # the Ascend node switched to HAMi's soft slicing (its node annotation, the backend's
    # hamiVnpuCore fact on each chip): its chips' shares are the shim's
    (ascend,) = {d.node for d in view.devices if d.vendor.startswith("Ascend")}
    sim.pipeline.cluster.patch_node_annotations(ascend, {"hami-vnpu-core": "true"})
    view = build_view(sim.pipeline.cluster, sim.manager)
    assert {d.mode_shown for d in view.devices if d.node == ascend} == {"shim"}


def test_monitors_that_never_answer_are_waited_for_at_once_not_in_turn():
    """Six monitors that accept and never answer: the view waits about one timeout, not
    six (a --watch over many nodes stays live), and names each."""
    import socket
    import time

    from hami_core.top import from_monitors

    listeners = []
    for _ in range(6):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        listeners.append(sock)
    urls = [f"http://127.0.0.1:{s.getsockname()[1]}/metrics" for s in listeners]
    try:
        t0 = time.monotonic()
        measured = from_monitors(urls, timeout_s=2)
        took = time.monotonic() - t0
    finally:
        for sock in listeners:
            sock.close()
    assert len(measured.unreachable) == 6 and measured.devices == {} and measured.pods == {}
    for why, url in zip(measured.unreachable, urls, strict=True):
        assert why.startswith(f"monitor {url}: ")
    assert took < 8, took  # in turn: at least 12 s


def test_the_fact_that_says_no_shim_is_the_ascend_backends_own():
    from hami_ascend.inventory import HAMI_CORE_NODE

    from hami_core.top import view

    assert view.WITHOUT_SHIM == ((HAMI_CORE_NODE, "false"),)
