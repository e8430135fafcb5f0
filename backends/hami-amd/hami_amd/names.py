"""AMD resource names, annotation keys and options (HAMi 2.10 ``pkg/device/amd/device.go``,
chart ``device-configmap.yaml`` section ``amd``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_core.backend import (
    COMPUTE_UNITS,
    PERCENT,
    ContainerDevice,
    DeviceTypeInfo,
    InvalidInputError,
    ResourceNames,
    VendorConfig,
    hami_annotation_keys,
    read_quantity,
    resource_names,
    type_filter_keys,
)

from . import VENDOR

DEFAULT_RESOURCES: Final = ResourceNames(
    count="amd.com/gpu", memory="amd.com/gpumem", cores="amd.com/gpucores"
)


def slice_cores(device: ContainerDevice, container: Mapping[str, Any]) -> int:
    """What an allocated GPU slice charges against an ``amd.com/gpucores`` quota: the
    resource's unit is a percentage of the GPU (HAMi's ``MutateAdmission``: 1..100), while
    the device list carries compute units, so the charge is the container's percentage
    (unset: 100, HAMi's default), not the CU count. A value admission would refuse charges
    100 (never less than the container may hold)."""
    try:
        pct = read_quantity(container, DEFAULT_RESOURCES.cores)
    except InvalidInputError:
        return 100
    return 100 if pct is None or not 1 <= pct <= 100 else pct


DEVICE_TYPE: Final = DeviceTypeInfo(
    vendor=VENDOR,
    resources=DEFAULT_RESOURCES,
    **hami_annotation_keys("amd"),
    quota_slice_cores=slice_cores,
    # device lists carry compute units; amd.com/gpucores asks percent
    cores_unit=COMPUTE_UNITS,
    request_cores_unit=PERCENT,
    # what allocate.py sets: the GPUs ROCm shows, the CU mask and the memory limit
    allocate_env=("ROCR_VISIBLE_DEVICES", "HSA_CU_MASK", "HIP_DEVICE_MEMORY_LIMIT"),
)

USE_TYPE, NOUSE_TYPE = type_filter_keys("amd.com", "gpu")
USE_UUID: Final = "amd.com/use-gpu-uuid"
NOUSE_UUID: Final = "amd.com/nouse-gpu-uuid"

OPTION_DEFAULTS: Final[dict[str, Any]] = {
    # The ROCm tools discovery runs.
    "rocmSmiPath": "rocm-smi",
    "rocminfoPath": "rocminfo",
}


def resources(config: VendorConfig) -> ResourceNames:
    """The resource names in force: the defaults with the section's overrides."""
    return resource_names(DEFAULT_RESOURCES, config)
