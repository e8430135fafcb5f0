"""What kubelet adds to an NVIDIA container (PROTOCOL.md §7)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    ConfigError,
    ContainerAllocation,
    ContainerDevices,
    Mount,
    VendorConfig,
    resource_value,
)

from .names import CORE_POLICY, PRIORITY_RESOURCE, first_annotation

#: Where the shim, its preload file and the per-container regions live inside containers.
CONTAINER_HOOK_DIR = "/usr/local/vgpu"
OPTION_DEFAULTS: dict[str, Any] = {
    "hookPath": "/usr/local/vgpu",  # host directory of libvgpu.so, ld.so.preload, containers/
    "libraryPath": "",  # host path of libvgpu.so; "" = <hookPath>/libvgpu.so
    "corePolicy": "default",  # GPU_CORE_UTILIZATION_POLICY unless the pod says otherwise
}


#: ``GPU_CORE_UTILIZATION_POLICY`` values libvgpu.so knows (HAMi-core ``utilization``
#: watcher: ``default``, ``force``, ``disable``); ``none`` is HAMi's alias of ``disable``.
CORE_POLICIES = ("default", "force", "disable", "none")


def check_config(config: VendorConfig) -> None:
    """``hami_check_config``: the node-side keys of the ``nvidia`` section.

    Raises:
        ConfigError: ``corePolicy`` is not one of ``CORE_POLICIES``, or
            ``healthRecoverySeconds`` / ``unifiedMemoryMiB`` is negative.
    """
    opts = config.options
    if opts["corePolicy"] not in CORE_POLICIES:
        raise ConfigError(
            f"nvidia.corePolicy: {opts['corePolicy']!r} is not one of {', '.join(CORE_POLICIES)}"
        )
    for key in ("healthRecoverySeconds", "unifiedMemoryMiB"):
        if opts[key] < 0:
            raise ConfigError(f"nvidia.{key}: must be >= 0, got {opts[key]!r}")


#: Where the limits file is mounted (read-only) in the container: the shim reads its
#: variables from it and ignores the container's own env copies (shim/src/config.c).
CONTAINER_LIMITS_FILE = f"{CONTAINER_HOOK_DIR}/limits"


def limits_file(hook_path: str, pod_uid: str, container: str) -> str:
    """Host path of one container's limits file, beside (not inside) its writable
    directory: ``<hook>/containers/<uid>_<name>.limits``."""
    return f"{container_dir(hook_path, pod_uid, container)}.limits"


def container_dir(hook_path: str, pod_uid: str, container: str) -> str:
    """Host directory of one container's shared region: ``<hook>/containers/<uid>_<name>``."""
    return f"{hook_path.rstrip('/')}/containers/{pod_uid}_{container}"


def allocate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    devices: ContainerDevices,
    config: VendorConfig,
) -> ContainerAllocation:
    """Env, mounts for one container given its slices (empty: no devices).

    Env: ``NVIDIA_VISIBLE_DEVICES`` (UUIDs, or ``none``), ``CUDA_DEVICE_MEMORY_LIMIT_<i>``
    (``<MiB>m``), ``CUDA_DEVICE_SM_LIMIT`` and ``_<i>`` (percent),
    ``CUDA_DEVICE_MEMORY_SHARED_CACHE``, ``CUDA_OVERSUBSCRIBE`` (memory scaling > 1),
    ``GPU_CORE_UTILIZATION_POLICY``, ``CUDA_TASK_PRIORITY``. Mounts: the shim (read-only),
    ``/etc/ld.so.preload`` unless the container sets ``CUDA_DISABLE_CONTROL=true``, the
    writable per-container directory the monitor reads, and the same variables as a
    read-only limits file (``/usr/local/vgpu/limits``) that the shim prefers to the
    environment, so a container's own env cannot raise its share (PROTOCOL.md §7).
    """
    if not devices:
        return ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": "none"})
    opts = config.options
    hook = str(opts["hookPath"]).rstrip("/")
    meta = pod.get("metadata") or {}
    name = str(container.get("name", ""))
    envs: dict[str, str] = {"NVIDIA_VISIBLE_DEVICES": ",".join(d.uuid for d in devices)}
    for i, d in enumerate(devices):
        envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{d.memory_mib}m"
        envs[f"CUDA_DEVICE_SM_LIMIT_{i}"] = str(d.cores_pct)
    envs["CUDA_DEVICE_SM_LIMIT"] = str(devices[0].cores_pct)
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{CONTAINER_HOOK_DIR}/shared/vgpu.cache"
    if config.memory_scaling > 1:
        envs["CUDA_OVERSUBSCRIBE"] = "true"
    policy = first_annotation(meta.get("annotations") or {}, CORE_POLICY) or str(opts["corePolicy"])
    envs["GPU_CORE_UTILIZATION_POLICY"] = "disable" if policy == "none" else policy
    priority = resource_value(container, PRIORITY_RESOURCE)
    if priority is not None:
        envs["CUDA_TASK_PRIORITY"] = str(priority)

    library = str(opts["libraryPath"]) or f"{hook}/libvgpu.so"
    mounts = [
        Mount(container_path=f"{CONTAINER_HOOK_DIR}/libvgpu.so", host_path=library),
        Mount(
            container_path=f"{CONTAINER_HOOK_DIR}/shared",
            host_path=container_dir(hook, str(meta.get("uid", "")), name),
            read_only=False,
        ),
    ]
    disabled = any(
        e.get("name") == "CUDA_DISABLE_CONTROL" and str(e.get("value", "")).lower() == "true"
        for e in container.get("env") or []
    )
    if not disabled:
        mounts.append(Mount(container_path="/etc/ld.so.preload", host_path=f"{hook}/ld.so.preload"))
    file_values = dict(envs)
    if disabled:  # admitted only where an administrator allowed it (the webhook)
        file_values["CUDA_DISABLE_CONTROL"] = "true"
    host_limits = limits_file(hook, str(meta.get("uid", "")), name)
    mounts.append(Mount(container_path=CONTAINER_LIMITS_FILE, host_path=host_limits))
    content = "".join(f"{k}={v}\n" for k, v in sorted(file_values.items()))
    return ContainerAllocation(envs=envs, mounts=tuple(mounts), files={host_limits: content})
