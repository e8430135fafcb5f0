"""Hook implementations of the Moore Threads backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    MutateResult,
    NodeInfo,
    PodDevices,
    VendorConfig,
    hookimpl,
)

from . import BACKEND_NAME, VENDOR, allocate, fit, inventory, requests
from .names import DEVICE_TYPE


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Moore Threads GPUs shared as sGPUs (512 MiB memory units, 16 cores)",
    )


@hookimpl
def hami_node_devices(
    node: Mapping[str, Any], vendor: str, config: VendorConfig
) -> list[DeviceInfo] | None:
    return inventory.node_devices(node, config) if vendor == VENDOR else None


@hookimpl
def hami_parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    return requests.parse_request(container, config)


@hookimpl
def hami_mutate(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    return requests.mutate(pod, container, container_path, config)


@hookimpl
def hami_fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
    allocated: Sequence[ContainerDevices],
) -> FitResult | None:
    return fit.fit(request, node, usage, pod, policy, allocated)


@hookimpl
def hami_bind_annotations(
    vendor: str, node: NodeInfo, devices: PodDevices
) -> dict[str, str] | None:
    return fit.bind_annotations(node, devices)


@hookimpl
def hami_allocate(
    devices: ContainerDevices, node_devices: Sequence[DeviceInfo]
) -> ContainerAllocation | None:
    return allocate.allocate(devices, node_devices)
