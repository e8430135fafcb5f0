"""AMD resource names, annotation keys and options (HAMi 2.10 ``pkg/device/amd/device.go``,
chart ``device-configmap.yaml`` section ``amd``)."""

from __future__ import annotations

from typing import Any, Final

from hami_core.backend import DeviceTypeInfo, ResourceNames, VendorConfig, resource_names

from . import VENDOR

DEFAULT_RESOURCES: Final = ResourceNames(
    count="amd.com/gpu", memory="amd.com/gpumem", cores="amd.com/gpucores"
)

DEVICE_TYPE: Final = DeviceTypeInfo(
    vendor=VENDOR,
    resources=DEFAULT_RESOURCES,
    register_annotation="hami.io/node-amd-register",
    handshake_annotation="hami.io/node-handshake-amd",
    to_allocate_annotation="hami.io/amd-devices-to-allocate",
    allocated_annotation="hami.io/amd-devices-allocated",
)

USE_TYPE: Final = "amd.com/use-gputype"
NOUSE_TYPE: Final = "amd.com/nouse-gputype"
USE_UUID: Final = "amd.com/use-gpu-uuid"
NOUSE_UUID: Final = "amd.com/nouse-gpu-uuid"

OPTION_DEFAULTS: Final[dict[str, Any]] = {
    # Node-local file where the device plugin keeps the CU ranges it handed out.
    "cuMaskStatePath": "/usr/local/vgpu/amd/cu-masks.json",
    # The ROCm tools discovery runs.
    "rocmSmiPath": "rocm-smi",
    "rocminfoPath": "rocminfo",
}


def resources(config: VendorConfig) -> ResourceNames:
    """The resource names in force: the defaults with the section's overrides."""
    return resource_names(DEFAULT_RESOURCES, config)
