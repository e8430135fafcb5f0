"""Hygon DCU resource names, annotation keys and options (PROTOCOL.md §1-3).

From HAMi 2.10 ``pkg/device/hygon/device.go``: resources ``hygon.com/dcunum``,
``hygon.com/dcumem`` (MiB), ``hygon.com/dcucores`` (percent of a DCU); inventory
``hami.io/node-dcu-register``, handshake ``hami.io/node-handshake-dcu``, pod device lists
``hami.io/dcu-devices-to-allocate`` / ``hami.io/dcu-devices-allocated``; pod filters
``hygon.com/use-dcutype`` / ``hygon.com/nouse-dcutype`` (model) and
``hygon.com/use-gpuuuid`` / ``hygon.com/nouse-gpuuuid`` (UUID), comma lists.
"""

from __future__ import annotations

from typing import Any, Final

from hami_core.backend import (
    DeviceTypeInfo,
    ResourceNames,
    hami_annotation_keys,
    type_filter_keys,
    uuid_filter_keys,
)

from . import VENDOR

DEFAULT_RESOURCES: Final = ResourceNames(
    count="hygon.com/dcunum", memory="hygon.com/dcumem", cores="hygon.com/dcucores"
)

DEVICE_TYPE: Final = DeviceTypeInfo(
    vendor=VENDOR,
    resources=DEFAULT_RESOURCES,
    **hami_annotation_keys("dcu"),
    # one hygon.com/dcumem is memoryFactor MiB: quotas on it are read in the pod's units
    memory_unit_option="memoryFactor",
    # what allocate.py sets: the DCUs HIP shows
    allocate_env=("HIP_VISIBLE_DEVICES",),
)

USE_TYPE, NOUSE_TYPE = type_filter_keys("hygon.com", "dcu")
USE_UUID, NOUSE_UUID = uuid_filter_keys("hygon.com")

#: Backend-specific configuration keys (``BackendInfo.option_defaults``).
OPTION_DEFAULTS: Final[dict[str, Any]] = {
    # HAMi's hygon.memoryFactor: a stated hygon.com/dcumem is multiplied by it (MiB).
    "memoryFactor": 1,
    # The hy-smi binary used by discovery.
    "hySmiPath": "hy-smi",
    # Host directory of the hyhal runtime, mounted at the same path (Hygon's docker usage).
    "hyhalPath": "/opt/hyhal",
    # Host directory of the DTK, mounted at /opt/hygondriver (HAMi's HYGONPATH); "" = none.
    "dtkPath": "/opt/dtk",
    # Host directory of the per-container vDCU files (the device plugin writes them).
    "vdevPath": "/usr/local/vgpu/dcu",
    # sysfs root used to find a DCU's /dev/dri nodes from its PCI address.
    "sysfsPath": "/sys",
}

#: The cores a request gets when it names none: HAMi's default (``corenum := 100``).
HAMI_DEFAULT_CORES: Final = 100
