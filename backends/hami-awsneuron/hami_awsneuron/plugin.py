"""Hook implementations of the AWS Neuron backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    BackendInfo,
    DeviceInfo,
    SubprocessRunner,
    VendorConfig,
    hookimpl,
)

from . import BACKEND_NAME, VENDOR, allocate, bind, discover, fit, inventory, requests
from .names import DEVICE_TYPE, OPTION_DEFAULTS


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="AWS Inferentia / Trainium devices and NeuronCores (contiguous ranges)",
        vendor_device_plugin=(
            "AWS's Neuron device plugin (capacity aws.amazon.com/neuron and aws.amazon.com/neuroncore)"
        ),
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_node_devices(node: Mapping[str, Any], vendor: str) -> list[DeviceInfo] | None:
    return inventory.node_devices(node) if vendor == VENDOR else None


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    return discover.discover(config, SubprocessRunner())


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(requests.mutate)


hami_fit = hookimpl(fit.fit)


hami_bind_annotations = hookimpl(bind.pod_annotations)


hami_allocate = hookimpl(allocate.allocate)
