"""What kubelet adds to an Ascend container (``hami_allocate``).

Template mode, per Ascend Docker Runtime (MindCluster "Ascend Docker Runtime 使用指南 /
在Docker客户端使用", table 1 "Ascend Docker Runtime运行参数解释"; hiascend.com MindX DL
"容器引擎插件 Ascend Docker"):

- ``ASCEND_VISIBLE_DEVICES``: the chips' **physical** ids, comma-separated (``0,1``);
  the runtime mounts ``/dev/davinci<id>`` and sets the device cgroup. ``void`` for a
  container without chips (no NPU, driver or directory is mounted).
- ``ASCEND_VNPU_SPECS``: for a slice, the vNPU template (``vir05_1c_16g``); the runtime
  then creates a dynamic vNPU of that template on the one physical chip named in
  ``ASCEND_VISIBLE_DEVICES`` ("一条动态虚拟化的命令只能指定一个物理NPU的ID").

``hami-core`` mode (HAMi's soft slicing; Project-HAMi/ascend-device-plugin
``internal/server/allocate.go``, and the handbook's "VNPU 软切分": ``NPU_MEM_QUOTA`` /
``NPU_PRIORITY``): ``ASCEND_VISIBLE_DEVICES``, ``NPU_MEM_QUOTA`` (MiB),
``NPU_PRIORITY`` (cores percent), ``NPU_GLOBAL_SHM_PATH``, ``NPU_LOCAL_SHM_PATH``, and the
mounts of the driver tools, the limiter (``/hami-vnpu-core``), ``/etc/ld.so.preload``, the
shared region and a per-container directory ``<hookPath>/containers/<podUID>_<name>``.

Physical ids come from the node-local chip table ``discover.CHIPS`` (filled by
``hami_discover``); an unknown chip triggers one re-discovery. Where ``npu-smi`` is
absent (simulation, tests) the UUIDs stand in for the ids, which no real runtime
accepts: a missing id never silently becomes another chip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from hami_core.backend import (
    ContainerAllocation,
    ContainerDevices,
    DeviceInfo,
    Mount,
    VendorConfig,
    discovered,
)

from . import discover
from .models import MODE_HAMI_CORE, settings
from .requests import pod_mode

#: Host files of the Ascend driver that soft slicing mounts read-only (HAMi allocate.go).
DRIVER_PATHS: Final = (
    "/usr/local/bin/npu-smi",
    "/etc/ascend_install.info",
    "/usr/local/Ascend/driver/lib64/driver",
    "/usr/local/Ascend/driver/version.info",
)
SHARED_REGION_HOST: Final = "/usr/local/hami-shared-region"
SHARED_REGION: Final = "/hami-shared-region"
LOCAL_SHM: Final = "/hami-vnpu-shmem"


def physical_ids(devices: ContainerDevices, node_devices: Sequence[DeviceInfo]) -> list[str]:
    """The chips' physical ids as strings, in the container's device order, from the
    ``node_local`` facts discovery put on this node's devices.

    Where the node's devices carry no discovery facts (``hami simulate`` reads the
    inventory) the UUIDs stand in, which no real runtime accepts: a missing id never
    silently becomes another chip.

    Raises:
        InvalidInputError: a chip is not among the node's discovered devices (the
            allocation names a chip this node does not have).
    """
    if not node_devices:
        return [d.uuid for d in devices]
    what = f"{devices[0].vendor} chip" if devices else "chip"
    chips = discovered(devices, node_devices, what=what, tool="npu-smi")
    return [c.node_local.get(discover.PHY_ID, c.uuid) for c in chips]


def allocate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    devices: ContainerDevices,
    config: VendorConfig,
    node_devices: Sequence[DeviceInfo],
) -> ContainerAllocation:
    """Env and mounts for one container given its slices (empty: no chips).

    Raises:
        InvalidInputError: a chip is not on this node, or the pod's vnpu-mode annotation
            is invalid.
    """
    if not devices:
        return ContainerAllocation(envs={"ASCEND_VISIBLE_DEVICES": "void"})
    cfg = settings(config)
    ids = physical_ids(devices, node_devices)
    envs: dict[str, str] = {"ASCEND_VISIBLE_DEVICES": ",".join(ids)}
    first = devices[0]
    model = cfg.model(first.vendor)
    if pod_mode(pod, cfg) != MODE_HAMI_CORE:
        if model is not None and len(devices) == 1:
            sliced = model.trim(first.memory_mib) if first.memory_mib else None
            if sliced is not None and sliced.template is not None:
                envs["ASCEND_VNPU_SPECS"] = sliced.template.name
        return ContainerAllocation(envs=envs)

    meta = pod.get("metadata") or {}
    name = str(container.get("name", ""))
    envs["NPU_MEM_QUOTA"] = str(first.memory_mib)
    envs["NPU_PRIORITY"] = str(first.cores_pct)
    envs["NPU_GLOBAL_SHM_PATH"] = f"{SHARED_REGION}/{ids[0]}_global_registry"
    envs["NPU_LOCAL_SHM_PATH"] = f"{LOCAL_SHM}/vnpu_local_shmem"
    hook = cfg.hook_path
    mounts = [Mount(container_path=p, host_path=p) for p in DRIVER_PATHS]
    mounts += [
        Mount(container_path="/hami-vnpu-core", host_path=hook),
        Mount(container_path="/etc/ld.so.preload", host_path=f"{hook}/ld.so.preload"),
        Mount(container_path=SHARED_REGION, host_path=SHARED_REGION_HOST, read_only=False),
        Mount(
            container_path=LOCAL_SHM,
            host_path=f"{hook}/containers/{meta.get('uid', '')}_{name}",
            read_only=False,
        ),
    ]
    return ContainerAllocation(envs=envs, mounts=tuple(mounts))
