"""The device plugin's metrics (the handbook's names): Allocate durations by outcome
over real gRPC, the devices served and their health as kubelet sees them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from hami_nvidia.nvml import EVENT_XID_CRITICAL, XidEvent
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import ctr, gpu_pod
from .test_grpc import NODE, UUIDS, all_healthy, cluster, kubelet, nvml, plugin  # noqa: F401


def samples(process) -> dict:
    out: dict = {}
    for fam in text_string_to_metric_families(generate_latest(process.metrics.registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def value(m, name, **labels):
    found = [v for lab, v in m.get(name, []) if lab == labels]
    assert len(found) == 1, f"{name}{labels}: {m.get(name)}"
    return found[0]


def test_allocate_outcomes_devices_and_health(kubelet, plugin, nvml, cluster, bound_pod):  # noqa: F811
    kubelet.wait_list(all_healthy(20))
    pod = bound_pod(
        cluster, plugin.agent.manager, gpu_pod("p", ctr("main", gpu=1, gpumem=3000)), NODE
    )
    uuid = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(",")[0]
    kubelet.allocate([f"{uuid}-0"])
    with pytest.raises(grpc.RpcError):
        kubelet.allocate(["GPU-nope-0"])
    m = samples(plugin)
    assert value(m, "hami_device_plugin_allocate_duration_seconds_count", outcome="success") == 1
    assert value(m, "hami_device_plugin_allocate_duration_seconds_count", outcome="error") == 1
    assert value(m, "hami_device_plugin_allocate_duration_seconds_count", outcome="timeout") == 0
    assert value(m, "hami_device_plugin_device_count", node=NODE, vendor="NVIDIA") == 2
    for i, u in enumerate(UUIDS):
        labels = {
            "node": NODE,
            "device_uuid": u,
            "device_index": str(i),
            "device_type": "NVIDIA A100-PCIE-16GB",
        }
        assert value(m, "hami_device_plugin_healthy_status", **labels) == 1

    nvml.dead.add(UUIDS[1])
    nvml.push(XidEvent(uuid=UUIDS[1], event_type=EVENT_XID_CRITICAL, xid=79))
    kubelet.wait_list(lambda s: sum(x.health == "Unhealthy" for x in s) == 10, what="unhealthy")
    m = samples(plugin)
    health = {lab["device_uuid"]: v for lab, v in m["hami_device_plugin_healthy_status"]}
    assert health == {UUIDS[0]: 1, UUIDS[1]: 0}


def test_the_metrics_port_is_an_option_of_hami_device_plugin():
    hami = str(Path(sys.executable).parent / "hami")
    out = subprocess.run([hami, "device-plugin", "--help"], capture_output=True, text=True).stdout
    assert "--metrics-port" in out and "Serve the device plugin's metrics" in out.replace("\n", " ")
