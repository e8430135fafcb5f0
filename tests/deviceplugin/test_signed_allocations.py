"""The device plugin serves only allocations the scheduler signed (PROTOCOL.md §4a,
docs/threat-model.md "Forged allocations"): a pod whose ``hami.io/allocation-signature``
does not verify for its UID, namespace/name, this node and its annotation values gets
nothing, even under a node lock naming it (the tenant who rewrites its own pod's
allocation between bind and kubelet's admission while the webhook is down, or copies
another pod's signed set onto it). Pods are bound by the real scheduler."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import Allocator, NoPendingPodError
from hami_core.deviceplugin.allocator import DeviceCountMismatchError, NotLockedError
from hami_core.deviceplugin.pending import (
    UNSIGNED_REFUSE,
    find_candidates,
)
from hami_core.deviceplugin.podresources import KubeletContainer, KubeletPod
from hami_core.errors import HamiError
from hami_core.facts.nodelock import acquire_node_lock
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.lock import decode_lock, encode_lock
from hami_core.protocol.signature import (
    AllocationSigner,
    AllocationVerifier,
    generate_private_key_pem,
    load_public_keys,
    public_key_pem,
)

from .conftest import BindPod, ctr, gpu_node, gpu_pod, gpu_uuid

NODE = "node-a"
UUIDS = [gpu_uuid(0), gpu_uuid(1)]
ALL_IDS = frozenset(f"{u}-{i}" for u in UUIDS for i in range(10))
ALLOCATED = "hami.io/vgpu-devices-allocated"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
KEY = generate_private_key_pem()
SIGNER = AllocationSigner(KEY)
REFUSED = (NoPendingPodError, NotLockedError, DeviceCountMismatchError)


@pytest.fixture
def cluster() -> MemoryCluster:
    c = MemoryCluster()
    c.add_node(gpu_node(NODE, UUIDS))
    return c


def verifier(*pems: bytes) -> AllocationVerifier:
    return AllocationVerifier(
        lambda: load_public_keys((f"k{i}", public_key_pem(p)) for i, p in enumerate(pems or [KEY]))
    )


def allocator(cluster: MemoryCluster, manager: BackendManager, **kw: Any) -> Allocator:
    kw.setdefault("verifier", verifier())
    return Allocator(cluster, manager, vendor="NVIDIA", node=NODE, known_ids=lambda: ALL_IDS, **kw)


def ann(cluster: MemoryCluster, name: str) -> dict[str, str]:
    return cluster.get_pod("default", name)["metadata"].get("annotations") or {}


def lock(cluster: MemoryCluster) -> str | None:
    return (cluster.get_node(NODE)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def uuid_of(cluster: MemoryCluster, name: str) -> str:
    return ann(cluster, name)[ALLOCATED].split(",", 1)[0]


def tamper(cluster: MemoryCluster, name: str, **changes: str | None) -> None:
    """The tenant's own PATCH of its pod (the webhook down)."""
    cluster.patch_pod_metadata("default", name, annotations=dict(changes))


def bind(cluster, nvidia, bound_pod: BindPod, name: str, gpumem: int, *, signer=SIGNER):
    pod = gpu_pod(name, ctr("main", gpu=1, gpumem=gpumem, gpucores=10))
    return bound_pod(cluster, nvidia, pod, NODE, signer=signer)


def test_the_scheduler_signs_the_allocation_it_binds(cluster, nvidia, bound_pod: BindPod):
    pod = bind(cluster, nvidia, bound_pod, "p", 3000)
    value = pod["metadata"]["annotations"][keys.ALLOCATION_SIGNATURE]
    assert value.startswith(f"v1:{SIGNER.key_id}:")
    check = verifier().check(pod, node=NODE, required=[ALLOCATED, keys.VGPU_NODE])
    assert check.verified, check.reason
    (cand,) = find_candidates(
        cluster, node=NODE, dtype=nvidia.device_type("NVIDIA"), verifier=verifier()
    ).pods
    assert cand.signed and cand.lock_owner


def test_a_signed_pod_is_served(cluster, nvidia, bound_pod: BindPod):
    bind(cluster, nvidia, bound_pod, "p", 3000)
    (answer,) = allocator(cluster, nvidia).allocate([[f"{uuid_of(cluster, 'p')}-0"]])
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert ann(cluster, "p")[keys.BIND_PHASE] == "success"
    assert lock(cluster) is None


