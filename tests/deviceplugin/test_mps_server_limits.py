"""MPS shares held server-side (issue 24 item 15): with ``mpsIsolation: per-container``
Allocate starts a control daemon for the container and sets its server's default thread
percentage and pinned memory limits before the container starts, so a tenant that drops
or raises ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` / ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
still gets its share. The daemon is the stand-in ``nvidia-cuda-mps-control``
(``mps_standin/``: a real process speaking over its pipe directory's socket, as NVIDIA's
CLI and daemon do), and the client is ``mps_app.py``, standing in for the CUDA driver of a
client. Fake NVML under hami-nvidia; no GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hami_nvidia import mps
from hami_nvidia.node import NvidiaNode
from hami_nvidia.nvml import NvmlGpu

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import Allocator, NodeAgent
from hami_core.errors import ConfigError, HamiError
from hami_core.protocol.nodeconfig import parse_node_overrides
from hami_core.scheduling.scheduler import Scheduler

from .conftest import ctr, gpu_pod, gpu_uuid, nvidia_manager
from .pyfake import PyFakeNvml, installed

NODE = "node-a"
STANDIN = Path(__file__).parent / "mps_standin"
CONTROL = str(STANDIN / "nvidia-cuda-mps-control")
APP = str(STANDIN / "mps_app.py")


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


@pytest.fixture
def pipe_root() -> Iterator[Path]:
    """A short root (a UNIX socket path has 107 bytes); every daemon under it is quit."""
    root = Path(tempfile.mkdtemp(prefix="mps", dir="/tmp"))
    yield root
    for sock in [*root.glob("control"), *root.glob("*/control")]:
        subprocess.run([CONTROL], input="quit\n", text=True, env=_env(sock.parent), timeout=10)
    shutil.rmtree(root, ignore_errors=True)


def _env(pipe: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
    if pipe is not None:
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(pipe)
    env.update(extra)
    return env


def app(pipe: Path | None, want_mib: int, **env: str) -> dict[str, Any]:
    """Run the stand-in client with ``env`` (its own MPS variables, as a tenant sets them)."""
    out = subprocess.run(
        [sys.executable, APP, str(want_mib)],
        env=_env(pipe, **env),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def setup(
    tmp_path: Path, pipe_root: Path, isolation: str, *pods: dict[str, Any], binary: str = CONTROL
) -> tuple[MemoryCluster, Allocator, NodeAgent, list[str]]:
    cluster = MemoryCluster()
    cluster.add_node({"metadata": {"name": NODE}})
    overrides = parse_node_overrides(
        {"nodeconfig": [{"name": NODE, "operatingmode": "mps", "devicesplitcount": 4}]}, node=NODE
    )
    manager = nvidia_manager(
        tmp_path / "vgpu",
        mpsPipeDirectory=str(pipe_root),
        mpsIsolation=isolation,
        mpsControlBinary=binary,
    )
    agent = NodeAgent(
        cluster, manager, backend="nvidia", vendor="NVIDIA", node=NODE, overrides=overrides
    )
    devices = agent.discover()
    agent.publish(devices)
    ids = [f"{gpu_uuid(g)}-{i}" for g in range(2) for i in range(4)]
    for pod in pods:
        bind(cluster, agent, pod)
    allocator = Allocator(
        cluster,
        agent.manager,
        vendor="NVIDIA",
        node=NODE,
        known_ids=lambda: frozenset(ids),
        node_devices=lambda: devices,
    )
    return cluster, allocator, agent, ids


def bind(cluster: MemoryCluster, agent: NodeAgent, pod: dict[str, Any]) -> None:
    pod["metadata"]["annotations"] = {"nvidia.com/vgpu-mode": "mps"}
    meta = cluster.add_pod(pod)["metadata"]
    assert Scheduler(cluster, agent.manager).bind(
        meta["namespace"], meta["name"], uid=meta["uid"], node=NODE
    )


def pipe_of(answer: Any) -> Path:
    (mount,) = [m for m in answer.mounts if m.container_path == "/tmp/nvidia-mps"]
    return Path(mount.host_path)


TENANTS = {
    "as allocated": {},
    "drops both variables": {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "",
        "CUDA_MPS_PIPE_DIRECTORY": "",
    },
    "raises both variables": {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=15360M",
    },
}


@pytest.mark.parametrize("tenant", sorted(TENANTS))
def test_the_share_holds_server_side_whatever_the_tenant_sets(fake, tmp_path, pipe_root, tenant):
    """30 % and 3000 MiB: the container's daemon gives every client of its server at most
    that, with the allocated variables, without them, or with higher ones of the tenant's.
    Before, the share lived only in the env: the same tenant got 100 % and no limit."""
    pod = gpu_pod("p", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    _, allocator, _, ids = setup(tmp_path, pipe_root, "per-container", pod)

    (answer,) = allocator.allocate([[ids[0]]])

    pipe = pipe_of(answer)
    assert pipe.parent == pipe_root and (pipe / "control").exists()
    env = {k: v for k, v in answer.envs.items() if k.startswith("CUDA_MPS_")}
    env.pop("CUDA_MPS_PIPE_DIRECTORY")  # the client sees the mount at the default path
    env.update(TENANTS[tenant])
    env = {k: v for k, v in env.items() if v}
    got = app(pipe, 3500, **env)
    assert got == {"mps": True, "threads": 30.0, "limit_mib": 3000, "alloc_ok": False}
    assert app(pipe, 2500, **env)["alloc_ok"] is True


def test_each_container_gets_its_own_server_limits(fake, tmp_path, pipe_root):
    """Two containers on one GPU with different shares: two daemons, each with its own."""
    a = gpu_pod("a", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    b = gpu_pod("b", ctr("main", gpu=1, gpumem=6000, gpucores=60))
    cluster, allocator, agent, ids = setup(tmp_path, pipe_root, "per-container", a)
    first = pipe_of(allocator.allocate([[ids[0]]])[0])
    bind(cluster, agent, b)
    second = pipe_of(allocator.allocate([[ids[1]]])[0])
    assert first != second
    assert app(first, 1)["threads"] == 30.0 and app(first, 1)["limit_mib"] == 3000
    assert app(second, 1)["threads"] == 60.0 and app(second, 1)["limit_mib"] == 6000


def test_shared_mode_leaves_the_share_to_the_env(fake, tmp_path, pipe_root):
    """The default keeps HAMi's layout: the node's daemon (the chart's, started here as it
    runs it, with no server defaults), its pipe directory mounted, nothing started by
    Allocate. What this mode cannot hold, and per-container mode does: the tenant that
    drops the variables gets the whole GPU from that server (docs/sharing-modes.md)."""
    pod = gpu_pod("p", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    _, allocator, _, ids = setup(tmp_path, pipe_root, "shared", pod)
    (answer,) = allocator.allocate([[ids[0]]])
    assert pipe_of(answer) == pipe_root and list(pipe_root.iterdir()) == []
    subprocess.run([CONTROL, "-d"], env=_env(pipe_root), check=True, timeout=30)
    allocated = {k: v for k, v in answer.envs.items() if k.startswith("CUDA_MPS_")}
    del allocated["CUDA_MPS_PIPE_DIRECTORY"]  # /tmp/nvidia-mps in the container: the mount
    assert app(pipe_root, 3500, **allocated)["alloc_ok"] is False
    assert app(pipe_root, 3500) == {
        "mps": True,
        "threads": 100.0,
        "limit_mib": None,
        "alloc_ok": True,
    }


def test_release_quits_daemons_of_gone_pods_and_restarts_live_ones(fake, tmp_path, pipe_root):
    pod = gpu_pod("p", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    cluster, allocator, _, ids = setup(tmp_path, pipe_root, "per-container", pod)
    pipe = pipe_of(allocator.allocate([[ids[0]]])[0])
    live = [cluster.get_pod("default", "p")]

    # A device plugin restart ended the daemon: the next round starts it again, with
    # its limits, so a new client does not find an empty directory and run without MPS.
    mps.control(CONTROL, str(pipe), "quit")
    assert app(pipe, 1)["mps"] is False
    lines = mps.release(CONTROL, str(pipe_root), live)
    assert lines == [f"restarted the MPS control daemon of {live[0]['metadata']['uid']}/main"]
    assert app(pipe, 3500) == {"mps": True, "threads": 30.0, "limit_mib": 3000, "alloc_ok": False}

    # Gone pod: kept within the grace period (the pod list may trail Allocate), then quit.
    assert mps.release(CONTROL, str(pipe_root), [], clock=lambda: 0.0) == []
    lines = mps.release(CONTROL, str(pipe_root), [], clock=lambda: 1e12)
    assert len(lines) == 1 and lines[0].startswith("quit the MPS control daemon of ")
    assert list(pipe_root.iterdir()) == []


def test_a_deep_tree_the_tenant_left_in_its_pipe_directory_is_removed(pipe_root):
    """The pipe directory is the tenant's (writable): 1200 levels and a link to a host
    directory are removed without recursion and without following the link."""
    keep = pipe_root.parent / f"{pipe_root.name}-keep"
    keep.mkdir()
    (keep / "host-file").write_text("x")
    name = mps.container_dir_name("uid-gone", "main")
    deep = pipe_root / name
    deep.mkdir()
    os.symlink(keep, deep / "link")
    fd = os.open(deep, os.O_RDONLY)
    try:
        for _ in range(1200):  # relative to descriptors: no path grows past PATH_MAX
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    lines = mps.release(CONTROL, str(pipe_root), [], clock=lambda: 1e12)
    assert lines == [f"quit the MPS control daemon of {name}"]
    assert (keep / "host-file").read_text() == "x"
    shutil.rmtree(keep)
    assert not (pipe_root / name).exists()


def test_allocate_fails_closed_when_the_daemon_cannot_start(fake, tmp_path, pipe_root):
    """No control program: Allocate fails naming it, rather than start the container with
    its share only in the env."""
    pod = gpu_pod("p", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    missing = str(tmp_path / "missing")
    _, allocator, _, ids = setup(tmp_path, pipe_root, "per-container", pod, binary=missing)
    with pytest.raises(HamiError, match=r"MPS control .*missing.* not found"):
        allocator.allocate([[ids[0]]])


@pytest.mark.parametrize(
    "section, message",
    [
        (
            {"mpsIsolation": "per-pod"},
            r"nvidia\.mpsIsolation: 'per-pod' is not one of shared, per-container",
        ),
        ({"mpsControlBinary": " "}, r"nvidia\.mpsControlBinary: must name"),
        (
            {"mpsIsolation": "per-container", "mpsPipeDirectory": "/" + "x" * 90},
            r"nvidia\.mpsPipeDirectory: .* too long .* UNIX socket path",
        ),
    ],
)
def test_bad_mps_options_stop_the_start_naming_the_key(tmp_path, section, message):
    with pytest.raises(ConfigError, match=message):
        nvidia_manager(tmp_path / "vgpu", **section)


def test_simulate_starts_no_daemon(fake, tmp_path, pipe_root):
    """Devices read back from the inventory (``hami simulate``: no ``node_local``): the
    answer names the container's directory and nothing is started on this machine."""
    pod = gpu_pod("p", ctr("main", gpu=1, gpumem=3000, gpucores=30))
    cluster, _, agent, ids = setup(tmp_path, pipe_root, "per-container", pod)
    inventory = [attrs.evolve(d, node_local={}) for d in agent.discover()]
    simulated = Allocator(
        cluster,
        agent.manager,
        vendor="NVIDIA",
        node=NODE,
        known_ids=lambda: frozenset(ids),
        node_devices=lambda: inventory,
    )
    (answer,) = simulated.allocate([[ids[0]]])
    uid = cluster.get_pod("default", "p")["metadata"]["uid"]
    pipe = pipe_of(answer)
    assert pipe == pipe_root / mps.container_dir_name(uid, "main")
    assert not (pipe / "control").exists() and list(pipe_root.glob("*.json")) == []
