"""Hook implementations of the MetaX backend: thin wrappers over the vendor logic."""

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
    NodePolicy,
    PodDevices,
    VendorConfig,
    hookimpl,
)

from . import BACKEND_NAME, VENDORS, fit, inventory, requests
from .names import DEVICE_TYPES, OPTION_DEFAULTS


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=DEVICE_TYPES,
        description="MetaX GPUs, whole (topology-scored) or shared as sGPUs with QoS policies",
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_node_devices(node: Mapping[str, Any], vendor: str) -> list[DeviceInfo] | None:
    return inventory.node_devices(node, vendor)


@hookimpl
def hami_parse_request(
    pod: Mapping[str, Any], container: Mapping[str, Any]
) -> DeviceRequest | None:
    return requests.parse_request(pod, container)


@hookimpl
def hami_mutate(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str
) -> MutateResult | None:
    return requests.mutate(pod, container, container_path)


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
def hami_score(
    usage: Sequence[DeviceUsage],
    devices: ContainerDevices,
    policy: NodePolicy,
    config: VendorConfig,
    pod: Mapping[str, Any],
) -> float | None:
    vendors = {u.device.vendor for u in usage}
    if len(vendors) != 1 or not vendors <= set(VENDORS):
        return None
    aware = bool(config.options.get("sgpuTopologyAware", False))
    return fit.score(vendors.pop(), usage, devices, policy, pod=pod, topology_aware_default=aware)


@hookimpl
def hami_bind_annotations(vendor: str, devices: PodDevices) -> dict[str, str] | None:
    return fit.bind_annotations(vendor, devices)


@hookimpl
def hami_allocate(devices: ContainerDevices) -> ContainerAllocation | None:
    # MetaX's own device plugins (gpu-device, sgpu-device) serve these containers from
    # the pod's annotations; hami's device plugin adds nothing.
    return ContainerAllocation()
