"""Allocate without gRPC: finding the pod, mapping containers, limits, finishing, and
every failure leaving the pod ``failed`` and the node unlocked (PROTOCOL.md §3, §4, §7).

Pods are bound by the real scheduler (``bound_pod``), so the annotations read here are
exactly the ones ``hami scheduler`` writes.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import (
    AllocateFailedError,
    Allocator,
    CdiWriter,
    DeviceCountMismatchError,
    NoPendingPodError,
    PreferredRequest,
)
from hami_core.deviceplugin import allocator as allocator_module
from hami_core.deviceplugin.allocator import NotLockedError
from hami_core.errors import BackendError, HamiError, InvalidInputError
from hami_core.facts.nodelock import acquire_node_lock
from hami_core.model import (
    BackendInfo,
    ContainerAllocation,
    DeviceTypeInfo,
    ResourceNames,
)
from hami_core.plugin import BackendManager, hookimpl
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.scheduling.scheduler import utcnow

from .conftest import BindPod, ctr, gpu_node, gpu_pod, gpu_uuid

NODE = "node-a"
UUIDS = [gpu_uuid(0), gpu_uuid(1)]
ALL_IDS = frozenset(f"{u}-{i}" for u in UUIDS for i in range(10))


@pytest.fixture
def cluster() -> MemoryCluster:
    c = MemoryCluster()
    c.add_node(gpu_node(NODE, UUIDS))
    return c


def allocator(cluster: MemoryCluster, manager: BackendManager, **kw: Any) -> Allocator:
    return Allocator(cluster, manager, vendor="NVIDIA", node=NODE, known_ids=lambda: ALL_IDS, **kw)


def ann(cluster: MemoryCluster, name: str) -> dict[str, str]:
    return cluster.get_pod("default", name)["metadata"].get("annotations") or {}


def lock(cluster: MemoryCluster) -> str | None:
    return (cluster.get_node(NODE)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def assigned(cluster: MemoryCluster, name: str) -> list[list[str]]:
    """Per container, the UUIDs the scheduler assigned (from the accounting list)."""
    value = ann(cluster, name)["hami.io/vgpu-devices-allocated"]
    return [[d.uuid for d in c] for c in decode_pod_devices(value)]


def ids_on(uuid: str, n: int = 1) -> list[str]:
    return [f"{uuid}-{i}" for i in range(n)]


# -- success ---------------------------------------------------------------------------


def test_the_pod_gets_its_limits_then_success_and_the_lock_is_released(
    cluster, nvidia, bound_pod: BindPod, tmp_path: Path
):
    pod = bound_pod(
        cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=3000, gpucores=30)), NODE
    )
    assert lock(cluster) is not None
    (uuid,) = assigned(cluster, "p")[0]

    (answer,) = allocator(cluster, nvidia).allocate([ids_on(uuid)])

    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert answer.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    region = next(m for m in answer.mounts if not m.read_only)
    assert region.host_path == str(
        tmp_path / "vgpu" / "containers" / f"{pod['metadata']['uid']}_main" / "vgpu.cache"
    )
    assert Path(region.host_path).is_file()
    assert stat.S_IMODE(Path(region.host_path).stat().st_mode) == 0o666
    assert stat.S_IMODE(Path(region.host_path).parent.stat().st_mode) == 0o755
    after = ann(cluster, "p")
    assert after[keys.BIND_PHASE] == "success"
    assert after["hami.io/vgpu-devices-to-allocate"] == ";"  # consumed
    assert assigned(cluster, "p") == [[uuid]]  # the accounting list is kept
    assert lock(cluster) is None


class CountingStore(MemoryCluster):
    """A ``MemoryCluster`` that counts the API calls the allocator would make."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def get_node(self, name):  # type: ignore[no-untyped-def]
        self.calls.append("get node")
        return super().get_node(name)

    def patch_node_annotations(self, name, annotations, *, resource_version=None):  # type: ignore[no-untyped-def]
        self.calls.append("patch node")
        return super().patch_node_annotations(name, annotations, resource_version=resource_version)

    def remove_node_annotation(self, name, key, *, value):  # type: ignore[no-untyped-def]
        self.calls.append(f"remove {key} if {value}")
        with self._lock:  # the base class's own patch is part of this one call
            node = self._nodes.get(name)
            if node is None or (node["metadata"].get("annotations") or {}).get(key) != value:
                return False
            MemoryCluster.patch_node_annotations(self, name, {key: None})
            return True

    def patch_pod_metadata(self, namespace, name, **kw):  # type: ignore[no-untyped-def]
        self.calls.append("patch pod")
        return super().patch_pod_metadata(namespace, name, **kw)


