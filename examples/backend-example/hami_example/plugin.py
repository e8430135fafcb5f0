"""Hook implementations of the EXAMPLE backend (the ``example`` entry point).

Only what is vendor-specific: the resource names and annotation keys (``names``), how a
container asks (``requests``), the pod filters and the env a container gets. The kit
(``hami_core.backend``) does the rest: the shared fit, the binpack/spread score (no
``hami_score`` needed), the config merge and check, the admission write-back. The
manager calls fit and allocate only for this backend's vendor key.
"""

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
    FilterKeys,
    FitResult,
    MutateResult,
    NodeInfo,
    VendorConfig,
    VendorFit,
    hookimpl,
)

from . import BACKEND_NAME, requests
from .names import DEVICE_TYPE, NOUSE_UUID, USE_UUID

#: The kit's fit (checks, policies, hints) under this vendor's UUID filter annotations.
FIT: VendorFit[None] = VendorFit(filters=FilterKeys(use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID))


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Example devices, shared by memory (a template for new backends)",
    )


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    return None  # no driver to ask: a real backend runs its tool with the kit's run_tool


@hookimpl
def hami_parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    return requests.parse_request(container, config)


@hookimpl
def hami_mutate(request: DeviceRequest, config: VendorConfig) -> MutateResult | None:
    return requests.mutation(request, config)


@hookimpl
def hami_fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult | None:
    return FIT(request, node, usage, pod, policy)


@hookimpl
def hami_allocate(devices: ContainerDevices) -> ContainerAllocation | None:
    return ContainerAllocation(
        envs={
            "EXAMPLE_VISIBLE_DEVICES": ",".join(d.uuid for d in devices),
            "EXAMPLE_DEVICE_MEMORY_LIMIT": ",".join(f"{d.memory_mib}m" for d in devices),
        }
    )
