"""Builders of Kubernetes objects for tests (the JSON form the API server serves)."""

from __future__ import annotations

from typing import Any

from hami_core.cluster import MemoryCluster
from hami_core.model import DeviceInfo
from hami_core.plugin import BackendManager
from hami_core.protocol import encode_inventory
from hami_core.protocol.config import parse_config
from hami_core.simulate.pipeline import Pipeline


def gpu(
    uuid: str,
    *,
    index: int = 0,
    memory_mib: int = 16384,
    model: str = "NVIDIA A100-PCIE-16GB",
    split: int = 10,
    cores: int = 100,
    numa: int = 0,
    healthy: bool = True,
    vendor: str = "NVIDIA",
) -> DeviceInfo:
    """A device of the inventory (an NVIDIA GPU unless ``vendor`` says otherwise)."""
    return DeviceInfo(
        uuid=uuid,
        vendor=vendor,
        model=model,
        index=index,
        split_count=split,
        memory_mib=memory_mib,
        cores_pct=cores,
        numa=numa,
        healthy=healthy,
    )


def node(
    name: str, gpus: list[DeviceInfo], *, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    ann = {"hami.io/node-nvidia-register": encode_inventory(gpus)}
    ann.update(annotations or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": ann},
        "status": {"allocatable": {"nvidia.com/gpu": str(10 * len(gpus))}},
    }


def container(name: str = "main", **resources: Any) -> dict[str, Any]:
    """``container("c", gpu=1, gpumem=4000, gpucores=30)``; keys map to ``nvidia.com/<key>``
    (``gpumem_percentage`` -> ``gpumem-percentage``)."""
    limits = {f"nvidia.com/{k.replace('_', '-')}": str(v) for k, v in resources.items()}
    out: dict[str, Any] = {"name": name, "image": "busybox"}
    if limits:
        out["resources"] = {"limits": limits}
    return out


def pod(
    name: str,
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    scheduler_name: str | None = None,
) -> dict[str, Any]:
    """A Pod; ``scheduler_name`` sets ``spec.schedulerName`` (the webhook sets ours)."""
    spec: dict[str, Any] = {"containers": list(containers) or [container()]}
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    if init:
        spec["initContainers"] = init
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def cluster(*nodes: dict[str, Any]) -> MemoryCluster:
    c = MemoryCluster()
    for n in nodes:
        c.add_node(n)
    return c


def manager(config: dict[str, Any] | None = None) -> BackendManager:
    base = BackendManager.from_entry_points(disabled=[])
    if config is None:
        return base
    return base.with_config(parse_config({"version": "v1", **config}, backends=base.infos))


def pipeline(*nodes: dict[str, Any], config: dict[str, Any] | None = None, **kw: Any) -> Pipeline:
    return Pipeline(cluster(*nodes), manager(config), **kw)
