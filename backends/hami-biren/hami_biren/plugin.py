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
    countshared,
    hookimpl,
)

from . import BACKEND_NAME, VENDOR, fit
from .names import DEVICE_TYPE, RESOURCES


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Biren GPUs shared by count (birentech.com/gpu)",
        vendor_device_plugin=(
            "HAMi's biren-device-plugin (Project-HAMi/biren-device-plugin), which writes hami.io/node-biren-register and serves Allocate"
        ),
    )


@hookimpl
def hami_parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    # HAMi 2.10 pkg/device/biren/device.go GenerateResourceRequests: birentech.com/gpu = N devices,
    # each whole in memory with no compute accounted; N of 0 is denied
    return countshared.parse_request(container, config, vendor=VENDOR, resources=RESOURCES)


@hookimpl
def hami_mutate(
    container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    return countshared.mutate(container, config, vendor=VENDOR, resources=RESOURCES)


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
