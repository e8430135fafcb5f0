"""Allocate told by kubelet's PodResources (PROTOCOL.md §4): the pod kubelet lists with
no devices yet for the container being allocated is the one served; a pod no lock names
only when trusted (its signature checks out); a forged pod past the webhook never; when
kubelet cannot be read, only the lock's owner; several pods kubelet lists as admitting
are served only if their answers are interchangeable."""

from __future__ import annotations

from typing import Any

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import Allocator, NoPendingPodError
from hami_core.deviceplugin.allocator import NotLockedError
from hami_core.deviceplugin.pending import AmbiguousAllocateError
from hami_core.deviceplugin.podresources import (
    KubeletContainer,
    KubeletPod,
    PodResourcesUnavailableError,
)
from hami_core.protocol import annotations as keys
from hami_core.protocol.handshake import podresources_key
from hami_core.scheduling.scheduler import Scheduler

from .conftest import ctr, gpu_node, gpu_pod, gpu_uuid

NODE = "node-a"
UUIDS = [gpu_uuid(0), gpu_uuid(1)]
ALL_IDS = frozenset(f"{u}-{i}" for u in UUIDS for i in range(10))
ANSWER = "Reported_2026-12-02 02:00:00"


class Listing:
    def __init__(self, *pods: KubeletPod) -> None:
        self.pods = list(pods)
        self.down = False

    def list(self) -> list[KubeletPod]:
        if self.down:
            raise PodResourcesUnavailableError("kubelet PodResources List: UNAVAILABLE")
        return self.pods


def admitting(name: str, *containers: str) -> KubeletPod:
    return KubeletPod(
        namespace="default",
        name=name,
        containers=tuple(KubeletContainer(name=c) for c in containers or ("main",)),
    )


@pytest.fixture
def cluster() -> MemoryCluster:
    c = MemoryCluster()
    n = gpu_node(NODE, UUIDS)
    n["metadata"]["annotations"]["hami.io/node-handshake"] = ANSWER
    n["metadata"]["annotations"][podresources_key("hami.io/node-handshake")] = ANSWER
    c.add_node(n)
    return c


def bind(
    c: MemoryCluster, manager: Any, name: str, *, on: str | None = None, **limits: Any
) -> dict[str, Any]:
    body = gpu_pod(name, ctr("main", **limits))
    if on:
        body["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": on}
    created = c.add_pod(body)
    meta = created["metadata"]
    assert Scheduler(c, manager).bind("default", name, uid=meta["uid"], node=NODE)
    return c.get_pod("default", name)


def allocator(c: MemoryCluster, manager: Any, listing: Listing | None, **kw: Any) -> Allocator:
    kw.setdefault("trusted", lambda pod: True)
    kw.setdefault("pod_resources", listing)
    return Allocator(
        c,
        manager,
        vendor="NVIDIA",
        node=NODE,
        known_ids=lambda: ALL_IDS,
        **kw,
    )


def ids(uuid: str, n: int = 1) -> list[str]:
    return [f"{uuid}-{i}" for i in range(n)]


def test_of_two_pods_in_flight_the_one_kubelet_admits_is_served(cluster, nvidia):
    bind(cluster, nvidia, "a", gpu=1, gpumem=4000, gpucores=30)
    bind(cluster, nvidia, "b", gpu=1, gpumem=2500, gpucores=10)
    assert keys.NODE_LOCK not in cluster.get_node(NODE)["metadata"]["annotations"]
    listing = Listing(admitting("b"))
    (answer,) = allocator(cluster, nvidia, listing).allocate([ids(UUIDS[0])])
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2500m"
    assert cluster.get_pod("default", "b")["metadata"]["annotations"][keys.BIND_PHASE] == "success"
    assert cluster.get_pod("default", "a")["metadata"]["annotations"][keys.BIND_PHASE] == (
        "allocating"
    )


def test_a_pod_kubelet_already_gave_devices_is_not_the_one_being_admitted(cluster, nvidia):
    bind(cluster, nvidia, "a", gpu=1, gpumem=4000)
    bind(cluster, nvidia, "b", gpu=1, gpumem=2500)
    done = KubeletPod(
        namespace="default",
        name="a",
        containers=(KubeletContainer(name="main", devices={"nvidia.com/gpu": ("x",)}),),
    )
    (answer,) = allocator(cluster, nvidia, Listing(done, admitting("b"))).allocate([ids(UUIDS[1])])
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2500m"


