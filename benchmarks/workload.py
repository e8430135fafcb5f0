"""Seeded clusters and pod streams shared by the benchmarks.

Shapes follow the bundled examples (``examples/``): fractional 1-GPU pods (memory in
MiB plus a cores share), exclusive whole cards (``nvidia.com/gpu: 1`` alone, which the
webhook turns into cores 100) and 2-4 GPU pods. Nodes carry 8 A100-80GB each, split 10.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from hami_core.model import ContainerDevice, DeviceInfo, MigProfile
from hami_core.protocol import encode_inventory
from hami_core.protocol.devicelist import encode_pod_devices

GPU_MEMORY_MIB = 81920
SPLIT = 10
SCHEDULER = "hami-scheduler"


def devices(
    node: str, gpus: int = 8, *, mig_profiles: Sequence[MigProfile] = ()
) -> list[DeviceInfo]:
    """The inventory of one fake node: ``gpus`` A100-80GB, split 10, two NUMA nodes; with
    ``mig_profiles``, every GPU in dynamic ``mig`` mode offering them, its split count the
    most placements of one profile (as ``hami simulate``'s loader reads a ``mode: mig``
    GPU)."""
    split = max((len(p.placements) for p in mig_profiles), default=SPLIT)
    return [
        DeviceInfo(
            uuid=f"GPU-{node}-{g}",
            vendor="NVIDIA",
            model="NVIDIA A100-SXM4-80GB",
            index=g,
            split_count=split,
            memory_mib=GPU_MEMORY_MIB,
            cores_pct=100,
            numa=g * 2 // gpus,
            mode="mig" if mig_profiles else "hami-core",
            mig_profiles=tuple(mig_profiles),
        )
        for g in range(gpus)
    ]


def node_object(
    name: str, gpus: int = 8, *, mig_profiles: Sequence[MigProfile] = ()
) -> dict[str, Any]:
    """A Node as the device plugin leaves it: inventory annotation, allocatable count
    (``mig_profiles``: its GPUs in ``mig`` mode, ``devices``)."""
    inventory = devices(name, gpus, mig_profiles=mig_profiles)
    slots = str(sum(d.split_count for d in inventory))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name},
            "annotations": {"hami.io/node-nvidia-register": encode_inventory(inventory)},
        },
        "status": {
            "capacity": {
                "cpu": "64",
                "memory": "512Gi",
                "pods": "250",
                "nvidia.com/gpu": slots,
            },
            "allocatable": {
                "cpu": "64",
                "memory": "512Gi",
                "pods": "250",
                "nvidia.com/gpu": slots,
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_shape(rng: random.Random) -> dict[str, str]:
    """One pod's limits, drawn like the bundled examples' mix."""
    r = rng.random()
    if r < 0.6:  # fractional 1-GPU inference pods
        return {
            "nvidia.com/gpu": "1",
            "nvidia.com/gpumem": str(rng.choice((4000, 8000, 10000, 16000, 20000))),
            "nvidia.com/gpucores": str(rng.choice((10, 20, 25, 30))),
        }
    if r < 0.8:  # whole cards
        return {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}
    return {  # 2-4 GPU training pods, half a card each
        "nvidia.com/gpu": str(rng.choice((2, 4))),
        "nvidia.com/gpumem": "40000",
        "nvidia.com/gpucores": "50",
    }


def pod_object(name: str, limits: dict[str, str], *, namespace: str = "default") -> dict[str, Any]:
    """A pending pod as the webhook leaves it (schedulerName ours, requests = limits)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": dict(limits), "requests": dict(limits)},
                }
            ],
        },
        "status": {"phase": "Pending"},
    }


def preload(
    node_names: list[str], *, fill: float, seed: int, gpus: int = 8
) -> list[dict[str, Any]]:
    """Bound, running pods that fill about ``fill`` of every node's memory and compute,
    with the allocation annotations our scheduler writes (one 1-GPU pod per slice)."""
    rng = random.Random(seed)
    pods = []
    for node in node_names:
        for g, dev in enumerate(devices(node, gpus)):
            mem_left = int(GPU_MEMORY_MIB * fill)
            cores_left = int(100 * fill)
            i = 0
            while mem_left >= 4000 and cores_left >= 10:
                mem = min(mem_left, rng.choice((4000, 8000, 16000)))
                cores = min(cores_left, rng.choice((10, 20)))
                limits = {
                    "nvidia.com/gpu": "1",
                    "nvidia.com/gpumem": str(mem),
                    "nvidia.com/gpucores": str(cores),
                }
                pod = pod_object(f"pre-{node}-{g}-{i}", limits)
                alloc = encode_pod_devices(
                    (
                        (
                            ContainerDevice(
                                uuid=dev.uuid, vendor="NVIDIA", memory_mib=mem, cores_pct=cores
                            ),
                        ),
                    )
                )
                pod["metadata"]["annotations"] = {
                    "hami.io/vgpu-node": node,
                    "hami.io/vgpu-devices-to-allocate": alloc,
                    "hami.io/vgpu-devices-allocated": alloc,
                    "hami.io/bind-phase": "success",
                }
                pod["metadata"]["labels"] = {"hami.io/vgpu-node": node}
                pod["spec"]["nodeName"] = node
                pod["status"] = {"phase": "Running"}
                pods.append(pod)
                mem_left -= mem
                cores_left -= cores
                i += 1
    return pods


def bound_copy(
    pod: dict[str, Any], node: str, annotations: dict[str, str | None], resource_version: int
) -> dict[str, Any]:
    """``pod`` as the watch delivers it once bound to ``node``: the scheduler's allocation
    ``annotations`` (None values dropped, as a merge patch removes them) and
    ``spec.nodeName`` set, at ``resource_version``."""
    bound = json.loads(json.dumps(pod))
    bound["metadata"]["annotations"] = {k: v for k, v in annotations.items() if v is not None}
    bound["spec"]["nodeName"] = node
    bound["metadata"]["resourceVersion"] = str(resource_version)
    return bound
