"""``hami simulate`` answers Allocate through the device plugin's real ``Allocator``,
called container by container as kubelet calls it (``hami_core.simulate.kubelet``)."""

from __future__ import annotations

import os

from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.simulate.loader import parse_cluster
from hami_core.simulate.pipeline import Pipeline

from .helpers import manager, simple_cluster

A100 = {"model": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920, "count": 2}


def ctr(name: str, **limits: int) -> dict:
    res = {f"nvidia.com/{k}": v for k, v in limits.items()}
    return {"name": name, "image": "busybox", "resources": {"limits": res} if res else {}}


def pod_with_init() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "initContainers": [ctr("warm", gpu=1, gpumem=1000)],
            "containers": [ctr("train", gpu=2, gpumem=3000), ctr("sidecar")],
        },
    }


def submit(pod: dict, hook_path: str = ""):
    mgr = manager({"nvidia": {"hookPath": hook_path}} if hook_path else None)
    memory = parse_cluster([simple_cluster(("n1", [A100]))], source="t", manager=mgr).to_memory()
    pipeline = Pipeline(memory, mgr)
    return pipeline.submit(pod), memory


def test_every_device_container_is_answered_by_the_allocator_in_kubelets_order():
    out, memory = submit(pod_with_init())
    assert out.node == "n1" and not out.error, out
    stored = memory.get_pod("default", "p")
    ann = stored["metadata"]["annotations"]
    # The Allocator's own records: each answered entry emptied, phase success, lock
    # gone (building answers from the annotation alone writes none of these).
    assert [list(e) for e in decode_pod_devices(ann["hami.io/vgpu-devices-to-allocate"])] == [
        [],
        [],
        [],
    ]
    assert ann[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    node_ann = memory.get_node("n1")["metadata"].get("annotations") or {}
    assert keys.NODE_LOCK not in node_ann
    # kubelet asks no device plugin for a container that requests no device.
    assert set(out.allocations) == {"warm", "train"}
    assert out.allocations["warm"].envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    train = out.allocations["train"]
    assert train.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert train.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "3000m"
    placed = [d.uuid for d in out.allocation.devices["NVIDIA"][1]]
    assert train.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(placed)


def test_the_simulator_writes_nothing_on_the_host(tmp_path):
    # The node's host directory is a fresh one: whatever the answers name must stay absent.
    hook = tmp_path / "vgpu"
    out, _ = submit(pod_with_init(), hook_path=str(hook))
    files = [path for a in out.allocations.values() for path in a.files]
    dirs = [m.host_path for a in out.allocations.values() for m in a.mounts if not m.read_only]
    assert files and dirs  # the answers name the limits file and the shared region
    assert all(p.startswith(str(hook)) for p in files + dirs)
    assert not hook.exists() and not any(os.path.exists(p) for p in files + dirs)


def test_kubelet_hands_an_init_containers_device_ids_to_the_containers_after_it():
    # One GPU advertised once (split count 1): the init container and the app container
    # both run on it, so kubelet must pass the init container's ID on (devicesToReuse);
    # the Allocator refuses an ID it does not advertise and any pod but the lock's.
    mgr = manager()
    one = {"model": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920, "count": 1, "splitCount": 1}
    memory = parse_cluster([simple_cluster(("n1", [one]))], source="t", manager=mgr).to_memory()
    pod = pod_with_init()
    pod["spec"]["containers"] = [ctr("train", gpu=1, gpumem=3000)]
    out = Pipeline(memory, mgr).submit(pod)
    assert out.node == "n1" and not out.error, out
    assert set(out.allocations) == {"warm", "train"}
    assert (
        out.allocations["warm"].envs["NVIDIA_VISIBLE_DEVICES"]
        == (out.allocations["train"].envs["NVIDIA_VISIBLE_DEVICES"])
    )
    ann = memory.get_pod("default", "p")["metadata"]["annotations"]
    assert ann[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