def test_allocate_reads_the_caches_only_and_writes_after_answering(nvidia, bound_pod: BindPod):
    """Issue #13 item 4: nothing but cache reads on kubelet's critical path; then the
    lock's release in one conditional call and the progress with the phase in one."""
    store = CountingStore()
    store.add_node(gpu_node(NODE, UUIDS))
    bound_pod(store, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=3000)), NODE)
    held = lock(store)
    assert held is not None
    later: list[Any] = []
    alloc = allocator(store, nvidia, after_answer=later.append)
    store.calls.clear()

    (answer,) = alloc.allocate([ids_on(assigned(store, "p")[0][0])])

    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert store.calls == []  # kubelet waits for no API call
    assert ann(store, "p")[keys.BIND_PHASE] == "allocating"
    (commit,) = later  # not yet: kubelet has its answer first
    commit()
    assert store.calls == [f"remove {keys.NODE_LOCK} if {held}", "patch pod"]
    assert keys.NODE_LOCK not in store.cached_node(NODE)["metadata"]["annotations"]
    assert ann(store, "p")[keys.BIND_PHASE] == "success"
    assert ann(store, "p")["hami.io/vgpu-devices-to-allocate"] == ";"


def test_unwritten_progress_still_moves_kubelet_to_the_next_container(
    cluster, nvidia, bound_pod: BindPod
):
    """The first container's progress is not written yet when kubelet asks for the
    second: this process's answer counts, not the stale cache."""
    bound_pod(
        cluster,
        nvidia,
        gpu_pod("two", ctr("a", gpu=1, gpumem=2000), ctr("b", gpu=1, gpumem=4000)),
        NODE,
    )
    (ua,), (ub,) = assigned(cluster, "two")
    later: list[Any] = []
    alloc = allocator(cluster, nvidia, after_answer=later.append)

    (first,) = alloc.allocate([ids_on(ua)])
    (second,) = alloc.allocate([ids_on(ub)])

    assert first.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    assert second.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"
    assert ann(cluster, "two")[keys.BIND_PHASE] == "allocating" and lock(cluster) is not None
    for commit in later:  # in the order answered, as the device plugin's one thread runs them
        commit()
    assert ann(cluster, "two")[keys.BIND_PHASE] == "success"
    assert ann(cluster, "two")["hami.io/vgpu-devices-to-allocate"] == ";;"
    assert lock(cluster) is None


def test_a_retry_before_and_after_the_writes_gets_the_same_answer(
    cluster, nvidia, bound_pod: BindPod
):
    """Issue #12 item 11 with the writes after the answer: kubelet's retry of the call
    it gave up on is answered the same, whether or not the writes have run."""
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=1234)), NODE)
    (uuid,) = assigned(cluster, "p")[0]
    later: list[Any] = []
    alloc = allocator(cluster, nvidia, after_answer=later.append)
    (first,) = alloc.allocate([ids_on(uuid)])
    (before,) = alloc.allocate([ids_on(uuid)])
    for commit in later:
        commit()
    (after,) = alloc.allocate([ids_on(uuid)])
    assert first == before == after and first.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1234m"
    assert ann(cluster, "p")[keys.BIND_PHASE] == "success"


def test_an_answered_lock_owner_does_not_open_the_node_to_another_pod(
    cluster, nvidia, bound_pod: BindPod
):
    """Until its lock is released, only the answered owner is served: a request that
    fits a forged pod on the node is refused as before (PROTOCOL.md §6)."""
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=1000)), NODE)
    (uuid,) = assigned(cluster, "p")[0]
    forged = gpu_pod("forged", ctr("main", gpu=2, gpumem=1000))
    forged["spec"]["nodeName"] = NODE
    forged["metadata"]["annotations"] = {
        keys.VGPU_NODE: NODE,
        keys.BIND_PHASE: "allocating",
        "hami.io/vgpu-devices-to-allocate": f"{UUIDS[0]},NVIDIA,1000,0:{UUIDS[1]},NVIDIA,1000,0:;",
    }
    cluster.add_pod(forged)
    later: list[Any] = []
    alloc = allocator(cluster, nvidia, after_answer=later.append)
    alloc.allocate([ids_on(uuid)])
    with pytest.raises(HamiError, match="node lock"):
        alloc.allocate([[f"{UUIDS[0]}-3", f"{UUIDS[1]}-3"]])


