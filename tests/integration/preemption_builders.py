"""Builders for the preemption tests: pods holding slices, priorities, nominations."""

from __future__ import annotations

from typing import Any

from hami_core.model import ContainerDevice
from hami_core.protocol.devicelist import encode_pod_devices
from tests.builders import container, pod

SCHEDULER = "hami-scheduler"


def holder(
    name: str,
    node: str,
    slices: list[tuple[str, int]],
    *,
    priority: int = 0,
    namespace: str = "low",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A running pod bound to ``node`` by us, one container holding ``(uuid, MiB)`` each."""
    obj = pod(name, container(gpu=len(slices)), namespace=namespace, scheduler_name=SCHEDULER)
    devices = (
        tuple(
            ContainerDevice(uuid=u, vendor="NVIDIA", memory_mib=m, cores_pct=0) for u, m in slices
        ),
    )
    obj["metadata"]["uid"] = f"uid-{namespace}-{name}"
    obj["metadata"]["annotations"] = {
        "hami.io/vgpu-node": node,
        "hami.io/vgpu-devices-allocated": encode_pod_devices(devices),
    }
    if labels:
        obj["metadata"]["labels"] = labels
    obj["spec"]["nodeName"] = node
    obj["spec"]["priority"] = priority
    obj["status"] = {"phase": "Running"}
    return obj


def wanting(
    name: str,
    *,
    gpus: int = 1,
    mib: int,
    priority: int,
    namespace: str = "high",
    nominated: str = "",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pending pod asking ``gpus`` GPUs of ``mib`` each, with ``spec.priority``."""
    obj = pod(
        name,
        container(gpu=gpus, gpumem=mib),
        namespace=namespace,
        scheduler_name=SCHEDULER,
        annotations=annotations,
    )
    obj["metadata"]["uid"] = f"uid-{namespace}-{name}"
    obj["spec"]["priority"] = priority
    obj["status"] = {"phase": "Pending"}
    if nominated:
        obj["status"]["nominatedNodeName"] = nominated
    return obj
