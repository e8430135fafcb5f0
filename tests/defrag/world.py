"""Small clusters for the planner's tests: nodes of 80 GiB GPUs, running pods pinned to
named GPUs with the annotations our bind writes, pending pods, owners and budgets."""

from __future__ import annotations

from typing import Any

from hami_core.cluster import MemoryCluster
from hami_core.model import ContainerDevice, DeviceInfo, MigPlacement, MigProfile
from hami_core.protocol.devicelist import encode_pod_devices
from tests.builders import gpu, node

MIB = 81920
SPLIT = 10
SCHEDULER = "hami-scheduler"


def gpu_id(node_name: str, index: int) -> str:
    return f"GPU-{node_name}-{index}"


def gpu_node(name: str, gpus: int = 2, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A node of ``gpus`` A100-80GB, split 10."""
    obj = node(
        name,
        [
            gpu(gpu_id(name, i), index=i, memory_mib=MIB, model="NVIDIA A100-SXM4-80GB")
            for i in range(gpus)
        ],
    )
    obj["metadata"]["labels"] = {"kubernetes.io/hostname": name, **(labels or {})}
    return obj


def _places(*pairs: tuple[int, int]) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(start=s, size=n) for s, n in pairs)


#: An A100-SXM4-80GB's MIG profiles as dynamic MIG offers them (NVIDIA's MIG user guide,
#: "Supported MIG Profiles"; memory as the device plugin publishes it).
A100_MIG = (
    MigProfile(name="1g.10gb", memory_mib=9856, cores_pct=15, slice_count=1,
               placements=_places(*((i, 1) for i in range(7)))),
    MigProfile(name="1g.20gb", memory_mib=19968, cores_pct=15, slice_count=1,
               placements=_places((0, 2), (2, 2), (4, 2), (6, 2))),
    MigProfile(name="2g.20gb", memory_mib=19968, cores_pct=29, slice_count=2,
               placements=_places((0, 2), (2, 2), (4, 2))),
    MigProfile(name="3g.40gb", memory_mib=40192, cores_pct=43, slice_count=3,
               placements=_places((0, 4), (4, 4))),
    MigProfile(name="4g.40gb", memory_mib=40192, cores_pct=58, slice_count=4,
               placements=_places((0, 4))),
    MigProfile(name="7g.80gb", memory_mib=81152, cores_pct=100, slice_count=7,
               placements=_places((0, 8))),
)  # fmt: skip


def mig_node(name: str, gpus: int = 2) -> dict[str, Any]:
    """A node of ``gpus`` A100-80GB in dynamic MIG mode (``A100_MIG``, 7 instances at most)."""
    devices = [
        DeviceInfo(
            uuid=gpu_id(name, i), vendor="NVIDIA", model="NVIDIA A100-SXM4-80GB", index=i,
            split_count=7, memory_mib=MIB, cores_pct=100, mode="mig", mig_profiles=A100_MIG,
        )
        for i in range(gpus)
    ]  # fmt: skip
    obj = node(name, devices)
    obj["metadata"]["labels"] = {"kubernetes.io/hostname": name}
    return obj


def owner(kind: str = "ReplicaSet", name: str = "rs") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": name,
        "uid": f"uid-{name}",
        "controller": True,
    }


def _limits(gpus: int, mem: int, cores: int) -> dict[str, str]:
    return {
        "nvidia.com/gpu": str(gpus),
        "nvidia.com/gpumem": str(mem),
        "nvidia.com/gpucores": str(cores),
    }


def pending(
    name: str,
    *,
    gpus: int = 1,
    mem: int = MIB,
    cores: int = 100,
    namespace: str = "default",
    priority: int = 0,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pending pod as the webhook leaves it (schedulerName ours, requests = limits)."""
    limits = _limits(gpus, mem, cores)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "annotations": dict(annotations or {}),
            "labels": {},
        },
        "spec": {
            "schedulerName": SCHEDULER,
            "priority": priority,
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


def running(
    name: str,
    node_name: str,
    gpu_indexes: tuple[int, ...],
    *,
    mem: int,
    cores: int,
    namespace: str = "default",
    priority: int = 0,
    owned_by: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A running pod holding ``mem`` MiB and ``cores`` % of each named GPU of
    ``node_name``, bound by our scheduler; ``owned_by`` its controlling owner (None: a
    bare pod)."""
    pod = pending(
        name,
        gpus=len(gpu_indexes),
        mem=mem,
        cores=cores,
        namespace=namespace,
        priority=priority,
        annotations=annotations,
    )
    alloc = encode_pod_devices(
        (
            tuple(
                ContainerDevice(
                    uuid=gpu_id(node_name, i), vendor="NVIDIA", memory_mib=mem, cores_pct=cores
                )
                for i in gpu_indexes
            ),
        )
    )
    meta = pod["metadata"]
    meta["annotations"].update(
        {
            "hami.io/vgpu-node": node_name,
            "hami.io/vgpu-devices-to-allocate": alloc,
            "hami.io/vgpu-devices-allocated": alloc,
            "hami.io/bind-phase": "success",
        }
    )
    meta["labels"] = {"hami.io/vgpu-node": node_name, **(labels or {})}
    if owned_by is not None:
        meta["ownerReferences"] = [owned_by]
    pod["spec"]["nodeName"] = node_name
    pod["status"] = {"phase": "Running"}
    return pod


def world(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> MemoryCluster:
    c = MemoryCluster()
    for n in nodes:
        c.add_node(n)
    for p in pods:
        c.add_pod(p)
    return c
