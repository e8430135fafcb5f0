"""Hook implementations of the Biren backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    MutateResult,
    VendorConfig,
    hookimpl,
)

from . import BACKEND_NAME, fit, requests
from .names import DEVICE_TYPE


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Biren GPUs shared by count (birentech.com/gpu)",
    )


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
def hami_allocate(devices: ContainerDevices) -> ContainerAllocation | None:
    # Biren's own device plugin serves these containers from the pod's
    # hami.io/Biren-devices-to-allocate annotation; hami's device plugin adds nothing.
    return ContainerAllocation()
