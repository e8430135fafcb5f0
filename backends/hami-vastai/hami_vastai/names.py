"""Vastai's names, as HAMi 2.10 ``pkg/device/vastai/device.go`` and the chart value
``vastaiResourceName`` state them: one count resource (``vastaitech.com/va``), node keys
of word ``va`` (``hami.io/node-va-register``), pod device lists of the vendor key
``Vastai``, UUID filters of ``vastaitech.com``, and the ``customInfo`` keys of die mode."""

from __future__ import annotations

from typing import Final

from hami_core.backend import ResourceNames, countshared, uuid_filter_keys

from . import VENDOR

RESOURCES: Final = ResourceNames(count="vastaitech.com/va")
DEVICE_TYPE: Final = countshared.device_type(VENDOR, RESOURCES, "va")
USE_UUID, NOUSE_UUID = uuid_filter_keys("vastaitech.com")
#: ``DeviceInfo.custom`` keys (the inventory's ``customInfo``).
STRATEGY: Final = "DeviceStrategy"
AIC: Final = "AIC"
