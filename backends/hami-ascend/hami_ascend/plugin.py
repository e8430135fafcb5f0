"""Hook implementations of the Ascend backend: thin wrappers over the vendor logic."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    BackendInfo,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    NodeInfo,
    PodDevices,
    VendorConfig,
    hookimpl,
)

from . import (
    BACKEND_NAME,
    admission,
    allocate,
    discover,
    fit,
    inventory,
    models,
    requests,
    runtime_info,
)
from .models import MODE_HAMI_CORE, OPTION_DEFAULTS, settings
from .names import DEVICE_TYPES, register_annotation


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=DEVICE_TYPES,
        description="Huawei Ascend NPUs: vNPU templates (Ascend Docker Runtime) or HAMi soft slicing",
        option_defaults=OPTION_DEFAULTS,
    )


hami_check_config = hookimpl(models.parse_settings)


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    cfg = settings(config)
    return discover.discover(cfg, discover.runner_for(cfg))


@hookimpl
def hami_node_devices(
    node: Mapping[str, Any], vendor: str, config: VendorConfig
) -> list[DeviceInfo] | None:
    cfg = settings(config)
    if vendor not in cfg.models:
        return None
    return inventory.node_devices(node, register_annotation(vendor), vendor, cfg)


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
    cfg = settings(config)
    if requests.pod_mode(pod, cfg) == MODE_HAMI_CORE:
        refused = fit.mode_not_fit(usage)
        if refused is not None:
            return refused
    return fit.fit(request, node, usage, pod, policy, cfg.models[request.vendor])


hami_allocate = hookimpl(allocate.allocate)


@hookimpl
def hami_bind_annotations(
    pod: Mapping[str, Any], vendor: str, devices: PodDevices, config: VendorConfig
) -> Mapping[str, str] | None:
    """``huawei.com/<model>``: the chips with their templates, memory and cores, that
    HAMi's Ascend device plugin reads in ``Allocate``; ``predicate-time``."""
    cfg = settings(config)
    model = cfg.models[vendor]
    mode = requests.pod_mode(pod, cfg)
    return {
        runtime_info.annotation_key(model): runtime_info.runtime_info(
            devices, model, hami_core=mode == "hami-core"
        ),
        runtime_info.PREDICATE_TIME: str(int(time.time())),
    }
