"""Hook implementations of the AMD backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

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
    NodeState,
    SubprocessRunner,
    VendorConfig,
    hookimpl,
    live_pod_uids,
)

from . import BACKEND_NAME, allocate, discover, fit, requests
from .fit import RULES
from .names import DEVICE_TYPE, OPTION_DEFAULTS


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        # the core scores with the CU rules (compute counted in CUs, not percent)
        device_types=(attrs.evolve(DEVICE_TYPE, fit_rules=RULES),),
        description="AMD ROCm GPUs shared by memory and compute-unit masks (HSA_CU_MASK)",
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    return discover.discover(config, SubprocessRunner())


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
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult | None:
    return fit.fit(request, node, usage, pod, policy)


@hookimpl
def hami_allocate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    devices: ContainerDevices,
    node_devices: Sequence[DeviceInfo],
    state: NodeState,
) -> ContainerAllocation | None:
    return allocate.allocate(pod, container, devices, node_devices, state)


@hookimpl
def hami_release(pods: Sequence[Mapping[str, Any]], state: NodeState) -> list[str] | None:
    gone = allocate.CuMasks(state).prune(live_pod_uids(pods))
    return [f"the CU ranges of {key}" for key in gone] or None
