"""What the node monitor reads: per-container usage files and host device figures.

A backend decodes its own files (NVIDIA: the shim's shared region, ``shim/REGION.md``)
into these classes; the monitor (``hami_core.monitor``) turns them into the node metrics
of PROTOCOL.md §9. Units are in the field names: bytes, nanoseconds, percent.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs


@attrs.frozen(kw_only=True)
class RegionDevice:
    """One device a container uses, as its usage file states it.

    Attributes:
        index: position in the container's device list (HAMi's ``vdevice_index``).
        uuid: the vendor's device id, e.g. ``GPU-...``.
        memory_limit_bytes: the memory limit the container's processes enforce (bytes;
            0 when unknown or fenced).
        cores_limit_pct: compute limit in percent of the device, 0 = unlimited.
        exited_busy_ns: GPU time of the kernels of processes that have left (ns); with
            every listed process's ``busy_ns`` it is the container's cumulative GPU time.
        exited_launches: kernel launches of processes that have left.
    """

    index: int
    uuid: str
    memory_limit_bytes: int = 0
    cores_limit_pct: int = 0
    exited_busy_ns: int = 0
    exited_launches: int = 0


@attrs.frozen(kw_only=True)
class ProcessDeviceSample:
    """What one process uses on one device.

    Attributes:
        buffer_bytes: memory the hooks charged for the process's allocations (bytes).
        context_bytes: memory beyond the allocations that the driver attributes to the
            process (context, page rounding, pool caches; bytes).
        busy_ns: cumulative GPU time of the process's kernels (ns).
        launches: cumulative kernel launches.
        oversubscribed_bytes: the part of ``buffer_bytes`` served from host memory
            instead of the device's (memory oversubscription; bytes).
    """

    buffer_bytes: int = 0
    context_bytes: int = 0
    busy_ns: int = 0
    launches: int = 0
    oversubscribed_bytes: int = 0


@attrs.frozen(kw_only=True)
class ProcessSample:
    """A process of the container that uses devices.

    Attributes:
        pid: process id in the container's PID namespace.
        start_time_ticks: process start in clock ticks after boot (``/proc/<pid>/stat``
            field 22): with ``pid`` it tells a live process from a dead one whose pid
            was reused.
        devices: usage per device UUID.
    """

    pid: int
    start_time_ticks: int
    devices: Mapping[str, ProcessDeviceSample] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class ContainerUsage:
    """One decoded usage file: the container's devices and the processes on them.

    ``processes`` may include processes that have exited (files are cleaned lazily by
    their writers); the monitor counts only live ones.
    """

    devices: tuple[RegionDevice, ...] = ()
    processes: tuple[ProcessSample, ...] = ()


@attrs.frozen(kw_only=True)
class HostProcess:
    """One process holding device memory, as the host's driver accounts it (NVML
    ``nvmlDeviceGetComputeRunningProcesses`` / ``...GraphicsRunningProcesses``).

    Attributes:
        pid: the process id in the host's PID namespace (the driver's view).
        memory_used_bytes: device memory the driver attributes to it on this device
            (bytes; NVML ``usedGpuMemory``).
    """

    pid: int
    memory_used_bytes: int


@attrs.frozen(kw_only=True)
class HostDevice:
    """One physical device as the host's driver reports it (NVML for NVIDIA).

    Attributes:
        index: the driver's device index.
        uuid: the device id (joins with the scheduler's ``device_uuid``).
        device_type: the model as the inventory writes it, e.g. ``NVIDIA-Tesla T4``.
        memory_used_bytes: device memory in use by every process (bytes).
        memory_total_bytes: physical device memory (bytes).
        utilization_pct: share of the last sample period a kernel ran, 0..100.
        memory_utilization_pct: share of the period memory was read or written, 0..100.
        processes: the processes holding its memory, one entry per host PID; None when
            the driver cannot say (then no container is measured from the host).
    """

    index: int
    uuid: str
    device_type: str
    memory_used_bytes: int = 0
    memory_total_bytes: int = 0
    utilization_pct: float = 0.0
    memory_utilization_pct: float = 0.0
    processes: tuple[HostProcess, ...] | None = None