def test_a_failed_progress_write_is_tried_again(nvidia, bound_pod: BindPod, monkeypatch):
    monkeypatch.setattr(allocator_module, "COMMIT_WAITS_S", (0.0, 0.0, 0.0))
    store = CountingStore()
    store.add_node(gpu_node(NODE, UUIDS))
    bound_pod(store, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=3000)), NODE)
    real = store.patch_pod_metadata
    fails = {"left": 2}

    def flaky(namespace, name, **kw):  # type: ignore[no-untyped-def]
        if fails["left"]:
            fails["left"] -= 1
            raise HamiError("API server unreachable")
        return real(namespace, name, **kw)

    monkeypatch.setattr(store, "patch_pod_metadata", flaky)
    later: list[Any] = []
    alloc = allocator(store, nvidia, after_answer=later.append)
    alloc.allocate([ids_on(assigned(store, "p")[0][0])])
    later[0]()
    assert fails["left"] == 0 and ann(store, "p")[keys.BIND_PHASE] == "success"
    assert lock(store) is None


def test_the_one_call_release_leaves_a_lock_taken_by_another_pod_meanwhile(
    cluster, nvidia, bound_pod: BindPod
):
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=3000)), NODE)
    later: list[Any] = []
    alloc = allocator(cluster, nvidia, after_answer=later.append)
    alloc.allocate([ids_on(assigned(cluster, "p")[0][0])])
    other = "2026-01-01T00:00:00Z,default,q"
    cluster.patch_node_annotations(NODE, {keys.NODE_LOCK: other})  # q took it over
    later[0]()
    assert lock(cluster) == other


def test_kubelets_ids_need_not_name_the_assigned_gpu(cluster, nvidia, bound_pod: BindPod):
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=1000)), NODE)
    (uuid,) = assigned(cluster, "p")[0]
    other = next(u for u in UUIDS if u != uuid)

    (answer,) = allocator(cluster, nvidia).allocate([ids_on(other)])

    # The scheduler's device list decides, never kubelet's pick of a fake ID.
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == uuid


def test_two_pods_back_to_back_each_get_their_own_limits(cluster, nvidia, bound_pod: BindPod):
    alloc = allocator(cluster, nvidia)
    bound_pod(cluster, nvidia, gpu_pod("a", ctr("main", gpu=1, gpumem=3000, gpucores=30)), NODE)
    (ua,) = assigned(cluster, "a")[0]
    (first,) = alloc.allocate([ids_on(ua)])
    bound_pod(cluster, nvidia, gpu_pod("b", ctr("main", gpu=1, gpumem=5000, gpucores=50)), NODE)
    (ub,) = assigned(cluster, "b")[0]
    (second,) = alloc.allocate([[f"{ub}-5"]])

    assert (first.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], first.envs["CUDA_DEVICE_SM_LIMIT"]) == (
        "3000m",
        "30",
    )
    assert (second.envs["CUDA_DEVICE_MEMORY_LIMIT_0"], second.envs["CUDA_DEVICE_SM_LIMIT"]) == (
        "5000m",
        "50",
    )
    assert ann(cluster, "a")[keys.BIND_PHASE] == ann(cluster, "b")[keys.BIND_PHASE] == "success"
    assert lock(cluster) is None


def _two_waiting(cluster, nvidia, bound_pod: BindPod) -> None:
    """Pod a (1 GPU, 3000 MiB) and pod b (2 GPUs, 5000 MiB) both waiting, the lock
    naming b: a's lock was lost (expired and taken over) before kubelet got to it."""
    bound_pod(cluster, nvidia, gpu_pod("a", ctr("main", gpu=1, gpumem=3000, gpucores=30)), NODE)
    cluster.patch_node_annotations(NODE, {keys.NODE_LOCK: None})
    bound_pod(cluster, nvidia, gpu_pod("b", ctr("main", gpu=2, gpumem=5000, gpucores=50)), NODE)
    assert "default,b" in (lock(cluster) or "")


def test_a_pod_that_lost_its_lock_is_never_served(cluster, nvidia, bound_pod: BindPod):
    """Issue #12 item 2: only the pod a valid node lock names is served."""
    _two_waiting(cluster, nvidia, bound_pod)
    alloc = allocator(cluster, nvidia)
    with pytest.raises(DeviceCountMismatchError, match="only the pod the node lock names"):
        alloc.allocate([ids_on(UUIDS[0])])  # a's request: b holds the lock
    assert ann(cluster, "b")[keys.BIND_PHASE] == "allocating"  # the owner keeps waiting
    (answer_b,) = alloc.allocate([[f"{UUIDS[0]}-1", f"{UUIDS[1]}-1"]])
    assert answer_b.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "5000m"
    assert lock(cluster) is None
    with pytest.raises(NotLockedError, match="names none of them"):
        alloc.allocate([ids_on(UUIDS[0])])
    assert ann(cluster, "a")[keys.BIND_PHASE] == "allocating"