class _Listing:
    """kubelet's PodResources ``List`` while it admits ``pods``."""

    def __init__(self, *pods: KubeletPod) -> None:
        self.pods = list(pods)

    def list(self) -> list[KubeletPod]:
        return self.pods


class _NodeCacheBehind:
    """A device plugin's view of ``cluster`` whose node cache lags its pod cache: the
    node lock the scheduler wrote is not seen yet; its reads of the node are counted."""

    def __init__(self, cluster: MemoryCluster) -> None:
        self._cluster = cluster
        self.node_reads = 0

    def cached_node(self, name: str) -> dict[str, Any]:
        node = copy.deepcopy(self._cluster.cached_node(name))
        node["metadata"].get("annotations", {}).pop(keys.NODE_LOCK, None)
        return node

    def get_node(self, name: str) -> dict[str, Any]:
        self.node_reads += 1
        return self._cluster.get_node(name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)


def test_a_signed_pod_no_lock_was_read_for_costs_no_read_of_the_node(
    cluster, nvidia, bound_pod: BindPod
):
    """The lock-free path (PROTOCOL.md §4): a pod served by its signature, the node lock
    read as absent, costs no GET of the node after Allocate; and had the scheduler
    locked for it after all (the node's cache behind), that lock holds nothing once
    its bind-phase is success: the next bind takes the node."""
    bind(cluster, nvidia, bound_pod, "p", 3000)
    assert decode_lock(str(lock(cluster))).owned_by("default", "p")  # taken by the bind
    view = _NodeCacheBehind(cluster)
    admitting = KubeletPod(
        namespace="default", name="p", containers=(KubeletContainer(name="main"),)
    )
    served_by_signature = allocator(view, nvidia, pod_resources=_Listing(admitting))  # type: ignore[arg-type]
    (answer,) = served_by_signature.allocate([[f"{uuid_of(cluster, 'p')}-0"]])
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert ann(cluster, "p")[keys.BIND_PHASE] == "success"
    assert view.node_reads == 0  # nothing read to release
    assert decode_lock(str(lock(cluster))).owned_by("default", "p")  # the unseen lock stays
    taken = acquire_node_lock(
        cluster, NODE, namespace="default", pod="q", now=dt.datetime.now(dt.UTC)
    )
    assert taken is not None and decode_lock(taken).owned_by("default", "q")  # holds nothing


def _refused(cluster, nvidia, name: str, why: str) -> None:
    with pytest.raises(REFUSED):
        allocator(cluster, nvidia).allocate([[f"{uuid_of(cluster, name)}-0"]])
    events = [e for e in cluster.events if e.reason == "AllocationRefused"]
    assert events and why in events[-1].message, [e.message for e in events]
    assert ann(cluster, name)[TO_ALLOCATE] != ";"  # never answered
    assert lock(cluster) is None  # the refused pod's lock does not block the node


def test_a_bigger_slice_written_under_the_lock_is_refused(cluster, nvidia, bound_pod: BindPod):
    """The tenant rewrites its bound pod's lists (both, consistently) to 16000 MiB
    before kubelet admits it: the lock still names the pod, the signature does not
    verify."""
    bind(cluster, nvidia, bound_pod, "p", 3000)
    assert lock(cluster) is not None
    forged = ann(cluster, "p")[ALLOCATED].replace(",3000,", ",16000,")
    tamper(cluster, "p", **{ALLOCATED: forged, TO_ALLOCATE: forged})
    _refused(cluster, nvidia, "p", "does not verify")


def test_a_to_allocate_list_other_than_the_signed_one_is_refused(
    cluster, nvidia, bound_pod: BindPod
):
    bind(cluster, nvidia, bound_pod, "p", 3000)
    forged = ann(cluster, "p")[TO_ALLOCATE].replace(",3000,", ",16000,")
    tamper(cluster, "p", **{TO_ALLOCATE: forged})
    _refused(cluster, nvidia, "p", "is not the signed")


