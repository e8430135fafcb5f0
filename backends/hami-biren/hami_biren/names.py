"""Biren resource name and annotation keys (HAMi 2.10 ``pkg/device/biren/device.go``:
``RegisterAnnos``, ``HandshakeAnnos``, ``hami.io/<commonWord>-devices-to-allocate`` with
commonWord ``Biren``, UUID filters; chart value ``birenResourceName``)."""

from __future__ import annotations

from typing import Final

from hami_core.backend import NOT_ACCOUNTED, DeviceTypeInfo, ResourceNames

from . import VENDOR

RESOURCES: Final = ResourceNames(count="birentech.com/gpu")

DEVICE_TYPE: Final = DeviceTypeInfo(
    vendor=VENDOR,
    resources=RESOURCES,
    register_annotation="hami.io/node-biren-register",
    handshake_annotation="hami.io/node-handshake-biren",
    to_allocate_annotation=f"hami.io/{VENDOR}-devices-to-allocate",
    allocated_annotation=f"hami.io/{VENDOR}-devices-allocated",
    cores_unit=NOT_ACCOUNTED,  # shared by count: no compute figure (HAMi devcore is for score only)
)

USE_UUID: Final = "birentech.com/use-gpuuuid"
NOUSE_UUID: Final = "birentech.com/nouse-gpuuuid"