def test_the_lock_owner_is_served_whatever_gpus_kubelet_names(cluster, nvidia, bound_pod: BindPod):
    a = gpu_pod("a", ctr("main", gpu=1, gpumem=3000))
    a["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": UUIDS[0]}
    b = gpu_pod("b", ctr("main", gpu=1, gpumem=7000))
    b["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": UUIDS[1]}
    bound_pod(cluster, nvidia, a, NODE)
    cluster.patch_node_annotations(NODE, {keys.NODE_LOCK: None})  # a's lock was lost
    bound_pod(cluster, nvidia, b, NODE)  # b holds the lock now
    alloc = allocator(cluster, nvidia)
    (first,) = alloc.allocate([ids_on(UUIDS[0])])
    assert first.envs["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]  # the lock owner's own GPU
    assert first.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "7000m"


def test_without_a_valid_lock_nobody_is_served(cluster, nvidia, bound_pod: BindPod):
    bound_pod(cluster, nvidia, gpu_pod("a", ctr("main", gpu=1, gpumem=3000)), NODE)
    cluster.patch_node_annotations(NODE, {keys.NODE_LOCK: None})
    with pytest.raises(NotLockedError):
        allocator(cluster, nvidia).allocate([ids_on(UUIDS[0])])
    assert ann(cluster, "a")[keys.BIND_PHASE] == "allocating"


def test_an_expired_or_future_lock_serves_nobody(cluster, nvidia, bound_pod: BindPod):
    bound_pod(cluster, nvidia, gpu_pod("a", ctr("main", gpu=1, gpumem=3000)), NODE)
    held = lock(cluster)
    for stamp in ("2020-01-01T00:00:00Z", "2099-01-01T00:00:00Z"):
        cluster.patch_node_annotations(NODE, {keys.NODE_LOCK: stamp + held[held.index(",") :]})
        with pytest.raises(NotLockedError):
            allocator(cluster, nvidia).allocate([ids_on(UUIDS[0])])


def test_a_bind_time_outside_the_locks_era_is_refused(cluster, nvidia, bound_pod: BindPod):
    bound_pod(cluster, nvidia, gpu_pod("a", ctr("main", gpu=1, gpumem=3000)), NODE)
    cluster.patch_pod_metadata("default", "a", annotations={keys.BIND_TIME: "1000"})
    with pytest.raises(NotLockedError):
        allocator(cluster, nvidia).allocate([ids_on(UUIDS[0])])


def test_a_forged_pod_of_another_scheduler_gets_nothing(cluster, nvidia):
    """A pod that skipped the scheduler (nodeName preset, its own to-allocate list and
    bind-phase) is not named by any lock: no GPU, no limits."""
    forged = gpu_pod("evil", ctr("main", gpu=1))
    forged["spec"].update(schedulerName="other", nodeName=NODE)
    forged["metadata"]["annotations"] = {
        keys.VGPU_NODE: NODE,
        keys.BIND_PHASE: "allocating",
        keys.BIND_TIME: "0",
        "hami.io/vgpu-devices-to-allocate": f"{UUIDS[0]},NVIDIA,81920,100:;",
    }
    cluster.add_pod(forged)
    with pytest.raises(NotLockedError):
        allocator(cluster, nvidia).allocate([ids_on(UUIDS[0])])


def test_a_retried_allocate_with_the_same_ids_gets_the_same_answer(
    cluster, nvidia, bound_pod: BindPod
):
    """Issue #12 item 11: kubelet gave up on the first call, which was committed."""
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=1234)), NODE)
    (uuid,) = assigned(cluster, "p")[0]
    alloc = allocator(cluster, nvidia)
    (first,) = alloc.allocate([ids_on(uuid)])
    (again,) = alloc.allocate([ids_on(uuid)])
    assert again == first and again.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1234m"
    cluster.delete_pod("default", "p")
    with pytest.raises(NoPendingPodError):
        alloc.allocate([ids_on(uuid)])


