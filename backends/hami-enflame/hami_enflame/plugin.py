"""Hook implementations of the Enflame backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    BackendInfo,
    ContainerAllocation,
    ContainerDevices,
    NodeInfo,
    PodDevices,
    hookimpl,
)

from . import BACKEND_NAME, DRS, fit, inventory, requests
from .names import DEVICE_TYPES


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=DEVICE_TYPES,
        description="Enflame GCUs, whole or cut into DRS slices by the node's profiles",
        vendor_device_plugin=(
            "Enflame's GCU device plugin (whole GCUs, capacity enflame.com/gcu) and its gcushare device plugin (DRS GCUs, enflame.com/gcu-drs-capacity)"
        ),
    )


hami_node_devices = hookimpl(inventory.node_devices)


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(requests.mutate)


hami_fit = fit.fit.hook()


@hookimpl
def hami_bind_annotations(
    pod: Mapping[str, Any], vendor: str, node: NodeInfo, devices: PodDevices
) -> dict[str, str] | None:
    if vendor != DRS:
        return None
    return fit.bind_annotations(pod, node, devices)


@hookimpl
def hami_allocate(devices: ContainerDevices) -> ContainerAllocation | None:
    # Enflame's own device plugins (gcu, DRS) serve these containers from the pod's
    # annotations; hami's device plugin adds nothing.
    return ContainerAllocation()
