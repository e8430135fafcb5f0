"""Enflame resource names and annotation keys (HAMi 2.10 ``pkg/device/enflame``:
``device.go``, ``gcu.go``, ``config.go``)."""

from __future__ import annotations

from typing import Final

from hami_core.backend import DeviceTypeInfo, ResourceNames, hami_annotation_keys, uuid_filter_keys

from . import DRS, GCU

GCU_RESOURCES: Final = ResourceNames(count="enflame.com/gcu")
#: ``enflame.com/gcu-memory`` is GiB (HAMi reads a value above twice the largest
#: profile's GiB as MiB); quotas on it are written in GiB.
DRS_RESOURCES: Final = ResourceNames(
    count="enflame.com/drs-gcu",
    memory="enflame.com/gcu-memory",
    cores="enflame.com/gcu-core",
    memory_unit_mib=1024,
)

DEVICE_TYPES: Final = (
    DeviceTypeInfo(
        vendor=GCU,
        resources=GCU_RESOURCES,
        **hami_annotation_keys("enflame-gcu"),
    ),
    DeviceTypeInfo(
        vendor=DRS,
        resources=DRS_RESOURCES,
        **hami_annotation_keys("enflame-vgpu"),
    ),
)

#: Node annotation of Enflame's DRS device plugin.
DRS_CAPACITY: Final = "enflame.com/gcu-drs-capacity"
USE_UUID, NOUSE_UUID = uuid_filter_keys("enflame.com")
#: Pod annotations Enflame's DRS device plugin reads (written at bind).
REQUEST_SIZE: Final = "enflame.com/gcu-request-size"
ASSIGNED_ID: Final = "enflame.com/gcu-assigned-id"
ASSIGNED: Final = "enflame.com/gcu-assigned"
ASSIGNED_INDEX: Final = "enflame.com/gcu-assigned-index"
ASSIGNED_MINOR: Final = "enflame.com/gcu-assigned-minor"
ASSIGNED_TIME: Final = "enflame.com/gcu-assigned-time"
ASSIGNED_CONTAINERS: Final = "assigned-containers"
#: ``DeviceRequest.custom`` keys.
SLICE: Final = "drsSlice"
REQUEST_MEMORY: Final = "requestMemory"