@pytest.mark.parametrize("gone", ["recreated", "finished", "deleting"])
def test_a_retry_is_not_answered_for_a_pod_that_is_no_longer_the_one_answered(
    cluster, nvidia, bound_pod: BindPod, gone
):
    """The remembered answer goes only to the very pod it was given to, still live: a
    pod of the same name with another uid, or one finished or being deleted, does not
    get another pod's limits from the cache."""
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=1234)), NODE)
    (uuid,) = assigned(cluster, "p")[0]
    alloc = allocator(cluster, nvidia)
    alloc.allocate([ids_on(uuid)])
    if gone == "recreated":
        cluster.delete_pod("default", "p")
        cluster.add_pod(gpu_pod("p", ctr("main", gpu=1, gpumem=1234)))
    elif gone == "finished":
        cluster.set_pod_phase("default", "p", "Succeeded")
    else:
        pod = cluster.get_pod("default", "p")
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        cluster.add_pod(pod)
    with pytest.raises(NoPendingPodError):
        alloc.allocate([ids_on(uuid)])


def test_containers_are_answered_one_call_at_a_time_init_first(cluster, nvidia, bound_pod: BindPod):
    pod = gpu_pod(
        "multi",
        ctr("app1", gpu=1, gpumem=2000),
        ctr("sidecar"),
        ctr("app2", gpu=1, gpumem=4000),
        init=[ctr("prep", gpu=1, gpumem=1000)],
    )
    bound_pod(cluster, nvidia, pod, NODE)
    per_container = assigned(cluster, "multi")
    alloc = allocator(cluster, nvidia)

    got = []
    for position in (0, 1, 3):  # kubelet skips the sidecar, which asks no GPU
        (answer,) = alloc.allocate([ids_on(per_container[position][0])])
        got.append(answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"])
        finished = position == 3
        assert (ann(cluster, "multi")[keys.BIND_PHASE] == "success") is finished
        assert (lock(cluster) is None) is finished

    assert got == ["1000m", "2000m", "4000m"]


def test_one_call_may_carry_several_containers(cluster, nvidia, bound_pod: BindPod):
    pod = gpu_pod("two", ctr("a", gpu=1, gpumem=2000), ctr("b", gpu=2, gpumem=4000))
    bound_pod(cluster, nvidia, pod, NODE)
    per_container = assigned(cluster, "two")

    first, second = allocator(cluster, nvidia).allocate(
        [ids_on(per_container[0][0]), [f"{u}-2" for u in per_container[1]]]
    )

    assert first.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    assert second.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "4000m"
    assert ann(cluster, "two")[keys.BIND_PHASE] == "success"


# -- GetPreferredAllocation ------------------------------------------------------------


def test_preferred_ids_are_on_the_gpus_the_scheduler_chose(cluster, nvidia, bound_pod: BindPod):
    pod = gpu_pod("p", ctr("main", gpu=1, gpumem=1000))
    pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": UUIDS[1]}
    bound_pod(cluster, nvidia, pod, NODE)
    available = sorted(ALL_IDS)

    (chosen,) = allocator(cluster, nvidia).preferred([PreferredRequest(available=tuple(available))])

    assert chosen == [f"{UUIDS[1]}-0"]


def test_preferred_ids_spread_over_gpus_when_no_pod_is_known(cluster, nvidia):
    available = tuple(sorted(ALL_IDS))

    (chosen,) = allocator(cluster, nvidia).preferred(
        [PreferredRequest(available=available, must_include=(f"{UUIDS[1]}-3",), size=2)]
    )

    assert chosen == [f"{UUIDS[1]}-3", f"{UUIDS[0]}-0"]


# -- failures --------------------------------------------------------------------------


def test_no_pod_waiting_names_the_node_and_releases_a_dead_lock(cluster, nvidia):
    acquire_node_lock(cluster, NODE, namespace="default", pod="gone", now=utcnow())
    assert lock(cluster) is not None

    with pytest.raises(NoPendingPodError) as err:
        allocator(cluster, nvidia).allocate([ids_on(UUIDS[0])])

    message = str(err.value)
    assert f"no pod on node {NODE} waits for nvidia.com/gpu devices" in message
    assert "hami.io/bind-phase=allocating" in message
    assert "node lock held by default/gone" in message
    assert err.value.grpc_code == "NOT_FOUND"
    assert lock(cluster) is None  # its owner does not exist: nothing may stay locked


def test_no_pod_waiting_keeps_the_lock_of_a_pod_still_being_bound(cluster, nvidia):
    # The scheduler takes the lock before it writes the annotations: a stray Allocate
    # in between must not break the mutual exclusion.
    cluster.add_pod(gpu_pod("binding", ctr("main", gpu=1)))
    acquire_node_lock(cluster, NODE, namespace="default", pod="binding", now=utcnow())

    with pytest.raises(NoPendingPodError):
        allocator(cluster, nvidia).allocate([ids_on(UUIDS[0])])

    assert "default,binding" in (lock(cluster) or "")


def test_device_count_mismatch_refuses_and_keeps_the_lock_owner_waiting(
    cluster, nvidia, bound_pod: BindPod
):
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=1000)), NODE)

    with pytest.raises(DeviceCountMismatchError) as err:
        allocator(cluster, nvidia).allocate([[f"{UUIDS[0]}-0", f"{UUIDS[1]}-0"]])

    assert str(err.value) == (
        "kubelet asks 2 device(s) of nvidia.com/gpu, but pod default/p (holder of the node "
        "lock) waits for 1 in container 'main'; only the pod the node lock names is served"
    )
    assert err.value.grpc_code == "FAILED_PRECONDITION"
    assert ann(cluster, "p")[keys.BIND_PHASE] == "allocating"
    assert lock(cluster) is not None


