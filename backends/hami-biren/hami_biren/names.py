"""Biren's names (HAMi 2.10 ``pkg/device/biren/device.go``, chart value
``birenResourceName``): the count resource ``birentech.com/gpu``; the node keys of word
``biren``; the pod device lists of commonWord ``Biren``; the UUID filters of
``birentech.com``."""

from __future__ import annotations

from typing import Final

from hami_core.backend import ResourceNames, countshared, uuid_filter_keys

from . import VENDOR

RESOURCES: Final = ResourceNames(count="birentech.com/gpu")
DEVICE_TYPE: Final = countshared.device_type(VENDOR, RESOURCES, "biren")
USE_UUID, NOUSE_UUID = uuid_filter_keys("birentech.com")
