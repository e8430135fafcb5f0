"""MPS mode from the node config to the container (PROTOCOL.md §2, §7): a node's
``operatingmode: mps`` becomes every device's inventory ``mode``, the real scheduler
places only pods that accept MPS there, and Allocate hands out MPS's variables and pipe
directory instead of the shim. Fake NVML under hami-nvidia; no GPU."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hami_nvidia.node import NvidiaNode
from hami_nvidia.nvml import NvmlGpu

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import Allocator, NodeAgent
from hami_core.errors import ConfigError
from hami_core.protocol.inventory import decode_inventory
from hami_core.protocol.nodeconfig import parse_node_overrides
from hami_core.scheduling.scheduler import Scheduler

from .conftest import ctr, gpu_pod, gpu_uuid, nvidia_manager
from .pyfake import PyFakeNvml, installed

NODE = "node-a"
T0 = dt.datetime(2026, 11, 29, 9, 0, 0, tzinfo=dt.UTC)


@pytest.fixture
def fake() -> Iterator[PyFakeNvml]:
    nvml = PyFakeNvml(
        [
            NvmlGpu(index=i, uuid=gpu_uuid(i), name="Tesla T4", memory_mib=15360, bus_id="")
            for i in range(2)
        ]
    )
    with installed(NvidiaNode(nvml, sysfs_root="/nonexistent", clock=lambda: 0.0)):
        yield nvml


def mps_agent(cluster: MemoryCluster, tmp_path: Path, mode: str = "mps") -> NodeAgent:
    overrides = parse_node_overrides(
        {"nodeconfig": [{"name": NODE, "operatingmode": mode, "devicesplitcount": 4}]}, node=NODE
    )
    return NodeAgent(
        cluster,
        nvidia_manager(tmp_path / "vgpu"),
        backend="nvidia",
        vendor="NVIDIA",
        node=NODE,
        overrides=overrides,
        clock=lambda: T0,
    )


def published(cluster: MemoryCluster, tmp_path: Path, mode: str) -> tuple[NodeAgent, Any]:
    cluster.add_node({"metadata": {"name": NODE}})
    agent = mps_agent(cluster, tmp_path, mode)
    devices = agent.discover()
    agent.publish(devices)
    return agent, devices


def test_the_node_mode_is_published_as_every_devices_inventory_mode(fake, tmp_path):
    cluster = MemoryCluster()
    published(cluster, tmp_path, "mps")
    ann = cluster.get_node(NODE)["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    assert [
        (d.uuid, d.mode, d.split_count) for d in decode_inventory(ann, node=NODE, vendor="NVIDIA")
    ] == [
        (gpu_uuid(0), "mps", 4),
        (gpu_uuid(1), "mps", 4),
    ]


@pytest.mark.parametrize("mode, message", [("time-slicing", "'time-slicing'"), ("MPS", "'MPS'")])
def test_an_unknown_mode_stops_the_start_naming_the_key(mode, message):
    with pytest.raises(ConfigError, match=rf"nodeconfig\[{NODE}\]\.operatingmode: {message}"):
        parse_node_overrides({"nodeconfig": [{"name": NODE, "operatingmode": mode}]}, node=NODE)


def bind(cluster: MemoryCluster, agent: NodeAgent, pod: dict[str, Any]) -> dict[str, Any]:
    created = cluster.add_pod(pod)
    meta = created["metadata"]
    allocation = Scheduler(cluster, agent.manager).bind(
        meta["namespace"], meta["name"], uid=meta["uid"], node=NODE
    )
    assert allocation is not None
    return cluster.get_pod(meta["namespace"], meta["name"])


def test_an_mps_pod_gets_the_mps_share_and_no_shim(fake, tmp_path):
    cluster = MemoryCluster()
    agent, devices = published(cluster, tmp_path, "mps")
    pod = gpu_pod("p", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    pod["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "mps"}
    bind(cluster, agent, pod)
    ids = [f"{gpu_uuid(0)}-{i}" for i in range(4)] + [f"{gpu_uuid(1)}-{i}" for i in range(4)]
    allocator = Allocator(
        cluster,
        agent.manager,
        vendor="NVIDIA",
        node=NODE,
        known_ids=lambda: frozenset(ids),
        node_devices=lambda: devices,
    )

    (answer,) = allocator.allocate([[ids[0]]])

    uuid = answer.envs["NVIDIA_VISIBLE_DEVICES"]
    assert uuid in (gpu_uuid(0), gpu_uuid(1))
    assert {k: v for k, v in answer.envs.items() if k.startswith("CUDA_")} == {
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=3000M",
    }
    assert [(m.container_path, m.host_path) for m in answer.mounts] == [
        ("/tmp/nvidia-mps", "/tmp/nvidia-mps")
    ]
    assert not (tmp_path / "vgpu" / "containers").exists() or not any(
        (tmp_path / "vgpu" / "containers").iterdir()
    )  # no region directory, no limits file
    after = cluster.get_pod("default", "p")["metadata"]["annotations"]
    assert after["hami.io/bind-phase"] == "success"


def test_the_scheduler_keeps_shim_pods_off_mps_gpus_and_mps_pods_off_shim_gpus(fake, tmp_path):
    mps = MemoryCluster()
    agent, _ = published(mps, tmp_path / "a", "mps")
    shim_pod = gpu_pod("shim", ctr("main", gpu=1, gpumem=1000))
    shim_pod["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "hami-core"}
    created = mps.add_pod(shim_pod)
    result = Scheduler(mps, agent.manager).filter(created, [NODE])
    assert result.feasible == () and "CardTypeMismatch" in result.failed[NODE]

    core = MemoryCluster()
    agent, _ = published(core, tmp_path / "b", "hami-core")
    mps_pod = gpu_pod("mps", ctr("main", gpu=1, gpumem=1000))
    mps_pod["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "mps"}
    created = core.add_pod(mps_pod)
    result = Scheduler(core, agent.manager).filter(created, [NODE])
    assert result.feasible == () and "CardTypeMismatch" in result.failed[NODE]
