"""Ascend vendor keys, resource names and annotation keys (PROTOCOL.md §1-3).

Per model (common word ``<x>``, e.g. ``Ascend910B3``), as HAMi 2.10's
``pkg/device/ascend/device.go`` (``InitDevices``) registers them:
inventory ``hami.io/node-register-<x>``, handshake ``hami.io/node-handshake-<x>``, pod
device lists ``hami.io/<x>-devices-to-allocate`` / ``hami.io/<x>-devices-allocated``, UUID
filters ``hami.io/use-<x>-uuid`` / ``hami.io/no-use-<x>-uuid``; the pod annotation
``huawei.com/vnpu-mode`` (``hami-core`` | ``template``) picks the slicing mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from hami_core.backend import DeviceTypeInfo, ResourceNames, VendorConfig, hami_annotation_keys

from .models import DEFAULT_MODELS, ModelSpec, settings
from .rules import rules

VNPU_MODE_ANNOTATION: Final = "huawei.com/vnpu-mode"

#: What allocate.py sets: the chips Ascend Docker Runtime mounts and the vNPU template it
#: creates, and hami-core mode's limiter quota, priority and shared-memory paths.
ALLOCATE_ENV: Final = (
    "ASCEND_VISIBLE_DEVICES",
    "ASCEND_VNPU_SPECS",
    "NPU_MEM_QUOTA",
    "NPU_PRIORITY",
    "NPU_GLOBAL_SHM_PATH",
    "NPU_LOCAL_SHM_PATH",
)
#: Where allocate.py mounts hami-core mode's limiter (hami-vnpu-core), its preload and its
#: shared and per-container memory (SHARED_REGION, LOCAL_SHM).
PROTECTED_PATHS: Final = (
    "/etc/ld.so.preload",
    "/hami-vnpu-core",
    "/hami-shared-region",
    "/hami-vnpu-shmem",
)


def use_uuid_annotation(vendor: str) -> str:
    """``hami.io/use-<x>-uuid``: comma list of chip UUIDs the pod may use."""
    return f"hami.io/use-{vendor}-uuid"


def nouse_uuid_annotation(vendor: str) -> str:
    """``hami.io/no-use-<x>-uuid``: comma list of chip UUIDs the pod must not use."""
    return f"hami.io/no-use-{vendor}-uuid"


def register_annotation(vendor: str) -> str:
    """``hami.io/node-register-<x>``: the node's chips of one model (PROTOCOL.md §2)."""
    return f"hami.io/node-register-{vendor}"


def resources(model: ModelSpec) -> ResourceNames:
    """A model's resource names (count, memory in MiB, cores in percent)."""
    return ResourceNames(
        count=model.resource_count, memory=model.resource_memory, cores=model.resource_cores
    )


def configured_resources(vendor: str) -> Callable[[VendorConfig], ResourceNames]:
    """``DeviceTypeInfo.configured_resources`` of one model: its names under the checked
    section (``ascend.vnpus.<vendor>.resourceName`` / ``resourceMemoryName`` /
    ``resourceCoreName``; HAMi's ``vnpus.configs[].resourceName``, ...,
    ``pkg/device/ascend/vnpu.go`` ``VNPUConfig``), as ``requests.read_raw`` reads pods."""

    def names(config: VendorConfig) -> ResourceNames:
        model = settings(config).model(vendor)
        assert model is not None  # every default model is in the settings
        return resources(model)

    return names


def device_type(model: ModelSpec) -> DeviceTypeInfo:
    """The ``DeviceTypeInfo`` of one model (its vendor key and annotation keys)."""
    x = model.vendor
    return DeviceTypeInfo(
        vendor=x,
        resources=resources(model),
        configured_resources=configured_resources(x),
        **hami_annotation_keys(x, register_word_last=True),
        fit_rules=rules(model),
        allocate_env=ALLOCATE_ENV,
        protected_paths=PROTECTED_PATHS,
        # Ascend Docker Runtime's prestart hook mounts the NPUs ASCEND_VISIBLE_DEVICES
        # names from the container's env (and sets their device cgroup); it documents no
        # value for none, unset mounts none: denied in a container asking for no NPU
        visible_devices_env=(("ASCEND_VISIBLE_DEVICES", None),),
    )


#: One ``DeviceTypeInfo`` per default model, declaration order.
DEVICE_TYPES: Final[tuple[DeviceTypeInfo, ...]] = tuple(device_type(m) for m in DEFAULT_MODELS)
VENDORS: Final[frozenset[str]] = frozenset(t.vendor for t in DEVICE_TYPES)
