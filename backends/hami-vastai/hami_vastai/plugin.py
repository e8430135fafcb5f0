"""Hook implementations of the Vastai backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    DeviceRequest,
    MutateResult,
    VendorConfig,
    countshared,
    hookimpl,
)

from . import BACKEND_NAME, VENDOR, fit, inventory
from .names import DEVICE_TYPE, RESOURCES


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Vastai accelerators shared by count; dies packed onto AI cards",
        vendor_device_plugin=(
            "Vastai's device plugin, which writes hami.io/node-va-register and serves Allocate"
        ),
    )


hami_node_devices = hookimpl(inventory.node_devices)


@hookimpl
def hami_parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    # HAMi 2.10 pkg/device/vastai/device.go GenerateResourceRequests: vastaitech.com/va = N devices,
    # each whole in memory with no compute accounted; N of 0 is denied
    return countshared.parse_request(container, config, vendor=VENDOR, resources=RESOURCES)


@hookimpl
def hami_mutate(
    container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    return countshared.mutate(container, config, vendor=VENDOR, resources=RESOURCES)


hami_fit = hookimpl(fit.fit)


hami_score = hookimpl(fit.score)


@hookimpl
def hami_allocate(devices: ContainerDevices) -> ContainerAllocation | None:
    # Vastai's own device plugin serves these containers from the pod's
    # hami.io/Vastai-devices-to-allocate annotation; hami's device plugin adds nothing.
    return ContainerAllocation()