def test_mismatch_with_pods_that_do_not_hold_the_lock_names_them(
    cluster, nvidia, bound_pod: BindPod
):
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1)), NODE)
    cluster.patch_node_annotations(NODE, {keys.NODE_LOCK: None})

    with pytest.raises(DeviceCountMismatchError) as err:
        allocator(cluster, nvidia).allocate([[f"{UUIDS[0]}-0", f"{UUIDS[1]}-0"]])

    assert "default/p waits for 1 in container 'main'" in str(err.value)
    assert ann(cluster, "p")[keys.BIND_PHASE] == "allocating"  # not ours to fail


def test_unknown_device_ids_are_refused_before_anything_changes(
    cluster, nvidia, bound_pod: BindPod
):
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1)), NODE)

    with pytest.raises(InvalidInputError, match=r"unknown device IDs \['GPU-nope-0'\]"):
        allocator(cluster, nvidia).allocate([["GPU-nope-0"]])

    assert ann(cluster, "p")[keys.BIND_PHASE] == "allocating"
    assert lock(cluster) is not None


def test_a_device_id_repeated_in_one_request_is_refused_before_anything_changes(
    cluster, nvidia, bound_pod: BindPod
):
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=2)), NODE)
    (uuid, _) = assigned(cluster, "p")[0]

    with pytest.raises(InvalidInputError, match="repeats a device ID"):
        allocator(cluster, nvidia).allocate([[f"{uuid}-0", f"{uuid}-0"]])

    assert ann(cluster, "p")[keys.BIND_PHASE] == "allocating"
    assert lock(cluster) is not None


def test_a_host_file_that_cannot_be_made_fails_the_pod(cluster, nvidia, bound_pod: BindPod):
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1)), NODE)

    def refuse(path: str, size: int) -> None:
        raise PermissionError(13, "Permission denied", path)

    with pytest.raises(AllocateFailedError) as err:
        allocator(cluster, nvidia, make_file=refuse).allocate([ids_on(UUIDS[0])])

    assert str(err.value).startswith("pod default/p: [Errno 13] Permission denied")
    assert ann(cluster, "p")[keys.BIND_PHASE] == "failed"
    assert lock(cluster) is None


class BrokenBackend:
    """Serves vendor NVIDIA like hami-nvidia, but its hami_allocate raises."""

    @hookimpl
    def hami_backend_info(self) -> BackendInfo:
        return BackendInfo(
            name="broken",
            device_types=(
                DeviceTypeInfo(
                    vendor="NVIDIA",
                    resources=ResourceNames(count="nvidia.com/gpu"),
                    register_annotation="hami.io/node-nvidia-register",
                    handshake_annotation="hami.io/node-handshake",
                    to_allocate_annotation="hami.io/vgpu-devices-to-allocate",
                    allocated_annotation="hami.io/vgpu-devices-allocated",
                ),
            ),
        )

    @hookimpl
    def hami_allocate(self) -> ContainerAllocation:
        raise RuntimeError("driver exploded")


def test_a_backend_failure_fails_the_pod_with_the_backends_message(
    cluster, nvidia, bound_pod: BindPod
):
    bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1)), NODE)
    broken = BackendManager.from_plugins({"broken": BrokenBackend()})

    with pytest.raises(AllocateFailedError) as err:
        allocator(cluster, broken).allocate([ids_on(UUIDS[0])])

    assert str(err.value) == (
        "pod default/p: backend 'broken': hami_allocate raised RuntimeError: driver exploded"
    )
    assert isinstance(err.value.__cause__, BackendError)
    assert err.value.grpc_code == "INTERNAL"
    assert ann(cluster, "p")[keys.BIND_PHASE] == "failed"
    assert lock(cluster) is None


