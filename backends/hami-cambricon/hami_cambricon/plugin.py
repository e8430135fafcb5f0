"""Hook implementations of the Cambricon backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    BackendInfo,
    DeviceInfo,
    VendorConfig,
    hookimpl,
)

from . import admission, allocate, bind, capacity, discover, fit, requests
from .names import DEVICE_TYPE
from .options import OPTION_DEFAULTS


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name="cambricon",
        device_types=(DEVICE_TYPE,),
        description="Cambricon MLUs: whole cards and sMLU slices (memory in 256 MiB units)",
        option_defaults=OPTION_DEFAULTS,
    )


hami_discover = hookimpl(discover.discover)


@hookimpl
def hami_node_devices(
    node: Mapping[str, Any], vendor: str, config: VendorConfig
) -> list[DeviceInfo] | None:
    return capacity.node_devices(node, config) if vendor == DEVICE_TYPE.vendor else None


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(admission.mutate_container)


hami_fit = fit.fit.hook("config")


hami_bind_annotations = hookimpl(bind.pod_annotations)


hami_allocate = allocate.allocate.hook()
