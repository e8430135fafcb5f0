"""The real ``hami monitor`` process: pods from an API server (the official client over
real HTTP, node-scoped list + watch), host figures from NVML (pynvml loading the
stand-in libnvidia-ml.so.1 of shim/tests/stubs, which sees the memory the shim's
processes hold), container figures from the shim's regions, all on :/metrics."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hami_core.cluster import MemoryCluster
from tests.deviceplugin.fake_apiserver import FakeApiServer
from tests.e2e.controlplane import free_port
from tests.servers.slowclients import crowd, is_open
from tests.shim.support import stop

from .support import GPU0, GPU1, NODE, Container, pod, scrape, value

MiB = 1 << 20
HAMI = str(Path(sys.executable).parent / "hami")
UID = "0a0a0a0a-0000-4000-8000-00000000000a"


@pytest.fixture
def api():
    cluster = MemoryCluster()
    cluster.add_pod(pod(UID, "trainer", "main"))
    server = FakeApiServer(cluster).start()
    yield server
    server.stop()


def test_hami_monitor_serves_host_and_container_metrics(build, api, tmp_path):
    root = tmp_path / "containers"
    state = tmp_path / "gpu.state"
    ctr = Container(build, root, UID, "main", tmp_path)
    ctr.shim.base["STUB_STATE_FILE"] = str(state)
    holder = ctr.hold("init", "ctx", "0", "alloc", "3000m", CUDA_DEVICE_MEMORY_LIMIT_0="4096m")
    port = free_port()
    env = {
        **ctr.shim.env(LD_PRELOAD=None, STUB_NVML_UTIL="37", STUB_NVML_MEM_UTIL="12"),
        "LD_LIBRARY_PATH": str(build.stubs),
        "HAMI_DISABLED_BACKENDS": "",
    }
    log = tmp_path / "monitor.log"
    proc = subprocess.Popen(
        [
            HAMI,
            "monitor",
            "--node-name",
            NODE,
            "--port",
            str(port),
            "--bind-address",
            "127.0.0.1",
            "--kubeconfig",
            str(api.write_kubeconfig(tmp_path / "kubeconfig")),
            "--containers-dir",
            str(root),
        ],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        m: dict = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                m = scrape(url)
                if m.get("hami_vgpu_memory_used_bytes"):
                    break
            except OSError:
                pass
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        host = {
            "node": NODE,
            "device_index": "0",
            "device_uuid": GPU0,
            "device_type": "NVIDIA-Stub GPU",
        }
        assert value(m, "hami_host_gpu_memory_used_bytes", **host) == 3000 * MiB, log.read_text()
        assert value(m, "hami_host_gpu_memory_used_bytes", device_uuid=GPU1) == 0
        assert value(m, "hami_host_gpu_utilization_ratio", **host) == 37
        assert value(m, "hami_gpu_memory_total_bytes", **host) == 80 * 1024 * MiB
        mc = {k: v for k, v in host.items() if k != "node"}
        assert value(m, "hami_host_gpu_memory_controller_utilization_ratio", **mc) == 12
        labels = {
            "namespace": "team-a",
            "pod": "trainer",
            "container": "main",
            "vdevice_index": "0",
            "device_uuid": GPU0,
        }
        assert value(m, "hami_vgpu_memory_used_bytes", **labels) == 3000 * MiB
        assert value(m, "hami_vgpu_memory_limit_bytes", **labels) == 4096 * MiB
        assert ("GET", "/api/v1/pods") in api.requests
        # a tenant's slowloris and unread requests on the real port: Prometheus' scrape
        # is still whole and prompt while they are held (hami_core.servers.metrics_http)
        with crowd(port, idle=40, slow_readers=8, per_address=8) as socks:
            start = time.monotonic()
            again = scrape(url)
            took = time.monotonic() - start
            assert all(is_open(s) for s in socks[:40])
        assert value(again, "hami_vgpu_memory_used_bytes", **labels) == 3000 * MiB
        assert took < 6, f"a scrape behind idle clients took {took:.1f}s"
    finally:
        stop(holder)
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0, log.read_text()


def test_hami_monitor_needs_a_node_name(tmp_path):
    proc = subprocess.run(
        [HAMI, "monitor"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert proc.returncode == 2
    assert "--node-name" in proc.stderr