# -- CDI -------------------------------------------------------------------------------


def test_cdi_mode_answers_names_and_writes_the_spec(
    cluster, nvidia, bound_pod: BindPod, tmp_path: Path
):
    pod = bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=3000)), NODE)
    uid = pod["metadata"]["uid"]
    (uuid,) = assigned(cluster, "p")[0]
    writer = CdiWriter(spec_dir=tmp_path / "cdi", backend="nvidia")

    (answer,) = allocator(cluster, nvidia, cdi=writer).allocate([ids_on(uuid)])

    name = f"hami.io/nvidia={uid}_main"
    assert answer.cdi_devices == (name,)
    assert answer.envs == {} and answer.mounts == ()
    assert answer.annotations == {"cdi.k8s.io/hami-nvidia": name}
    spec = json.loads(writer.spec_path(uid, "main").read_text())
    assert spec["kind"] == "hami.io/nvidia" and spec["cdiVersion"] == "0.6.0"
    (device,) = spec["devices"]
    assert device["name"] == f"{uid}_main"
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=3000m" in device["containerEdits"]["env"]
    assert f"NVIDIA_VISIBLE_DEVICES={uuid}" in device["containerEdits"]["env"]
    mounts = {m["containerPath"]: m for m in device["containerEdits"]["mounts"]}
    assert mounts["/usr/local/vgpu/shared"]["options"][0] == "ro"
    assert mounts["/usr/local/vgpu/shared/vgpu.cache"]["options"][0] == "rw"
    assert ann(cluster, "p")[keys.BIND_PHASE] == "success"

    assert writer.sweep([uid]) == []
    assert writer.sweep([]) == [writer.spec_path(uid, "main")]
    assert not writer.spec_path(uid, "main").exists()


def test_the_cdi_spec_holds_what_readme_says_and_no_device_node_or_driver(
    cluster, nvidia, bound_pod: BindPod, tmp_path: Path
):
    """``--cdi`` is not an alternative to NVIDIA's container toolkit: the spec carries
    hami's env and mounts only; ``/dev/nvidia*`` and the driver's libraries still come
    from the toolkit acting on ``NVIDIA_VISIBLE_DEVICES``. README says exactly that."""
    pod = bound_pod(cluster, nvidia, gpu_pod("p", ctr("main", gpu=1, gpumem=3000)), NODE)
    uid = pod["metadata"]["uid"]
    (uuid,) = assigned(cluster, "p")[0]
    writer = CdiWriter(spec_dir=tmp_path / "cdi", backend="nvidia")
    allocator(cluster, nvidia, cdi=writer).allocate([ids_on(uuid)])
    edits = json.loads(writer.spec_path(uid, "main").read_text())["devices"][0]["containerEdits"]

    assert set(edits) == {"env", "mounts"}  # no deviceNodes, no hooks
    paths = {m["containerPath"] for m in edits["mounts"]}
    assert not [p for p in paths if re.search(r"libcuda|libnvidia|nvidia-smi|^/dev/", p)]
    assert "/usr/local/vgpu/libvgpu.so" in paths and "/etc/ld.so.preload" in paths

    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    assert "or CDI: `hami device-plugin --cdi`" not in readme
    assert "no device nodes and no driver libraries" in readme
    assert "no container runtime consumes the spec in any test" in readme


