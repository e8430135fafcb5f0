"""Hook implementations of the MetaX backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    DeviceUsage,
    NodePolicy,
    VendorConfig,
    hookimpl,
)

from . import BACKEND_NAME, VENDORS, fit, inventory, requests
from .names import DEVICE_TYPES, OPTION_DEFAULTS


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=DEVICE_TYPES,
        description="MetaX GPUs, whole (topology-scored) or shared as sGPUs with QoS policies",
        vendor_device_plugin=(
            "MetaX's gpu-device and sgpu-device plugins (capacity metax-tech.com/gpu, annotation metax-tech.com/node-gpu-devices)"
        ),
        option_defaults=OPTION_DEFAULTS,
    )


hami_node_devices = hookimpl(inventory.node_devices)


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(requests.mutate)


hami_fit = fit.fit.hook("allocated")


@hookimpl
def hami_score(
    usage: Sequence[DeviceUsage],
    devices: ContainerDevices,
    policy: NodePolicy,
    config: VendorConfig,
    pod: Mapping[str, Any],
) -> float | None:
    vendors = {u.device.vendor for u in usage}
    if len(vendors) != 1 or not vendors <= set(VENDORS):
        return None
    aware = bool(config.options.get("sgpuTopologyAware", False))
    return fit.score(vendors.pop(), usage, devices, policy, pod=pod, topology_aware_default=aware)


hami_bind_annotations = hookimpl(fit.bind_annotations)


@hookimpl
def hami_allocate(devices: ContainerDevices) -> ContainerAllocation | None:
    # MetaX's own device plugins (gpu-device, sgpu-device) serve these containers from
    # the pod's annotations; hami's device plugin adds nothing.
    return ContainerAllocation()
