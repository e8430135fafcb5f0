"""Transient API failures during Allocate leave nothing half-done: the node lock is
released and kubelet's retry finds the pod still waiting (regressions of a review)."""

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.cluster.kube import ApiUnavailableError, call
from hami_core.deviceplugin import Allocator
from hami_core.errors import HamiError
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.scheduling.scheduler import Scheduler

from .conftest import ctr, gpu_node, gpu_pod, gpu_uuid, nvidia_manager

NODE = "node-a"
UUIDS = [gpu_uuid(0), gpu_uuid(1)]
ALL = frozenset(f"{u}-{i}" for u in UUIDS for i in range(10))


class Flaky(MemoryCluster):
    """The API server refuses writes of bind-phase while ``fail_phase`` is set."""

    fail_phase = False

    def patch_pod_metadata(self, namespace, name, *, annotations=None, **kw):
        if self.fail_phase and annotations and keys.BIND_PHASE in annotations:
            raise ApiUnavailableError("patch pod: the API server is unreachable (simulated)")
        return super().patch_pod_metadata(namespace, name, annotations=annotations, **kw)


def test_a_failed_phase_write_keeps_the_pod_locked_for_the_retry(tmp_path):
    c = Flaky()
    c.add_node(gpu_node(NODE, UUIDS))
    m = nvidia_manager(tmp_path / "vgpu")
    p = c.add_pod(gpu_pod("p", ctr("main", gpu=1, gpumem=1000)))
    Scheduler(c, m).bind("default", "p", uid=p["metadata"]["uid"], node=NODE)
    ann = c.get_pod("default", "p")["metadata"]["annotations"]
    uuid = decode_pod_devices(ann["hami.io/vgpu-devices-allocated"])[0][0].uuid
    allocator = Allocator(c, m, vendor="NVIDIA", node=NODE, known_ids=lambda: ALL)

    c.fail_phase = True
    with pytest.raises(HamiError, match="unreachable"):
        allocator.allocate([[f"{uuid}-0"]])
    after = c.get_pod("default", "p")["metadata"]["annotations"]
    assert after[keys.BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
    assert decode_pod_devices(after["hami.io/vgpu-devices-to-allocate"])[0]  # still waiting
    # UNAVAILABLE: the pod keeps its lock (only the lock's pod is served; it expires alone)
    assert (c.get_node(NODE)["metadata"]["annotations"][keys.NODE_LOCK]).endswith(",default,p")

    c.fail_phase = False
    (answer,) = allocator.allocate([[f"{uuid}-0"]])
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert (
        c.get_pod("default", "p")["metadata"]["annotations"][keys.BIND_PHASE]
        == keys.BIND_PHASE_SUCCESS
    )


def test_an_answered_pod_stuck_in_allocating_does_not_keep_the_node_locked(tmp_path):
    c = MemoryCluster()
    c.add_node(gpu_node(NODE, UUIDS))
    m = nvidia_manager(tmp_path / "vgpu")
    p = c.add_pod(gpu_pod("stuck", ctr("main", gpu=1, gpumem=1000)))
    Scheduler(c, m).bind("default", "stuck", uid=p["metadata"]["uid"], node=NODE)
    # as if an older plugin had consumed the entries and then lost the phase write
    c.patch_pod_metadata("default", "stuck", annotations={"hami.io/vgpu-devices-to-allocate": ";"})
    q = c.add_pod(gpu_pod("next", ctr("main", gpu=1, gpumem=1000)))
    assert c.get_node(NODE)["metadata"]["annotations"][keys.NODE_LOCK].endswith(",default,stuck")
    allocator = Allocator(c, m, vendor="NVIDIA", node=NODE, known_ids=lambda: ALL)
    with pytest.raises(HamiError, match="no pod on node node-a waits"):
        allocator.allocate([[f"{UUIDS[0]}-0"]])
    assert keys.NODE_LOCK not in (c.get_node(NODE)["metadata"].get("annotations") or {})
    Scheduler(c, m).bind("default", "next", uid=q["metadata"]["uid"], node=NODE)


def test_an_unreachable_api_server_is_a_temporary_hami_error():
    from kubernetes import client

    api = client.CoreV1Api(client.ApiClient(client.Configuration(host="http://127.0.0.1:1")))
    api.api_client.configuration.retries = 0
    with pytest.raises(
        ApiUnavailableError, match="get node n: the API server is unreachable"
    ) as exc:
        call("get node n", api.read_node, "n")
    assert exc.value.grpc_code == "UNAVAILABLE" and exc.value.http_status == 503
