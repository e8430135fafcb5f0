"""Hook implementations of the Moore Threads backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    BackendInfo,
    DeviceInfo,
    VendorConfig,
    hookimpl,
)

from . import BACKEND_NAME, VENDOR, allocate, fit, inventory, requests
from .names import DEVICE_TYPE, OPTION_DEFAULTS, memory_per_card


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Moore Threads GPUs shared as sGPUs (512 MiB memory units, 16 cores)",
        vendor_device_plugin=(
            "Moore Threads' device plugin of MT CloudNative Toolkits (capacity mthreads.com/sgpu-core and mthreads.com/sgpu-memory)"
        ),
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_check_config(config: VendorConfig) -> None:
    memory_per_card(config)


@hookimpl
def hami_node_devices(
    node: Mapping[str, Any], vendor: str, config: VendorConfig
) -> list[DeviceInfo] | None:
    return inventory.node_devices(node, config) if vendor == VENDOR else None


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(requests.mutate)


hami_fit = fit.fit.hook("allocated")


hami_bind_annotations = hookimpl(fit.bind_annotations)


hami_allocate = hookimpl(allocate.allocate)
