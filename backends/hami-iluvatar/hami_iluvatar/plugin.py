"""Hook implementations of the Iluvatar backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.backend import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    DeviceInfo,
    hookimpl,
)

from . import BACKEND_NAME, CHIPS, allocate, fit, requests
from .names import DEVICE_TYPES


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=DEVICE_TYPES,
        description="Iluvatar CoreX GPUs (MR-V100, MR-V50, BI-V150, BI-V100) shared as vGPUs",
    )


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(requests.mutate)


hami_fit = fit.fit.hook()


@hookimpl
def hami_allocate(
    devices: ContainerDevices, node_devices: Sequence[DeviceInfo]
) -> ContainerAllocation | None:
    return allocate.allocate(devices, [d for d in node_devices if d.vendor in CHIPS])
