"""Hook implementations of the EXAMPLE backend (the ``example`` entry point).

Each hook answers None for what is not its vendor's: requests, fits, scores and
allocations of other vendors belong to other backends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    DeviceFilters,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    MutateResult,
    NodeInfo,
    NodePolicy,
    VendorConfig,
    fit_devices,
    hookimpl,
    node_score,
)

from . import BACKEND_NAME, VENDOR, requests
from .names import DEVICE_TYPE, NOUSE_UUID, USE_UUID


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Example devices, shared by memory (a template for new backends)",
    )


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    return None  # no driver to ask: a real backend runs its vendor's tool here


@hookimpl
def hami_parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    return requests.parse_request(container, config)


@hookimpl
def hami_mutate(
    container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    return requests.mutate_container(container, container_path, config)


@hookimpl
def hami_fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult | None:
    if request.vendor != VENDOR:
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    filters = DeviceFilters.from_annotations(annotations, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID)
    return fit_devices(request, node, usage, filters, policy)


@hookimpl
def hami_score(
    usage: Sequence[DeviceUsage], devices: ContainerDevices, policy: NodePolicy
) -> float | None:
    if any(u.device.vendor != VENDOR for u in usage):
        return None
    return node_score(usage, devices, policy)


@hookimpl
def hami_allocate(devices: ContainerDevices) -> ContainerAllocation | None:
    if any(d.vendor != VENDOR for d in devices):
        return None
    return ContainerAllocation(
        envs={
            "EXAMPLE_VISIBLE_DEVICES": ",".join(d.uuid for d in devices),
            "EXAMPLE_DEVICE_MEMORY_LIMIT": ",".join(f"{d.memory_mib}m" for d in devices),
        }
    )
