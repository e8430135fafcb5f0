"""Hook implementations of the AWS Neuron backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    MutateResult,
    NodeInfo,
    PodDevices,
    SubprocessRunner,
    VendorConfig,
    hookimpl,
)

from . import BACKEND_NAME, VENDOR, allocate, bind, discover, fit, inventory, requests
from .names import DEVICE_TYPE, OPTION_DEFAULTS


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="AWS Inferentia / Trainium devices and NeuronCores (contiguous ranges)",
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_node_devices(node: Mapping[str, Any], vendor: str) -> list[DeviceInfo] | None:
    return inventory.node_devices(node) if vendor == VENDOR else None


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    return discover.discover(config, SubprocessRunner())


@hookimpl
def hami_parse_request(container: Mapping[str, Any]) -> DeviceRequest | None:
    return requests.parse_request(container)


@hookimpl
def hami_mutate(container: Mapping[str, Any], container_path: str) -> MutateResult | None:
    return requests.mutate(container, container_path)


@hookimpl
def hami_fit(
    request: DeviceRequest, node: NodeInfo, usage: Sequence[DeviceUsage], pod: Mapping[str, Any]
) -> FitResult | None:
    return fit.fit(request, node, usage, pod)


@hookimpl
def hami_bind_annotations(
    pod: Mapping[str, Any], vendor: str, node: NodeInfo, devices: PodDevices
) -> dict[str, str] | None:
    return bind.pod_annotations(pod, node, devices)


@hookimpl
def hami_allocate(
    devices: ContainerDevices, node_devices: Sequence[DeviceInfo]
) -> ContainerAllocation | None:
    return allocate.allocate(devices, node_devices)
