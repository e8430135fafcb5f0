"""What the node monitor reads for NVIDIA: the shim's shared regions and NVML.

The region file (``shim/REGION.md``) sits in each container's directory as
``vgpu.cache`` (the device plugin sets ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` to it, see
``allocate``). The monitor core opens it safely and hands the bytes here.
"""

from __future__ import annotations

import threading

from hami_core.backend import (
    ContainerUsage,
    HostDevice,
    HostProcess,
    InvalidInputError,
    ProcessDeviceSample,
    ProcessSample,
    RegionDevice,
)

from .allocate import REGION_FILE
from .discover import model_name
from .nvml import NvmlMissingError, PynvmlLibrary
from .shared_region import (
    FILE_SIZE,
    FILE_SIZE_V1,
    RegionError,
    RegionNotReadyError,
    parse_region,
)


def usage_files() -> dict[str, tuple[int, ...]]:
    """``{"vgpu.cache": (724992, 593920)}``: the region file and its exact sizes
    (REGION.md version 2; version 1, which a container whose processes all predate the
    upgrade may still have)."""
    return {REGION_FILE: (FILE_SIZE, FILE_SIZE_V1)}


def parse_usage(name: str, data: bytes) -> ContainerUsage | None:
    """Decode a region file into the container's devices and processes.

    Per process and device: ``buffer_bytes`` = the hooks' ``used_bytes`` (allocations),
    ``context_bytes`` = NVML's ``untracked_bytes`` (context, rounding, caches),
    ``oversubscribed_bytes`` = the host-backed part of ``buffer_bytes``; ``busy_ns`` and
    ``launches`` as the shim counts them (every launch, throttled or not), and per device
    those of processes that left.
    Returns: None for another file name; an empty ``ContainerUsage`` while the region
        is being created (header all zero).
    Raises:
        InvalidInputError: not a version 1 or 2 region (magic, version, geometry, size).
    """
    if name != REGION_FILE:
        return None
    try:
        region = parse_region(data, name)
    except RegionNotReadyError:
        return ContainerUsage()
    except RegionError as exc:
        raise InvalidInputError(str(exc)) from None
    devices = tuple(
        RegionDevice(
            index=d.index,
            uuid=d.uuid,
            memory_limit_bytes=d.mem_limit_bytes,
            cores_limit_pct=d.sm_limit_percent,
            exited_busy_ns=d.exited_busy_ns,
            exited_launches=d.exited_launches,
        )
        for d in region.devices
    )
    processes = tuple(
        ProcessSample(
            pid=p.pid,
            start_time_ticks=p.start_time_ticks,
            devices={
                uuid: ProcessDeviceSample(
                    buffer_bytes=u.used_bytes,
                    context_bytes=u.untracked_bytes,
                    busy_ns=u.busy_ns,
                    launches=u.launches,
                    oversubscribed_bytes=u.oversubscribed_bytes,
                )
                for uuid, u in p.devices.items()
            },
        )
        for p in region.processes
    )
    return ContainerUsage(devices=devices, processes=processes)


class _Holder:
    lock = threading.Lock()
    nvml: PynvmlLibrary | None = None


def host_devices(nvml: PynvmlLibrary | None = None) -> list[HostDevice] | None:
    """NVML's figures of every GPU (memory used/total in bytes, utilization 0..100, the
    device memory of each process by host PID), with the inventory's model names; None
    when there is no NVIDIA driver.

    Raises:
        NvmlError: NVML fails to initialise or to count the GPUs.
    """
    if nvml is None:
        with _Holder.lock:
            if _Holder.nvml is None:
                _Holder.nvml = PynvmlLibrary()
            nvml = _Holder.nvml
    try:
        usage = nvml.usage()
    except NvmlMissingError:
        return None
    return [
        HostDevice(
            index=u.index,
            uuid=u.uuid,
            device_type=model_name(u.name),
            memory_used_bytes=u.memory_used_bytes,
            memory_total_bytes=u.memory_total_bytes,
            utilization_pct=u.utilization_pct,
            memory_utilization_pct=u.memory_utilization_pct,
            processes=None
            if u.processes is None
            else tuple(HostProcess(pid=pid, memory_used_bytes=b) for pid, b in u.processes),
        )
        for u in usage
    ]
