"""Builders shared by the vendor backends' tests: managers with chosen backends, nodes,
pods and pipelines on the embedded cluster."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from hami_core.cluster import MemoryCluster
from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config
from hami_core.simulate.pipeline import Pipeline


def only(*names: str, config: dict[str, object] | None = None) -> BackendManager:
    """A manager with only the named installed backends."""
    installed = {ep.name for ep in entry_points(group="hami.backends")}
    base = BackendManager.from_entry_points(disabled=sorted(installed - set(names)))
    if config is None:
        return base
    return base.with_config(parse_config({"version": "v1", **config}, backends=base.infos))


def node(
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    capacity: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A v1.Node with the given annotations, labels and capacity (= allocatable)."""
    meta: dict[str, Any] = {"name": name, "annotations": dict(annotations or {})}
    if labels:
        meta["labels"] = dict(labels)
    cap = dict(capacity or {})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "status": {"capacity": cap, "allocatable": dict(cap)},
    }


def pod(
    name: str,
    limits: dict[str, str] | None = None,
    *,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A v1.Pod with one container ``main`` asking ``limits`` (or the given containers)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = dict(annotations)
    if containers is None:
        containers = [
            {"name": "main", "image": "busybox", "resources": {"limits": dict(limits or {})}}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers}}


def pipeline(
    *nodes: dict[str, Any], backends: tuple[str, ...], config: dict[str, object] | None = None
) -> Pipeline:
    """Webhook -> filter -> bind -> allocate on an embedded cluster holding ``nodes``."""
    cluster = MemoryCluster()
    for n in nodes:
        cluster.add_node(n)
    return Pipeline(cluster, only(*backends, config=config))


def quota(name: str, hard: dict[str, str], namespace: str = "default") -> dict[str, Any]:
    """A v1.ResourceQuota."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": dict(hard)},
    }


def usage_of(vendor: str, device: Any, *slices: tuple[int, int]) -> tuple[int, int, int]:
    """``(used count, used MiB, used percent)`` of ``device`` (a ``DeviceInfo`` of
    ``vendor``) as the scheduler computes it from live pods our scheduler bound to its
    node, one pod per ``(MiB, percent)`` slice: HAMi's ``AddResourceUsage`` summed over
    the pods (``pkg/device/<vendor>/device_test.go::TestDevices_AddResourceUsage``)."""
    from hami_core.facts.usage import node_usage
    from hami_core.model import ContainerDevice, NodeInfo
    from hami_core.protocol import encode_pod_devices

    manager = BackendManager.from_entry_points(disabled=[])
    dtype = next(t for t in manager.device_types() if t.vendor == vendor)
    info = NodeInfo(name="n", devices=(device,))
    pods = []
    for i, (memory, cores) in enumerate(slices):
        entry = ContainerDevice(uuid=device.uuid, vendor=vendor, memory_mib=memory, cores_pct=cores)
        p = pod(f"p{i}", {dtype.resources.count: "1"})
        p["metadata"]["annotations"] = {dtype.allocated_annotation: encode_pod_devices(((entry,),))}
        p["spec"].update(schedulerName="hami-scheduler", nodeName="n")
        p["status"] = {"phase": "Running"}
        pods.append(p)
    u = node_usage(info, pods, manager.device_types(), scheduler_name="hami-scheduler")[device.uuid]
    return (u.used_count, u.used_memory_mib, u.used_cores_pct)
