"""What kubelet adds to an NVIDIA container (PROTOCOL.md §7)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    ConfigError,
    ContainerAllocation,
    ContainerDevices,
    DeviceInfo,
    HamiError,
    Mount,
    VendorConfig,
    first_annotation,
    resource_value,
)

from . import mps
from .discover import DISCOVERED
from .mig import MIG_MODE
from .migdevices import DYNAMIC, check_allowlist, mig_allocation
from .names import CORE_POLICY, PRIORITY_RESOURCE, VGPU_MODE
from .shared_region import FILE_SIZE

#: The region's file name in a container's directory (the monitor reads it there).
REGION_FILE = "vgpu.cache"

#: Where the shim, its preload file and the per-container regions live inside containers.
CONTAINER_HOOK_DIR = "/usr/local/vgpu"
OPTION_DEFAULTS: dict[str, Any] = {
    "hookPath": "/usr/local/vgpu",  # host directory of libvgpu.so, ld.so.preload, containers/
    "libraryPath": "",  # host path of libvgpu.so; "" = <hookPath>/libvgpu.so
    "corePolicy": "default",  # GPU_CORE_UTILIZATION_POLICY unless the pod says otherwise
    # MPS mode (node operatingmode: mps): the host directory where the node's MPS control
    # daemon listens (its CUDA_MPS_PIPE_DIRECTORY; NVIDIA's default is /tmp/nvidia-mps),
    # and the daemon's /dev/shm ("" = not mounted; the daemon and its clients must share it).
    "mpsPipeDirectory": "/tmp/nvidia-mps",
    "mpsShmDirectory": "",
    # "shared": one control daemon for the node (the chart's), the shares only in the
    # client's env; "per-container": the device plugin runs a control daemon per
    # container under mpsPipeDirectory whose server holds the shares (hami_nvidia.mps).
    "mpsIsolation": "shared",
    "mpsControlBinary": "nvidia-cuda-mps-control",
}

#: The device mode (inventory ``mode``, PROTOCOL.md §2) served through NVIDIA MPS.
MPS_MODE = "mps"
#: Where the MPS pipe directory appears inside containers.
CONTAINER_MPS_PIPE_DIR = "/tmp/nvidia-mps"


#: ``GPU_CORE_UTILIZATION_POLICY`` values libvgpu.so knows (HAMi-core ``utilization``
#: watcher: ``default``, ``force``, ``disable``); ``none`` is HAMi's alias of ``disable``.
CORE_POLICIES = ("default", "force", "disable", "none")


def check_config(config: VendorConfig) -> None:
    """``hami_check_config``: the node-side keys of the ``nvidia`` section.

    Raises:
        ConfigError: ``corePolicy`` is not one of ``CORE_POLICIES``,
            ``healthRecoverySeconds`` / ``unifiedMemoryMiB`` / ``migReleaseGraceSeconds``
            is negative, ``migProfileAllowlist`` is malformed, or
            ``mpsPipeDirectory`` / ``mpsShmDirectory`` is not an absolute path (or too
            long for per-container pipe directories), ``mpsIsolation`` is not one of
            ``mps.ISOLATIONS``, ``mpsControlBinary`` is empty, an
            ``ignoredXids`` item is not a positive integer (XIDs are numbered from 1:
            NVIDIA's "XID Errors" catalogue; NVML ``nvmlEventData_t.eventData``).
    """
    opts = config.options
    for pos, xid in enumerate(opts["ignoredXids"]):
        if not isinstance(xid, int) or isinstance(xid, bool) or xid < 1:
            raise ConfigError(f"nvidia.ignoredXids[{pos}]: must be a positive XID, got {xid!r}")
    if opts["corePolicy"] not in CORE_POLICIES:
        raise ConfigError(
            f"nvidia.corePolicy: {opts['corePolicy']!r} is not one of {', '.join(CORE_POLICIES)}"
        )
    for key in ("healthRecoverySeconds", "unifiedMemoryMiB", "migReleaseGraceSeconds"):
        if opts[key] < 0:
            raise ConfigError(f"nvidia.{key}: must be >= 0, got {opts[key]!r}")
    check_allowlist(opts.get("migProfileAllowlist", []))
    for key, required in (("mpsPipeDirectory", True), ("mpsShmDirectory", False)):
        value = opts[key]
        if not isinstance(value, str) or ((value or required) and not value.startswith("/")):
            raise ConfigError(f"nvidia.{key}: must be an absolute host path, got {value!r}")
    if opts["mpsIsolation"] not in mps.ISOLATIONS:
        raise ConfigError(
            f"nvidia.mpsIsolation: {opts['mpsIsolation']!r} is not one of {', '.join(mps.ISOLATIONS)}"
        )
    if not isinstance(opts["mpsControlBinary"], str) or not opts["mpsControlBinary"].strip():
        raise ConfigError("nvidia.mpsControlBinary: must name the MPS control program")
    if opts["mpsIsolation"] == mps.PER_CONTAINER:
        why = mps.check_root(str(opts["mpsPipeDirectory"]))
        if why:
            raise ConfigError(f"nvidia.mpsPipeDirectory: {why}")


#: Where the limits file is mounted (read-only) in the container: the shim reads its
#: variables from it and ignores the container's own env copies (shim/src/config.c).
CONTAINER_LIMITS_FILE = f"{CONTAINER_HOOK_DIR}/limits"


def limits_file(hook_path: str, pod_uid: str, container: str) -> str:
    """Host path of one container's limits file, beside (not inside) its writable
    directory: ``<hook>/containers/<uid>_<name>.limits``."""
    return f"{container_dir(hook_path, pod_uid, container)}.limits"


#: Task priority (``CUDA_TASK_PRIORITY``; shim/src/priority.h): every shim container sees
#: its GPUs' boards read-only here (``<dir>/<GPU UUID>/``), and a high-priority one also
#: its own entry of each board, writable, at ``CONTAINER_PRIORITY_BEAT/<GPU UUID>/``.
CONTAINER_PRIORITY_BOARD = f"{CONTAINER_HOOK_DIR}/priority"
CONTAINER_PRIORITY_BEAT = f"{CONTAINER_HOOK_DIR}/priority-beat"
#: ``nvidia.com/priority`` value of a high-priority task (HAMi: 0 high, 1 low).
HIGH_PRIORITY = 0


def priority_board(hook_path: str, uuid: str) -> str:
    """Host directory of one GPU's priority board: ``<hook>/priority/<GPU UUID>``."""
    return f"{hook_path.rstrip('/')}/priority/{uuid}"


#: Size of a beat file: one CLOCK_MONOTONIC time in ns (shim/src/priority.h).
BEAT_FILE_SIZE = 8


def priority_mounts(
    hook_path: str, pod_uid: str, container: str, uuids: Sequence[str], priority: object
) -> tuple[list[Mount], dict[str, str], dict[str, int]]:
    """The priority board of each GPU (read-only), and for a high-priority container its
    own beat file in each, writable (the file alone: the entry's directory is the
    host's, so a tenant cannot fill the disk or plant a tree there); plus a small file
    that makes each board exist on the host before kubelet mounts it (a read-only
    hostPath must exist). Returns: mounts, ``files``, ``shared_files``."""
    mounts: list[Mount] = []
    files: dict[str, str] = {}
    shared: dict[str, int] = {}
    for uuid in uuids:
        board = priority_board(hook_path, uuid)
        files[f"{board}/.gpu"] = f"{uuid}\n"
        mounts.append(Mount(container_path=f"{CONTAINER_PRIORITY_BOARD}/{uuid}", host_path=board))
        # As the shim reads CUDA_TASK_PRIORITY (written from the same value): "0" is high.
        if priority is not None and str(priority).strip() == str(HIGH_PRIORITY):
            beat = f"{board}/{pod_uid}_{container}/beat"
            shared[beat] = BEAT_FILE_SIZE
            mounts.append(
                Mount(
                    container_path=f"{CONTAINER_PRIORITY_BEAT}/{uuid}/beat",
                    host_path=beat,
                    read_only=False,
                )
            )
    return mounts, files, shared


def container_dir(hook_path: str, pod_uid: str, container: str) -> str:
    """Host directory of one container's shared region: ``<hook>/containers/<uid>_<name>``."""
    return f"{hook_path.rstrip('/')}/containers/{pod_uid}_{container}"


def mps_allocation(
    devices: ContainerDevices,
    config: VendorConfig,
    pod: Mapping[str, Any] | None = None,
    container: Mapping[str, Any] | None = None,
    on_node: bool = True,
) -> ContainerAllocation:
    """What a container whose devices are all in MPS mode gets: the MPS client's
    variables and the daemon's pipe directory, and none of the shim's (MPS enforces the
    share; the shim is neither mounted nor preloaded).

    Env (meanings from NVIDIA's "Multi-Process Service" guide, section "Environment
    Variables", https://docs.nvidia.com/deploy/mps/):

    - ``NVIDIA_VISIBLE_DEVICES``: the devices' UUIDs, in allocation order (CUDA numbers
      them 0.. in that order inside the container).
    - ``CUDA_MPS_PIPE_DIRECTORY``: the directory the client connects to the control
      daemon through (``CONTAINER_MPS_PIPE_DIR``, the host's ``mpsPipeDirectory``).
    - ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: the share of each device's threads (SMs)
      the client's contexts may use, percent; the smallest ``cores_pct`` of the
      container's devices (a client has one value for all its devices); left out when
      that is 0 (no core share asked) or 100 (the whole device).
    - ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``: device memory the client may allocate per
      device, ``<device ordinal>=<MiB>M`` pairs, comma separated (NVIDIA's format,
      e.g. ``0=1024M,1=2048M``).

    With ``mpsIsolation: per-container`` the same shares are also the server defaults of
    a control daemon of the container's own (``mps.ensure``, started here, before the
    container), whose directory is what is mounted at ``/tmp/nvidia-mps``: a client that
    drops or raises the variables still gets them. With ``shared`` (the node's daemon)
    the variables are the only carrier of the share (docs/sharing-modes.md). Not
    ``on_node`` (``hami simulate``: devices read back from the inventory), nothing is
    started and the mount names the directory the daemon would have.

    Raises:
        HamiError: a device has a negative share (a corrupt allocation), the pod has no
            UID (per-container), or the container's daemon cannot be started with its
            limits (``mps.MpsError``: Allocate fails rather than start the container
            without them).
    """
    opts = config.options
    envs = {"NVIDIA_VISIBLE_DEVICES": ",".join(d.uuid for d in devices)}
    envs["CUDA_MPS_PIPE_DIRECTORY"] = CONTAINER_MPS_PIPE_DIR
    threads = min(d.cores_pct for d in devices)
    if 0 < threads < 100:
        envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(threads)
    envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(
        f"{i}={d.memory_mib}M" for i, d in enumerate(devices)
    )
    pipe_dir = str(opts["mpsPipeDirectory"])
    if opts["mpsIsolation"] == mps.PER_CONTAINER:
        uid = str(((pod or {}).get("metadata") or {}).get("uid") or "")
        name = str((container or {}).get("name") or "")
        if not uid or not name:
            raise HamiError("MPS per-container isolation needs the pod's UID and container name")
        limits = mps.MpsLimits(
            threads_pct=threads if 0 < threads < 100 else 100,
            memory_mib=tuple(d.memory_mib for d in devices),
        )
        if on_node:
            pipe_dir = mps.ensure(
                str(opts["mpsControlBinary"]),
                str(opts["mpsPipeDirectory"]),
                uid,
                name,
                [d.uuid for d in devices],
                limits,
            )
        else:
            pipe_dir = f"{pipe_dir.rstrip('/')}/{mps.container_dir_name(uid, name)}"
    mounts = [
        Mount(
            container_path=CONTAINER_MPS_PIPE_DIR,
            host_path=pipe_dir,
            read_only=False,  # clients open the daemon's pipes for writing
        )
    ]
    if opts["mpsShmDirectory"]:
        mounts.append(
            Mount(
                container_path="/dev/shm", host_path=str(opts["mpsShmDirectory"]), read_only=False
            )
        )
    return ContainerAllocation(envs=envs, mounts=tuple(mounts))


def device_modes(devices: ContainerDevices, node_devices: Sequence[DeviceInfo]) -> set[str]:
    """The inventory modes of a container's devices (``hami-core`` for one the node's
    discovered devices do not list)."""
    modes = {d.uuid: d.mode for d in node_devices}
    return {modes.get(d.uuid, "hami-core") for d in devices}


def allocate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    devices: ContainerDevices,
    config: VendorConfig,
    node_devices: Sequence[DeviceInfo],
) -> ContainerAllocation:
    """Env, mounts for one container given its slices (empty: no devices).

    Devices in MPS mode (``node_devices`` says their ``mode``; the node's
    ``operatingmode: mps``) get ``mps_allocation``; MIG GPUs get their instances
    (``migdevices.mig_allocation``: the MIG UUIDs, no shim); the rest get the shim's,
    below.

    Raises:
        HamiError: the container's devices are in different modes (one container is
            served either by MPS or by the shim, never both), or in a mode the pod's
            ``nvidia.com/vgpu-mode`` does not list (the node's mode changed after bind).

    Env: ``NVIDIA_VISIBLE_DEVICES`` (UUIDs, or ``none``), ``CUDA_DEVICE_MEMORY_LIMIT_<i>``
    (``<MiB>m``), ``CUDA_DEVICE_SM_LIMIT`` and ``_<i>`` (percent),
    ``CUDA_DEVICE_MEMORY_SHARED_CACHE``, ``CUDA_OVERSUBSCRIBE`` (memory scaling > 1),
    ``GPU_CORE_UTILIZATION_POLICY``, ``CUDA_TASK_PRIORITY``. Mounts: the shim (read-only),
    ``/etc/ld.so.preload`` unless the container sets ``CUDA_DISABLE_CONTROL=true``, the
    per-container directory the monitor reads (read-only) with its region file
    (writable, created and sized by the device plugin: ``shared_files``), each GPU's priority board
    (``priority_mounts``: read-only, plus the container's own beat file writable when
    its ``nvidia.com/priority`` is 0), and the same variables as a
    read-only limits file (``/usr/local/vgpu/limits``) that the shim prefers to the
    environment, so a container's own env cannot raise its share (PROTOCOL.md §7).
    """
    if not devices:
        return ContainerAllocation(envs={"NVIDIA_VISIBLE_DEVICES": "none"})
    modes = device_modes(devices, node_devices)
    if len(modes) > 1:
        raise HamiError(
            f"container {container.get('name', '')!r}: its devices are in different modes "
            f"({', '.join(sorted(modes))}); one container is served in one mode"
        )
    accepted = first_annotation((pod.get("metadata") or {}).get("annotations") or {}, VGPU_MODE)
    if accepted is not None and not modes <= {m.strip() for m in accepted.split(",")}:
        # the node's mode changed between bind and Allocate (a restarted device plugin
        # with another operatingmode): never serve a pod in a mode it did not accept
        raise HamiError(
            f"container {container.get('name', '')!r}: its devices are now in mode "
            f"{', '.join(sorted(modes))}, which the pod's {VGPU_MODE[0]}={accepted!r} "
            "does not accept"
        )
    if modes == {MPS_MODE}:
        on_node = any(DISCOVERED in d.node_local for d in node_devices)
        return mps_allocation(devices, config, pod, container, on_node=on_node)
    if modes == {MIG_MODE}:
        from . import node

        return mig_allocation(
            devices,
            node_devices,
            pod,
            container,
            manager=node.current().mig,
            dynamic=config.operating_mode == DYNAMIC,
        )
    opts = config.options
    hook = str(opts["hookPath"]).rstrip("/")
    meta = pod.get("metadata") or {}
    name = str(container.get("name", ""))
    envs: dict[str, str] = {"NVIDIA_VISIBLE_DEVICES": ",".join(d.uuid for d in devices)}
    for i, d in enumerate(devices):
        envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{d.memory_mib}m"
        envs[f"CUDA_DEVICE_SM_LIMIT_{i}"] = str(d.cores_pct)
    envs["CUDA_DEVICE_SM_LIMIT"] = str(devices[0].cores_pct)
    envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{CONTAINER_HOOK_DIR}/shared/{REGION_FILE}"
    if config.memory_scaling > 1:
        envs["CUDA_OVERSUBSCRIBE"] = "true"
    policy = first_annotation(meta.get("annotations") or {}, CORE_POLICY) or str(opts["corePolicy"])
    envs["GPU_CORE_UTILIZATION_POLICY"] = "disable" if policy == "none" else policy
    priority = resource_value(container, PRIORITY_RESOURCE)
    if priority is not None:
        envs["CUDA_TASK_PRIORITY"] = str(priority)

    library = str(opts["libraryPath"]) or f"{hook}/libvgpu.so"
    # The region's directory read-only, the region file alone writable, created and
    # sized by the device plugin: a writable host directory would let a tenant fill the
    # node's disk (issue 24 item 16); the monitor truncates a region grown past its size.
    shared_dir = container_dir(hook, str(meta.get("uid", "")), name)
    region = f"{shared_dir}/{REGION_FILE}"
    mounts = [
        Mount(container_path=f"{CONTAINER_HOOK_DIR}/libvgpu.so", host_path=library),
        Mount(container_path=f"{CONTAINER_HOOK_DIR}/shared", host_path=shared_dir),
        Mount(
            container_path=f"{CONTAINER_HOOK_DIR}/shared/{REGION_FILE}",
            host_path=region,
            read_only=False,
        ),
    ]
    disabled = any(
        e.get("name") == "CUDA_DISABLE_CONTROL" and str(e.get("value", "")).lower() == "true"
        for e in container.get("env") or []
    )
    if not disabled:
        mounts.append(Mount(container_path="/etc/ld.so.preload", host_path=f"{hook}/ld.so.preload"))
    board_mounts, board_files, beat_files = priority_mounts(
        hook, str(meta.get("uid", "")), name, [d.uuid for d in devices], priority
    )
    mounts.extend(board_mounts)
    file_values = dict(envs)
    if disabled:  # admitted only where an administrator allowed it (the webhook)
        file_values["CUDA_DISABLE_CONTROL"] = "true"
    host_limits = limits_file(hook, str(meta.get("uid", "")), name)
    mounts.append(Mount(container_path=CONTAINER_LIMITS_FILE, host_path=host_limits))
    content = "".join(f"{k}={v}\n" for k, v in sorted(file_values.items()))
    return ContainerAllocation(
        envs=envs,
        mounts=tuple(mounts),
        files={host_limits: content, **board_files},
        shared_files={region: FILE_SIZE, **beat_files},
    )