def test_a_replay_of_another_pods_signed_set_is_refused(cluster, nvidia, bound_pod: BindPod):
    """Pod ``big`` (12000 MiB) was served; the tenant's pod ``small`` (2000 MiB, bound
    and holding the lock) takes a copy of big's signed annotations."""
    bind(cluster, nvidia, bound_pod, "big", 12000)
    allocator(cluster, nvidia).allocate([[f"{uuid_of(cluster, 'big')}-0"]])
    signed = {
        k: v
        for k, v in ann(cluster, "big").items()
        if k
        in (
            ALLOCATED,
            keys.VGPU_TIME,
            keys.BIND_TIME,
            keys.DEVICE_ALLOCATED_JSON,
            keys.ALLOCATION_SIGNATURE,
        )
    }
    bind(cluster, nvidia, bound_pod, "small", 2000)
    tamper(cluster, "small", **signed, **{TO_ALLOCATE: signed[ALLOCATED]})
    _refused(cluster, nvidia, "small", "copied from another pod")


def test_a_signature_of_a_key_the_node_lacks_is_refused(cluster, nvidia, bound_pod: BindPod):
    """The tenant signs a forged allocation with a key of its own."""
    bind(cluster, nvidia, bound_pod, "p", 3000, signer=AllocationSigner(generate_private_key_pem()))
    _refused(cluster, nvidia, "p", "which this device plugin does not have")


@pytest.mark.parametrize(
    "value", ["", "v1:garbage", "v1:0123456789abcdef:a:" + "!" * 86, "x" * 10000]
)
def test_a_malformed_signature_is_refused_without_a_crash(
    cluster, nvidia, bound_pod: BindPod, value: str
):
    bind(cluster, nvidia, bound_pod, "p", 3000)
    tamper(cluster, "p", **{keys.ALLOCATION_SIGNATURE: value})
    _refused(cluster, nvidia, "p", keys.ALLOCATION_SIGNATURE)


def test_an_unsigned_pod_is_served_only_under_the_lock(cluster, nvidia, bound_pod: BindPod):
    """HAMi's protocol (HAMi's scheduler, a rolling upgrade): no signature, the node
    lock names it: served, unless the node refuses unsigned allocations."""
    bind(cluster, nvidia, bound_pod, "p", 3000, signer=None)
    assert keys.ALLOCATION_SIGNATURE not in ann(cluster, "p")
    with pytest.raises(HamiError, match="no unsigned allocation"):
        allocator(cluster, nvidia, unsigned=UNSIGNED_REFUSE).allocate(
            [[f"{uuid_of(cluster, 'p')}-0"]]
        )
    (answer,) = allocator(cluster, nvidia).allocate([[f"{uuid_of(cluster, 'p')}-0"]])
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"


def test_a_forged_unsigned_pod_no_lock_names_is_refused(cluster, nvidia, bound_pod: BindPod):
    """Past a webhook outage: a pod created with spec.nodeName and forged allocation
    annotations, no signature, no lock naming it."""
    bind(cluster, nvidia, bound_pod, "real", 3000)
    allocator(cluster, nvidia).allocate([[f"{uuid_of(cluster, 'real')}-0"]])
    real = ann(cluster, "real")
    forged = gpu_pod("forged", ctr("main", gpu=1))
    forged["spec"]["nodeName"] = NODE
    forged["metadata"]["annotations"] = {
        keys.VGPU_NODE: NODE,
        keys.BIND_PHASE: "allocating",
        keys.BIND_TIME: real[keys.BIND_TIME],
        ALLOCATED: real[ALLOCATED].replace(",3000,", ",16000,"),
        TO_ALLOCATE: real[ALLOCATED].replace(",3000,", ",16000,"),
    }
    cluster.add_pod(forged)
    with pytest.raises(REFUSED):
        allocator(cluster, nvidia).allocate([[f"{uuid_of(cluster, 'real')}-1"]])
    assert ann(cluster, "forged")[TO_ALLOCATE] != ";"


def test_a_forged_lock_holder_is_refused_and_the_node_lock_released(
    cluster, nvidia, bound_pod: BindPod
):
    """Even when a lock names the tampered pod (bind-time within its era), the
    signature decides."""
    bind(cluster, nvidia, bound_pod, "p", 3000)
    value = lock(cluster)
    assert value is not None and "p" in value
    tamper(cluster, "p", **{keys.VGPU_TIME: "1"})  # any signed value
    _refused(cluster, nvidia, "p", "does not verify")
    assert encode_lock  # the lock format is HAMi's; it names the pod, not its values
