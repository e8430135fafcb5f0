"""MetaX resource names, annotation keys and constants (HAMi 2.10 ``pkg/device/metax``:
``device.go``, ``sdevice.go``, ``protocol.go``, ``config.go``)."""

from __future__ import annotations

from typing import Any, Final

from hami_core.backend import DeviceTypeInfo, ResourceNames, hami_annotation_keys, uuid_filter_keys

from . import GPU, SGPU

#: MiB per unit of ``metax-tech.com/vmemory`` (HAMi ``MemoryFactor``: GiB).
MEMORY_UNIT_MIB: Final = 1024
#: What HAMi registers per whole GPU read from capacity (``GetNodeDevices``).
WHOLE_GPU_MEMORY_MIB: Final = 65536

GPU_RESOURCES: Final = ResourceNames(count="metax-tech.com/gpu")
SGPU_RESOURCES: Final = ResourceNames(
    count="metax-tech.com/sgpu",
    memory="metax-tech.com/vmemory",
    cores="metax-tech.com/vcore",
    memory_unit_mib=MEMORY_UNIT_MIB,
)

#: HAMi reads ``Metax-GPU`` from capacity and ``Metax-SGPU`` from MetaX's annotation; the
#: register keys below are where hami's own device plugin would publish (read only when
#: MetaX's source is absent).
DEVICE_TYPES: Final = tuple(
    DeviceTypeInfo(vendor=vendor, resources=names, **hami_annotation_keys(word))
    for vendor, names, word in (
        (GPU, GPU_RESOURCES, "metax-gpu"),
        (SGPU, SGPU_RESOURCES, "metax-sgpu"),
    )
)

#: Node annotations.
SDEVICES: Final = "metax-tech.com/node-gpu-devices"
TOPOLOGY_LOSSES: Final = "metax-tech.com/gpu.topology.losses"
TOPOLOGY_SCORES: Final = "metax-tech.com/gpu.topology.scores"
#: Pod annotations.
ALLOCATED_SDEVICES: Final = "metax-tech.com/gpu-devices-allocated"
PREDICATE_TIME: Final = "metax-tech.com/predicate-time"
USE_UUID, NOUSE_UUID = uuid_filter_keys("metax-tech.com")
QOS_POLICY: Final = "metax-tech.com/sgpu-qos-policy"
TOPOLOGY_AWARE: Final = "metax-tech.com/sgpu-topology-aware"
APP_CLASS: Final = "metax-tech.com/sgpu-app-class"

QOS_POLICIES: Final = ("best-effort", "fixed-share", "burst-share")
DEFAULT_QOS: Final = "best-effort"
ONLINE: Final = "online"
OFFLINE: Final = "offline"
APP_CLASSES: Final = (ONLINE, OFFLINE)

#: Backend options (``BackendInfo.option_defaults``).
OPTION_DEFAULTS: Final[dict[str, Any]] = {
    # HAMi's metax.sgpuTopologyAware: score exclusive sGPU placements by link zone.
    "sgpuTopologyAware": False,
}
