"""A pod asking two vendors is done when both are (issue 24 item 1, HAMi#2335, HAMi#2105).

Each vendor's device plugin answers kubelet for its own resource and empties its own
``*-devices-to-allocate``; ``hami.io/bind-phase: success`` and the node lock's release
come only once no vendor the pod asks for has a container waiting. Pods are bound by the
real scheduler; the node carries NVIDIA GPUs and Kunlunxin XPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import hami_kunlun.plugin
import hami_nvidia.plugin
import pytest

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import Allocator
from hami_core.deviceplugin.done import vendors_waiting
from hami_core.model import DeviceInfo
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol import encode_inventory
from hami_core.protocol.config import parse_config
from hami_core.protocol.devicelist import decode_pod_devices

from .conftest import BindPod, gpu_node, gpu_uuid

NODE = "node-mixed"
GPUS = [gpu_uuid(0), gpu_uuid(1)]
XPUS = ["XPU-P800-SN01", "XPU-P800-SN02"]
GPU_IDS = frozenset(f"{u}-{i}" for u in GPUS for i in range(10))
XPU_IDS = frozenset(f"{u}-{i}" for u in XPUS for i in range(4))
NVIDIA_LIST = "hami.io/vgpu-devices-to-allocate"
XPU_LIST = "hami.io/xpu-devices-to-allocate"


@pytest.fixture
def manager(tmp_path: Path) -> BackendManager:
    base = BackendManager.from_plugins({"nvidia": hami_nvidia.plugin, "kunlun": hami_kunlun.plugin})
    config = parse_config(
        {"version": "v1", "nvidia": {"hookPath": str(tmp_path / "vgpu")}}, backends=base.infos
    )
    return base.with_config(config)


@pytest.fixture
def cluster() -> MemoryCluster:
    node = gpu_node(NODE, GPUS)
    xpus = [
        DeviceInfo(
            uuid=u,
            vendor="XPU",
            model="P800",
            index=i,
            split_count=4,
            memory_mib=98304,
            cores_pct=100,
        )
        for i, u in enumerate(XPUS)
    ]
    node["metadata"]["annotations"]["hami.io/node-register-xpu"] = encode_inventory(xpus)
    node["status"]["allocatable"]["kunlunxin.com/vxpu"] = "8"
    c = MemoryCluster()
    c.add_node(node)
    return c


def container(name: str, *, gpu: bool = False, xpu: bool = False) -> dict[str, Any]:
    limits: dict[str, str] = {}
    if gpu:
        limits |= {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}
    if xpu:
        limits |= {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "24576"}
    out: dict[str, Any] = {"name": name, "image": "busybox"}
    if limits:
        out["resources"] = {"limits": limits}
    return out


def pod(name: str, *containers: dict[str, Any], annotations: dict[str, str] | None = None):
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": list(containers), "schedulerName": "hami-scheduler"},
    }


def allocators(
    cluster: MemoryCluster,
    manager: BackendManager,
    *,
    after_answer: Callable[[Callable[[], None]], None] | None = None,
) -> dict[str, Allocator]:
    """One allocator per vendor, as the two device plugins of the node."""
    return {
        vendor: Allocator(
            cluster,
            manager,
            vendor=vendor,
            node=NODE,
            known_ids=lambda ids=ids: ids,  # type: ignore[misc]
            after_answer=after_answer,
        )
        for vendor, ids in (("NVIDIA", GPU_IDS), ("XPU", XPU_IDS))
    }


def ann(cluster: MemoryCluster, name: str) -> dict[str, str]:
    return cluster.get_pod("default", name)["metadata"].get("annotations") or {}


def lock(cluster: MemoryCluster) -> str | None:
    return (cluster.get_node(NODE)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def ids_for(cluster: MemoryCluster, name: str, key: str, position: int) -> list[str]:
    """kubelet's IDs for the container at ``position``: one ID on each assigned device."""
    entries = decode_pod_devices(ann(cluster, name)[key.replace("to-allocate", "allocated")])
    return [f"{d.uuid}-0" for d in entries[position]]


VENDOR_LIST = {"NVIDIA": NVIDIA_LIST, "XPU": XPU_LIST}


def kubelet_calls(shape: str, order: tuple[str, str]) -> list[tuple[str, int]]:
    """``(vendor, container position)`` in the order kubelet asks."""
    if shape == "two containers":  # HAMi#2335
        positions = {"NVIDIA": 0, "XPU": 1}
        return sorted(((v, positions[v]) for v in order), key=lambda c: c[1])
    return [(v, 0) for v in order]  # HAMi#2105: one container, both resources


def make_pod(shape: str, name: str) -> dict[str, Any]:
    if shape == "two containers":
        return pod(name, container("cuda", gpu=True), container("xpu", xpu=True))
    return pod(name, container("both", gpu=True, xpu=True))


