"""Vastai resource name and annotation keys (HAMi 2.10 ``pkg/device/vastai/device.go``:
``RegisterAnnos``, ``HandshakeAnnos``, ``hami.io/<commonWord>-devices-to-allocate`` with
commonWord ``Vastai``, UUID filters; chart value ``vastaiResourceName``)."""

from __future__ import annotations

from typing import Final

from hami_core.backend import NOT_ACCOUNTED, DeviceTypeInfo, ResourceNames

from . import VENDOR

RESOURCES: Final = ResourceNames(count="vastaitech.com/va")

DEVICE_TYPE: Final = DeviceTypeInfo(
    vendor=VENDOR,
    resources=RESOURCES,
    register_annotation="hami.io/node-va-register",
    handshake_annotation="hami.io/node-handshake-va",
    to_allocate_annotation=f"hami.io/{VENDOR}-devices-to-allocate",
    allocated_annotation=f"hami.io/{VENDOR}-devices-allocated",
    cores_unit=NOT_ACCOUNTED,  # shared by count: no compute figure (HAMi devcore is for score only)
)

USE_UUID: Final = "vastaitech.com/use-gpuuuid"
NOUSE_UUID: Final = "vastaitech.com/nouse-gpuuuid"
#: ``DeviceInfo.custom`` keys (the inventory's ``customInfo``).
STRATEGY: Final = "DeviceStrategy"
AIC: Final = "AIC"