def test_the_limits_reach_the_container_as_a_read_only_file_env_cannot_override(
    cluster, nvidia, bound_pod: BindPod
):
    """Issue #12 item 1: kubelet lets a container's own env win over the device plugin's,
    so the limits also travel as a read-only file, which the shim prefers."""
    c = ctr("main", gpu=1, gpumem=3000, gpucores=30)
    c["env"] = [{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "16384m"}]  # got past admission
    bound_pod(cluster, nvidia, gpu_pod("p", c), NODE)
    (uuid,) = assigned(cluster, "p")[0]
    (answer,) = allocator(cluster, nvidia).allocate([ids_on(uuid)])
    mount = {m.container_path: m for m in answer.mounts}["/usr/local/vgpu/limits"]
    assert mount.read_only
    host = Path(mount.host_path)
    lines = dict(line.split("=", 1) for line in host.read_text().splitlines())
    assert lines["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert lines["CUDA_DEVICE_SM_LIMIT"] == "30" and lines["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert stat.S_IMODE(host.stat().st_mode) == 0o644
    shared = {m.container_path: m for m in answer.mounts}["/usr/local/vgpu/shared"]
    assert not host.is_relative_to(shared.host_path)  # not inside the writable directory


@pytest.mark.parametrize(
    ("labels", "off"),
    [
        ({}, False),
        ({keys.DISABLE_CONTROL_LABEL: "yes"}, False),
        ({keys.DISABLE_CONTROL_LABEL: keys.DISABLE_CONTROL_ALLOW}, True),
    ],
    ids=["unlabelled", "other-value", "allowed"],
)
def test_the_limiter_opt_out_needs_the_namespace_label_even_past_the_webhook(
    cluster, nvidia, bound_pod: BindPod, labels, off
):
    """Issue #12 items 1 and 4: a pod admitted unreviewed (webhook outage under
    failurePolicy Ignore) with CUDA_DISABLE_CONTROL=true in its env keeps the preload and
    its limits unless an administrator labelled the namespace."""
    cluster.label_namespace("default", labels)
    c = ctr("main", gpu=1, gpumem=3000)
    c["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}, {"name": "A", "value": "b"}]
    bound_pod(cluster, nvidia, gpu_pod("p", c), NODE)
    (uuid,) = assigned(cluster, "p")[0]
    (answer,) = allocator(cluster, nvidia).allocate([ids_on(uuid)])
    paths = {m.container_path: m for m in answer.mounts}
    assert ("/etc/ld.so.preload" not in paths) is off
    limits = Path(paths["/usr/local/vgpu/limits"].host_path).read_text().splitlines()
    assert ("CUDA_DISABLE_CONTROL=true" in limits) is off
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=3000m" in limits


def test_the_opt_out_fails_closed_when_the_namespace_cannot_be_read(cluster, nvidia, bound_pod):
    from hami_core.errors import NotFoundError

    def unreadable(name):
        raise NotFoundError(f"namespace {name}: not found")

    cluster.namespace_labels = unreadable  # type: ignore[method-assign]
    c = ctr("main", gpu=1, gpumem=3000)
    c["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    bound_pod(cluster, nvidia, gpu_pod("p", c), NODE)
    (uuid,) = assigned(cluster, "p")[0]
    (answer,) = allocator(cluster, nvidia).allocate([ids_on(uuid)])
    assert "/etc/ld.so.preload" in {m.container_path for m in answer.mounts}


def test_a_containers_only_writable_host_paths_are_files_the_host_made_and_sized(
    cluster, nvidia, bound_pod: BindPod, tmp_path: Path
):
    """Issue 24 item 16 (d): the region's directory (and a high-priority container's
    board entry) was mounted writable, an unbounded host path a tenant could fill the
    node's disk through. Every writable mount is now one file the device plugin created
    at its format's size (0666), in a directory of its own the container sees read-only;
    what an older version's writable directory left at the region's path (a tenant's
    symlink to a host file) is replaced, not followed."""
    c = ctr("main", gpu=1, gpumem=3000, priority=0)
    pod = bound_pod(cluster, nvidia, gpu_pod("p", c), NODE)
    (uuid,) = assigned(cluster, "p")[0]
    uid = pod["metadata"]["uid"]
    old = tmp_path / "vgpu" / "containers" / f"{uid}_main"
    old.mkdir(parents=True)
    old.chmod(0o1777)
    secret = tmp_path / "host-secret"
    secret.write_text("keep")
    (old / "vgpu.cache").symlink_to(secret)

    (answer,) = allocator(cluster, nvidia).allocate([ids_on(uuid)])

    from hami_nvidia.shared_region import FILE_SIZE

    writable = [m for m in answer.mounts if not m.read_only]
    assert sorted(m.container_path for m in writable) == sorted(
        ["/usr/local/vgpu/shared/vgpu.cache", f"/usr/local/vgpu/priority-beat/{uuid}/beat"]
    )
    sizes = {"vgpu.cache": FILE_SIZE, "beat": 8}
    for m in writable:
        host = Path(m.host_path)
        st = host.lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_size == sizes[host.name], m
        assert stat.S_IMODE(st.st_mode) == 0o666
        assert stat.S_IMODE(host.parent.stat().st_mode) == 0o755, "the directory is the host's"
    shared = {m.container_path: m for m in answer.mounts}["/usr/local/vgpu/shared"]
    assert shared.read_only and Path(shared.host_path) == old
    assert secret.read_text() == "keep"