@pytest.mark.parametrize("shape", ["two containers", "one container"])
@pytest.mark.parametrize("order", [("NVIDIA", "XPU"), ("XPU", "NVIDIA")])
def test_the_pod_is_done_only_when_every_vendor_is(
    cluster, manager, bound_pod: BindPod, shape, order
):
    bound_pod(cluster, manager, make_pod(shape, "p"), NODE)
    plugins = allocators(cluster, manager)
    calls = kubelet_calls(shape, order)
    if shape == "two containers":
        order = (calls[0][0], calls[1][0])

    (vendor, position) = calls[0]
    (first,) = plugins[vendor].allocate([ids_for(cluster, "p", VENDOR_LIST[vendor], position)])
    assert first.envs  # answered
    # The other vendor still waits: the pod is not done, the lock still names it.
    assert ann(cluster, "p")[keys.BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
    assert lock(cluster) is not None and lock(cluster).endswith(",default,p")

    (vendor, position) = calls[1]
    (second,) = plugins[vendor].allocate([ids_for(cluster, "p", VENDOR_LIST[vendor], position)])
    assert second.envs
    after = ann(cluster, "p")
    assert after[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert not any(decode_pod_devices(after[NVIDIA_LIST]))
    assert not any(decode_pod_devices(after[XPU_LIST]))
    assert lock(cluster) is None


@pytest.mark.parametrize("commits", ["in order", "reversed"])
def test_two_device_plugins_answering_before_either_write_lands(
    cluster, manager, bound_pod: BindPod, commits
):
    """The device plugin writes after answering (``after_answer``): the second vendor
    answers while the first one's progress is not written yet, and reads the pod as it
    was. Whichever write comes last still finishes the pod."""
    bound_pod(cluster, manager, make_pod("one container", "p"), NODE)
    queued: list[Callable[[], None]] = []
    plugins = allocators(cluster, manager, after_answer=queued.append)
    plugins["NVIDIA"].allocate([ids_for(cluster, "p", NVIDIA_LIST, 0)])
    plugins["XPU"].allocate([ids_for(cluster, "p", XPU_LIST, 0)])
    assert len(queued) == 2
    assert ann(cluster, "p")[keys.BIND_PHASE] == keys.BIND_PHASE_ALLOCATING  # nothing written

    for write in queued if commits == "in order" else queued[::-1]:
        write()

    assert ann(cluster, "p")[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert lock(cluster) is None


def test_simulate_kubelet_allocates_both_vendors(cluster, manager, bound_pod: BindPod):
    """``hami simulate``'s kubelet drives the same allocators: every call is answered."""
    from hami_core.simulate.kubelet import allocate_pod

    bound = bound_pod(cluster, manager, make_pod("two containers", "p"), NODE)
    node = cluster.get_node(NODE)
    from hami_core.facts.nodes import read_node
    from hami_core.scheduling.scheduler import utcnow

    info = read_node(node, manager.device_types(), now=utcnow())
    answers = allocate_pod(
        cluster, manager, bound, node=NODE, vendors=["NVIDIA", "XPU"], inventory=info.devices
    )
    assert [(c, v) for c, v, _ in answers] == [("cuda", "NVIDIA"), ("xpu", "XPU")]
    assert ann(cluster, "p")[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert lock(cluster) is None


def test_an_entry_nothing_will_consume_never_holds_the_pod(cluster, manager, bound_pod: BindPod):
    """The tenant who tries to keep the node locked: its pod (the webhook bypassed)
    carries a Kunlunxin list of its own for a container that asks no XPU. kubelet never
    asks the XPU plugin for it, so it is not waiting: the NVIDIA answer finishes the pod
    and frees the lock."""
    bogus = {XPU_LIST: f"{XPUS[0]},XPU,24576,25:;", "hami.io/xpu-devices-allocated": ""}
    bound_pod(cluster, manager, pod("p", container("cuda", gpu=True), annotations=bogus), NODE)
    assert ann(cluster, "p")[XPU_LIST] == bogus[XPU_LIST]  # the scheduler left it alone

    (answer,) = allocators(cluster, manager)["NVIDIA"].allocate(
        [ids_for(cluster, "p", NVIDIA_LIST, 0)]
    )
    assert answer.envs
    assert ann(cluster, "p")[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert lock(cluster) is None


def test_vendors_waiting_reads_what_kubelet_will_still_ask(cluster, manager, bound_pod):
    bound = bound_pod(cluster, manager, make_pod("two containers", "p"), NODE)
    assert vendors_waiting(bound, manager) == ("NVIDIA", "XPU")
    assert vendors_waiting(bound, manager, besides="XPU") == ("NVIDIA",)
    # An unreadable list: no device plugin can serve it, it holds nothing.
    broken = {**bound, "metadata": {**bound["metadata"], "annotations": {XPU_LIST: "x"}}}
    assert vendors_waiting(broken, manager) == ()
