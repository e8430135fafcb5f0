"""Hook implementations of the Iluvatar backend: thin wrappers over the vendor logic."""

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


@hookimpl
def hami_parse_request(container: Mapping[str, Any]) -> DeviceRequest | None:
    return requests.parse_request(container)


@hookimpl
def hami_mutate(container: Mapping[str, Any], container_path: str) -> MutateResult | None:
    return requests.mutate(container, container_path)


@hookimpl
def hami_fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult | None:
    return fit.fit(request, node, usage, pod, policy)


@hookimpl
def hami_allocate(
    devices: ContainerDevices, node_devices: Sequence[DeviceInfo]
) -> ContainerAllocation | None:
    return allocate.allocate(devices, [d for d in node_devices if d.vendor in CHIPS])
