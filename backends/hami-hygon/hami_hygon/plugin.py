"""Hook implementations of the Hygon DCU backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
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
    NodeState,
    VendorConfig,
    hookimpl,
    live_pod_uids,
)

from . import BACKEND_NAME, admission, allocate, discover, fit, requests
from .names import DEVICE_TYPE, OPTION_DEFAULTS
from .vdev import VdevAllocator


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Hygon DCUs shared as virtual DCUs (vdev configuration, hyhal runtime)",
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    return discover.discover(config, discover.runner_for(config))


@hookimpl
def hami_parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    return requests.parse_request(container, config)


@hookimpl
def hami_mutate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    config: VendorConfig,
    request: DeviceRequest,
) -> MutateResult | None:
    return admission.mutate_container(pod, container, config, request)


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
    config: VendorConfig,
    node_devices: Sequence[DeviceInfo],
    state: NodeState,
) -> ContainerAllocation | None:
    return allocate.allocate(pod, container, devices, config, node_devices, state)


@hookimpl
def hami_release(
    pods: Sequence[Mapping[str, Any]], config: VendorConfig, state: NodeState
) -> list[str] | None:
    vdevs = VdevAllocator(Path(str(config.options["vdevPath"])), state)
    return [f"the vDCU of {key}" for key in vdevs.prune(live_pod_uids(pods))] or None
