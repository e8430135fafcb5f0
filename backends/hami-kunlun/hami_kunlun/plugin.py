"""Hook implementations of the Kunlunxin backend: thin wrappers over the vendor logic."""

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
    NodeInfo,
    NodePolicy,
    VendorConfig,
    hookimpl,
)

from . import admission, allocate, discover, fit, options, requests, score
from .names import DEVICE_TYPE
from .options import OPTION_DEFAULTS


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name="kunlun",
        device_types=(DEVICE_TYPE,),
        description="Kunlunxin XPUs: vXPU slices (1/4, 1/2 card) and whole cards with topology-aware sets",
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_check_config(config: VendorConfig) -> None:
    options.check_config(config)


hami_discover = hookimpl(discover.discover)


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(admission.mutate_container)


@hookimpl
def hami_fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
    config: VendorConfig,
) -> FitResult | None:
    return fit.fit(request, node, usage, pod, policy, config)


@hookimpl
def hami_score(
    usage: Sequence[DeviceUsage], devices: ContainerDevices, policy: NodePolicy
) -> float | None:
    return score.score(usage, devices, policy, DEVICE_TYPE.fit_rules)


@hookimpl
def hami_allocate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    devices: ContainerDevices,
    config: VendorConfig,
    node_devices: Sequence[DeviceInfo],
) -> ContainerAllocation | None:
    indices = {d.uuid: d.index for d in node_devices}
    return allocate.allocate(pod, container, devices, config, indices=indices)