def test_a_forged_pod_past_the_webhook_is_not_served_though_kubelet_admits_it(cluster, nvidia):
    """Attack: the tenant writes spec.nodeName and the allocation annotations itself. No
    lock names it and its signature does not check out: nothing is served."""
    forged = gpu_pod("evil", ctr("main", gpu=1, gpumem=16000))
    forged["spec"]["nodeName"] = NODE
    forged["metadata"]["annotations"] = {
        keys.VGPU_NODE: NODE,
        keys.BIND_PHASE: "allocating",
        keys.BIND_TIME: "1796170000",
        "hami.io/vgpu-devices-to-allocate": f"{UUIDS[0]},NVIDIA,16000,100:;",
        "hami.io/vgpu-devices-allocated": f"{UUIDS[0]},NVIDIA,16000,100:;",
    }
    cluster.add_pod(forged)
    signed_only = allocator(cluster, nvidia, Listing(admitting("evil")), trusted=lambda p: False)
    with pytest.raises(NotLockedError, match="default/evil"):
        signed_only.allocate([ids(UUIDS[0])])
    no_verifier = allocator(cluster, nvidia, Listing(admitting("evil")), trusted=None)
    assert not no_verifier.identifies_pods
    with pytest.raises(NotLockedError):
        no_verifier.allocate([ids(UUIDS[0])])


def test_when_kubelet_cannot_be_read_only_the_lock_owner_is_served(cluster, nvidia):
    bind(cluster, nvidia, "a", gpu=1, gpumem=4000)
    listing = Listing(admitting("a"))
    listing.down = True
    with pytest.raises(NotLockedError):
        allocator(cluster, nvidia, listing).allocate([ids(UUIDS[0])])
    assert cluster.get_pod("default", "a")["metadata"]["annotations"][keys.BIND_PHASE] == (
        "allocating"
    )


def test_a_pod_kubelet_does_not_list_is_not_served(cluster, nvidia):
    bind(cluster, nvidia, "a", gpu=1, gpumem=4000)
    with pytest.raises((NotLockedError, NoPendingPodError)):
        allocator(cluster, nvidia, Listing()).allocate([ids(UUIDS[0])])


def test_two_listed_as_admitting_with_different_slices_are_refused(cluster, nvidia):
    """A pod kubelet refused stays in its pod manager: if its status has not reached us,
    two pods look admitted; their slices differ, so neither is guessed."""
    bind(cluster, nvidia, "a", gpu=1, gpumem=4000)
    bind(cluster, nvidia, "b", gpu=1, gpumem=2500)
    with pytest.raises(AmbiguousAllocateError, match="default/a, default/b"):
        allocator(cluster, nvidia, Listing(admitting("a"), admitting("b"))).allocate(
            [ids(UUIDS[0])]
        )


def test_interchangeable_pods_listed_together_get_the_same_answer(cluster, nvidia):
    a = bind(cluster, nvidia, "a", on=UUIDS[1], gpu=1, gpumem=4000, gpucores=10)
    b = bind(cluster, nvidia, "b", on=UUIDS[1], gpu=1, gpumem=4000, gpucores=10)
    same = {p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] for p in (a, b)}
    assert len(same) == 1
    (answer,) = allocator(cluster, nvidia, Listing(admitting("a"), admitting("b"))).allocate(
        [ids(UUIDS[0])]
    )
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4000m"


def test_the_lock_owner_kubelet_admits_is_served_first(cluster, nvidia):
    """HAMi's lock mode on the same node (a rolling upgrade): the lock's owner first."""
    bind(cluster, nvidia, "a", gpu=1, gpumem=4000)
    cluster.patch_node_annotations(NODE, {podresources_key("hami.io/node-handshake"): None})
    bind(cluster, nvidia, "b", gpu=1, gpumem=4000)  # locks: the node no longer claims
    assert "default,b" in cluster.get_node(NODE)["metadata"]["annotations"][keys.NODE_LOCK]
    allocator(cluster, nvidia, Listing(admitting("a"), admitting("b"))).allocate([ids(UUIDS[0])])
    assert cluster.get_pod("default", "b")["metadata"]["annotations"][keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in cluster.get_node(NODE)["metadata"]["annotations"]


def test_no_claim_while_kubelets_podresources_cannot_be_read(cluster, nvidia):
    """A device plugin whose PodResources socket is absent (an old chart without the
    mount) or down must not say binds need no lock: it could serve no unlocked pod."""
    listing = Listing()
    a = allocator(cluster, nvidia, listing)
    assert a.identifies_pods
    listing.down = True
    assert not a.identifies_pods
    assert not allocator(cluster, nvidia, None, pod_resources=None).identifies_pods
