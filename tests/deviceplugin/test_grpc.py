"""The device plugin over real gRPC on unix sockets, in process: registration,
ListAndWatch, Allocate and its gRPC errors, GetPreferredAllocation, kubelet restarts.

The plugin is the real ``DevicePluginProcess`` (discovery loop, node agent, server)
over a ``MemoryCluster`` and hami-nvidia with a Python fake of NVML; kubelet is
``FakeKubelet``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hami_nvidia.node import NvidiaNode
from hami_nvidia.nvml import EVENT_XID_CRITICAL, NvmlGpu, XidEvent

from hami_core.cluster import MemoryCluster
from hami_core.protocol import annotations as keys
from hami_core.servers.deviceplugin_main import DevicePluginOptions, DevicePluginProcess
from hami_core.servers.kubelet import api_pb2 as pb

from .conftest import BindPod, ctr, gpu_pod, gpu_uuid, nvidia_manager
from .fake_kubelet import FakeKubelet, Seen
from .pyfake import PyFakeNvml, installed

NODE = "node-a"
UUIDS = [gpu_uuid(0), gpu_uuid(1)]


@pytest.fixture
def nvml() -> Iterator[PyFakeNvml]:
    fake = PyFakeNvml(
        [
            NvmlGpu(
                index=i,
                uuid=u,
                name="NVIDIA A100-PCIE-16GB",
                memory_mib=16384,
                bus_id=f"00000000:{0x3B + i:02X}:00.0",
            )
            for i, u in enumerate(UUIDS)
        ]
    )
    sysfs = Path(__file__).parent / "no-sysfs"
    with installed(NvidiaNode(fake, sysfs_root=sysfs)):
        yield fake


@pytest.fixture
def cluster() -> MemoryCluster:
    c = MemoryCluster()
    c.add_node({"metadata": {"name": NODE}})
    return c


@pytest.fixture
def kubelet(short_dir: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(short_dir).start()
    yield k
    k.stop()


@pytest.fixture
def plugin(cluster, nvml, short_dir: Path, tmp_path: Path) -> Iterator[DevicePluginProcess]:
    opts = DevicePluginOptions(
        node_name=NODE,
        plugin_dir=str(short_dir),
        health_interval_s=0.1,
        register_interval_s=1.0,
        # never the host's own kubelet socket (a stale one left by the e2e tier made each
        # Allocate wait for a gRPC deadline): this fake kubelet serves no PodResources
        pod_resources_socket=str(tmp_path / "no-pod-resources" / "kubelet.sock"),
    )
    manager = nvidia_manager(tmp_path / "vgpu", healthRecoverySeconds=1)
    process = DevicePluginProcess(opts, store=cluster, manager=manager)
    process.start()
    yield process
    process.stop()


def all_healthy(n: int):  # type: ignore[no-untyped-def]
    return lambda seen: len(seen) == n and all(s.health == "Healthy" for s in seen)


def test_registers_and_lists_every_fake_id(kubelet: FakeKubelet, plugin: DevicePluginProcess):
    request = kubelet.wait_registrations(1)

    assert request.version == "v1beta1"
    assert request.endpoint == "nvidia-gpu.sock"
    assert request.resource_name == "nvidia.com/gpu"
    assert request.options.get_preferred_allocation_available is True
    assert request.options.pre_start_required is False
    seen = kubelet.wait_list(all_healthy(20))
    assert seen[:2] == [
        Seen(f"{UUIDS[0]}-0", "Healthy", (0,)),
        Seen(f"{UUIDS[0]}-1", "Healthy", (0,)),
    ]
    assert {s.id for s in seen} == {f"{u}-{i}" for u in UUIDS for i in range(10)}
    options = kubelet.stub().GetDevicePluginOptions(pb.Empty(), timeout=5)
    assert options.get_preferred_allocation_available
    assert (
        kubelet.stub().PreStartContainer(
            pb.PreStartContainerRequest(devices_ids=[f"{UUIDS[0]}-0"]), timeout=5
        )
        == pb.PreStartContainerResponse()
    )


def test_a_health_change_resends_the_whole_list_and_the_inventory(
    kubelet: FakeKubelet, plugin: DevicePluginProcess, nvml: PyFakeNvml, cluster: MemoryCluster
):
    kubelet.wait_list(all_healthy(20))
    nvml.dead.add(UUIDS[1])  # it will not answer the recovery probe yet
    nvml.push(XidEvent(uuid=UUIDS[1], event_type=EVENT_XID_CRITICAL, xid=79))

    seen = kubelet.wait_list(
        lambda s: len(s) == 20 and sum(x.health == "Unhealthy" for x in s) == 10, what="unhealthy"
    )

    assert {x.id for x in seen if x.health == "Unhealthy"} == {f"{UUIDS[1]}-{i}" for i in range(10)}

    def health() -> list[bool]:
        value = cluster.get_node(NODE)["metadata"]["annotations"]["hami.io/node-nvidia-register"]
        return [d.get("health", False) for d in json.loads(value)]

    deadline = time.monotonic() + 10  # published right after the stream is told
    while health() != [True, False] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert health() == [True, False]

    nvml.dead.clear()  # answers again: healthy after healthRecoverySeconds (1 s)
    kubelet.wait_list(all_healthy(20), what="recovered list")


def test_allocate_over_grpc(
    kubelet: FakeKubelet, plugin: DevicePluginProcess, cluster, bound_pod: BindPod, tmp_path: Path
):
    kubelet.wait_list(all_healthy(20))
    pod = bound_pod(
        cluster,
        plugin.agent.manager,
        gpu_pod("p", ctr("main", gpu=1, gpumem=3000, gpucores=30)),
        NODE,
    )
    uuid = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(",")[0]
    uid = pod["metadata"]["uid"]

    (ids,) = [kubelet.preferred(sorted(f"{u}-{i}" for u in UUIDS for i in range(10)), 1)]
    response = kubelet.allocate(ids)

    assert ids == [f"{uuid}-0"]  # steered onto the GPU the scheduler chose
    (answer,) = response.container_responses
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert answer.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == uuid
    mounts = {m.container_path: m for m in answer.mounts}
    shared = mounts["/usr/local/vgpu/shared"]
    assert shared.host_path == str(tmp_path / "vgpu" / "containers" / f"{uid}_main")
    assert shared.read_only and Path(shared.host_path).is_dir()
    region = mounts["/usr/local/vgpu/shared/vgpu.cache"]
    assert not region.read_only and Path(region.host_path).is_file()
    assert mounts["/usr/local/vgpu/libvgpu.so"].read_only
    after = cluster.get_pod("default", "p")["metadata"]["annotations"]
    assert after[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in (cluster.get_node(NODE)["metadata"].get("annotations") or {})


def test_allocate_errors_carry_the_status_and_the_reason(
    kubelet: FakeKubelet, plugin: DevicePluginProcess, cluster, bound_pod: BindPod
):
    kubelet.wait_list(all_healthy(20))

    with pytest.raises(grpc.RpcError) as unknown:
        kubelet.allocate(["GPU-nope-0"])
    with pytest.raises(grpc.RpcError) as nobody:
        kubelet.allocate([f"{UUIDS[0]}-0"])
    bound_pod(cluster, plugin.agent.manager, gpu_pod("p", ctr("main", gpu=1)), NODE)
    with pytest.raises(grpc.RpcError) as mismatch:
        kubelet.allocate([f"{UUIDS[0]}-0", f"{UUIDS[1]}-0"])

    assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device IDs ['GPU-nope-0']" in unknown.value.details()
    assert nobody.value.code() == grpc.StatusCode.NOT_FOUND
    assert nobody.value.details().startswith(f"no pod on node {NODE} waits for nvidia.com/gpu")
    assert mismatch.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert (
        "waits for 1 in container 'main'; only the pod the node lock names"
        in mismatch.value.details()
    )
    # Another pod's request (only the lock's pod is served): the owner keeps waiting.
    assert (
        cluster.get_pod("default", "p")["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"
    )
    assert keys.NODE_LOCK in (cluster.get_node(NODE)["metadata"].get("annotations") or {})


def test_reregisters_when_kubelet_restarts(kubelet: FakeKubelet, plugin: DevicePluginProcess):
    kubelet.wait_registrations(1)
    kubelet.wait_list(all_healthy(20))
    lists_before = len(kubelet.lists)

    kubelet.restart()  # deletes our socket and serves a new kubelet.sock

    request = kubelet.wait_registrations(2)
    assert request.resource_name == "nvidia.com/gpu"
    kubelet.wait_list(lambda s: len(kubelet.lists) > lists_before and len(s) == 20)
    assert plugin.server.socket_path.is_socket()
    # kubelet records a Register before the plugin has its answer: wait for the count
    assert plugin.server.wait_registrations(2, timeout_s=15) == 2


def test_registers_once_kubelet_comes_up(cluster, nvml, short_dir: Path, tmp_path: Path) -> None:
    opts = DevicePluginOptions(node_name=NODE, plugin_dir=str(short_dir), health_interval_s=0.1)
    process = DevicePluginProcess(opts, store=cluster, manager=nvidia_manager(tmp_path))
    process.start()  # no kubelet yet
    try:
        assert not process.server.registered
        kubelet = FakeKubelet(short_dir).start()
        try:
            kubelet.wait_registrations(1)
            kubelet.wait_list(all_healthy(20))
        finally:
            kubelet.stop()
    finally:
        process.stop()
    assert not (short_dir / "nvidia-gpu.sock").exists()  # removed at stop


def test_reregisters_when_only_kubelet_sock_is_recreated(
    kubelet: FakeKubelet, plugin: DevicePluginProcess
):
    # A kubelet that does not empty the directory: our socket stays, kubelet.sock is new
    # (possibly with the same inode number: the change time tells them apart).
    kubelet.wait_registrations(1)
    kubelet.wait_list(all_healthy(20))
    assert plugin.server.wait_registrations(1, timeout_s=15) == 1
    lists_before = len(kubelet.lists)
    kubelet.stop()
    assert plugin.server.socket_path.is_socket()
    kubelet.start()  # once the file system's clock passed the old kubelet.sock's stamp

    request = kubelet.wait_registrations(2)
    assert request.resource_name == "nvidia.com/gpu"
    assert request.endpoint == plugin.server.socket_name
    # the new kubelet's own ListAndWatch stream, not the list the old one got
    kubelet.wait_list(lambda s: len(kubelet.lists) > lists_before and all_healthy(20)(s))
    # kubelet records a Register before the plugin has its answer: wait for the count
    assert plugin.server.wait_registrations(2, timeout_s=15) == 2


def test_a_paused_api_server_gets_unavailable_in_bounded_time_and_the_retry_its_answer(
    kubelet: FakeKubelet, plugin: DevicePluginProcess, cluster, bound_pod: BindPod, monkeypatch
):
    """Issue #12 item 11: Allocate hung 20 s with the API server paused, then kubelet's
    retry got NOT_FOUND because the first answer had been committed meanwhile."""
    kubelet.wait_list(all_healthy(20))
    pod = bound_pod(
        cluster, plugin.agent.manager, gpu_pod("p", ctr("main", gpu=1, gpumem=2500)), NODE
    )
    uuid = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(",")[0]
    servicer = plugin.server.servicer
    monkeypatch.setattr(servicer, "allocate_timeout_s", 0.5)
    real_cached_node = cluster.cached_node
    paused = {"first": True}

    def slow_cached_node(name):  # Allocate's first read of the node (cache, else live)
        if paused.pop("first", False):
            time.sleep(2.0)  # the API server is paused for this request
        return real_cached_node(name)

    monkeypatch.setattr(cluster, "cached_node", slow_cached_node)
    start = time.monotonic()
    with pytest.raises(grpc.RpcError) as first:
        kubelet.allocate([f"{uuid}-0"])
    assert first.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - start < 1.5
    time.sleep(2.0)  # the first call finishes and commits
    assert cluster.get_pod("default", "p")["metadata"]["annotations"][keys.BIND_PHASE] == "success"
    (answer,) = kubelet.allocate([f"{uuid}-0"]).container_responses  # kubelet's retry
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2500m"
