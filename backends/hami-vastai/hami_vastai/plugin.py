"""Hook implementations of the Vastai backend: thin wrappers over the vendor logic."""

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
    VendorConfig,
    hookimpl,
)

from . import BACKEND_NAME, fit, inventory, requests
from .names import DEVICE_TYPE


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Vastai accelerators shared by count; dies packed onto AI cards",
    )


@hookimpl
def hami_node_devices(node: Mapping[str, Any], vendor: str) -> list[DeviceInfo] | None:
    return inventory.node_devices(node)


@hookimpl
def hami_parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    return requests.parse_request(container, config)


@hookimpl
def hami_mutate(
    container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    return requests.mutate(container, container_path, config)


@hookimpl
def hami_fit(
    request: DeviceRequest,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult | None:
    return fit.fit(request, usage, pod, policy)


@hookimpl
def hami_score(usage: Sequence[DeviceUsage], devices: ContainerDevices) -> float | None:
    return fit.score(usage, devices)


@hookimpl
def hami_allocate(devices: ContainerDevices) -> ContainerAllocation | None:
    # Vastai's own device plugin serves these containers from the pod's
    # hami.io/Vastai-devices-to-allocate annotation; hami's device plugin adds nothing.
    return ContainerAllocation()
