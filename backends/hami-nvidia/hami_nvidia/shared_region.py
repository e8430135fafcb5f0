"""Reader of the shared region file that ``libvgpu.so`` keeps per container.

The layout is documented once, in ``shim/REGION.md``; the C definition is
``shim/src/region_layout.h``. This module mirrors it with :mod:`struct` and reads it
without taking any lock (writers use a mutex inside the file; readers never do), so a
value may be momentarily out of date but every 8-byte field is read whole.

Units: memory in **bytes**, GPU time in **nanoseconds**, compute limits in
**percent of one device** (0 means unlimited), process start times in **clock ticks
after boot** (``/proc/<pid>/stat`` field 22). PIDs are those of the container's PID
namespace.

Usage::

    region = read_region("/usr/local/vgpu/containers/<pod>_<ctr>/vgpu.region")
    for dev in region.devices:
        print(dev.uuid, region.used_bytes(dev.uuid), dev.mem_limit_bytes)
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "FILE_SIZE",
    "FILE_SIZE_V1",
    "LAYOUT",
    "MAGIC",
    "VERSION",
    "VERSIONS",
    "DeviceEntry",
    "DeviceUsage",
    "ProcessSlot",
    "Region",
    "RegionError",
    "RegionFormatError",
    "RegionNotReadyError",
    "RegionTruncatedError",
    "RegionVersionError",
    "parse_region",
    "read_region",
]

MAGIC = b"HAMIVGPU"
VERSION = 2  # what libvgpu.so writes now
VERSIONS = (1, 2)  # what this reader decodes: version 2 is version 1 plus a table
MAX_DEVICES = 16
MAX_SLOTS = 1024
UUID_LEN = 96
LOCK_LEN = 64
REASON_LEN = 128
HEADER_SIZE = 4096  # offset of slot 0
DEVICES_OFFSET = 256  # device table follows the 256-byte header

HEADER_STRUCT = struct.Struct(f"<8sIIIIIIQQIIII{LOCK_LEN}s{REASON_LEN}s")
DEVICE_STRUCT = struct.Struct(f"<{UUID_LEN}sQQqIIQQ16s")
SLOT_HEAD_STRUCT = struct.Struct("<iIQiIQ32s")
SLOT_DEVICE_STRUCT = struct.Struct("<QQQQ")
SLOT_SIZE = SLOT_HEAD_STRUCT.size + MAX_DEVICES * SLOT_DEVICE_STRUCT.size
FILE_SIZE_V1 = HEADER_SIZE + MAX_SLOTS * SLOT_SIZE
#: Version 2 appends, after the slots, the host-backed (oversubscribed) part of every
#: slot's ``used_bytes``: u64 ``[MAX_SLOTS][MAX_DEVICES]``.
OVERSUB_OFFSET = FILE_SIZE_V1
OVERSUB_STRUCT = struct.Struct("<Q")
FILE_SIZE = OVERSUB_OFFSET + MAX_SLOTS * MAX_DEVICES * OVERSUB_STRUCT.size
_FILE_SIZES = {1: FILE_SIZE_V1, 2: FILE_SIZE}

REGION_FLAG_FENCED = 0x1
DEV_FENCED = 0x1
DEV_THROTTLED = 0x2
SLOT_FENCED = 0x1

#: ``"struct.field": (offset, size)`` for every field, as in region_layout.h (offsets
#: within their struct). tests/shim/test_region_layout.py checks it against the C.
LAYOUT: dict[str, tuple[int, int]] = {
    "region_header.magic": (0, 8),
    "region_header.version": (8, 4),
    "region_header.header_size": (12, 4),
    "region_header.device_entry_size": (16, 4),
    "region_header.max_devices": (20, 4),
    "region_header.slot_size": (24, 4),
    "region_header.max_slots": (28, 4),
    "region_header.file_size": (32, 8),
    "region_header.created_unix_ns": (40, 8),
    "region_header.device_count": (48, 4),
    "region_header.slot_hwm": (52, 4),
    "region_header.flags": (56, 4),
    "region_header.fence_reason": (128, REASON_LEN),
    "region_device.uuid": (0, UUID_LEN),
    "region_device.mem_limit": (96, 8),
    "region_device.mem_total": (104, 8),
    "region_device.tat_ns": (112, 8),
    "region_device.sm_limit": (120, 4),
    "region_device.flags": (124, 4),
    "region_device.exited_busy_ns": (128, 8),
    "region_device.exited_launches": (136, 8),
    "region_slot_device.used_bytes": (0, 8),
    "region_slot_device.untracked_bytes": (8, 8),
    "region_slot_device.busy_ns": (16, 8),
    "region_slot_device.launches": (24, 8),
    "region_slot.pid": (0, 4),
    "region_slot.flags": (4, 4),
    "region_slot.start_time": (8, 8),
    "region_slot.priority": (16, 4),
    "region_slot.attach_unix_ns": (24, 8),
    "region_slot.dev": (64, MAX_DEVICES * SLOT_DEVICE_STRUCT.size),
}

#: Struct sizes in bytes, as in region_layout.h.
SIZES: dict[str, int] = {
    "region_header": DEVICES_OFFSET,
    "region_device": DEVICE_STRUCT.size,
    "region_slot_device": SLOT_DEVICE_STRUCT.size,
    "region_slot": SLOT_SIZE,
    "file": FILE_SIZE,
    "file_v1": FILE_SIZE_V1,
    "oversub_offset": OVERSUB_OFFSET,
}


class RegionError(Exception):
    """The file is not a region this reader can use."""


class RegionTruncatedError(RegionError):
    """The file is shorter than its layout requires."""


class RegionVersionError(RegionError):
    """The file carries a layout version this reader does not know."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


class RegionFormatError(RegionError):
    """Wrong magic, or sizes that contradict the declared version."""


class RegionNotReadyError(RegionError):
    """The file exists but its creator has not stamped the header yet (retry)."""


@dataclass(frozen=True)
class DeviceEntry:
    """One device of the container, keyed by UUID.

    Attributes:
        index: position in the device table (the index of ``ProcessSlot`` usage).
        uuid: NVIDIA device UUID, e.g. ``"GPU-1b2c..."``.
        mem_limit_bytes: memory limit the last registering process enforces (bytes;
            0 when it fails closed).
        mem_total_bytes: physical memory the driver reported (bytes).
        sm_limit_percent: compute limit in percent of the device, 0 = unlimited.
        fenced: the last registering process fails closed on this device (malformed
            or missing limit); see ``Region.fence_reason``.
        throttled: the compute throttle was active when last checked.
        throttle_clock_ns: the throttle's virtual clock (CLOCK_MONOTONIC ns).
        exited_busy_ns: GPU time of the kernels of the container's processes that have
            left (their slots were freed or reclaimed; ns). With the live slots' ``busy_ns``
            it makes a counter that never goes back when a process exits. 0 in files
            written by a library older than this field (the bytes were reserved, zero).
        exited_launches: kernel launches of those processes, likewise.
    """

    index: int
    uuid: str
    mem_limit_bytes: int
    mem_total_bytes: int
    sm_limit_percent: int
    fenced: bool
    throttled: bool
    throttle_clock_ns: int
    exited_busy_ns: int = 0
    exited_launches: int = 0


@dataclass(frozen=True)
class DeviceUsage:
    """What one process uses on one device.

    Attributes:
        used_bytes: device memory charged by the library's hooks (bytes).
        untracked_bytes: NVML's per-process usage beyond ``used_bytes`` (context,
            page rounding; bytes), counted against the limit too.
        busy_ns: GPU time of the process's kernel launches (ns): measured for every
            throttled launch; for unthrottled ones (no compute limit, or the limit off)
            measured on a sample and estimated per kernel for the rest.
        launches: kernel launches of the process.
        oversubscribed_bytes: the part of ``used_bytes`` served from host-backed
            managed memory (``CUDA_OVERSUBSCRIBE``; bytes; 0 in version-1 files).
    """

    used_bytes: int
    untracked_bytes: int
    busy_ns: int
    launches: int
    oversubscribed_bytes: int = 0

    @property
    def charged_bytes(self) -> int:
        """Bytes counted against the container's limit (used + untracked)."""
        return self.used_bytes + self.untracked_bytes


@dataclass(frozen=True)
class ProcessSlot:
    """A process of the container that touched CUDA.

    Attributes:
        index: slot number in the file.
        pid: process id in the container's PID namespace.
        start_time_ticks: process start time (clock ticks after boot); with ``pid``
            it identifies the process across PID reuse.
        priority: ``CUDA_TASK_PRIORITY``, -1 when unset.
        attach_unix_ns: when the process took the slot (Unix time, ns).
        fenced: the process fails closed on at least one device.
        devices: usage per device UUID (devices with any usage only).
    """

    index: int
    pid: int
    start_time_ticks: int
    priority: int
    attach_unix_ns: int
    fenced: bool
    devices: Mapping[str, DeviceUsage] = field(default_factory=dict)


@dataclass(frozen=True)
class Region:
    """A decoded region file.

    Attributes:
        path: where it was read from.
        version: layout version (1 or 2, ``VERSIONS``).
        created_unix_ns: creation time (Unix time, ns).
        fenced: some process failed closed; ``fence_reason`` says why.
        fence_reason: the latest fail-closed cause, ``""`` if none.
        devices: the device table.
        processes: live-looking slots (pid != 0). Slots of dead processes are
            reclaimed lazily by the library, so a reader may still see them.
    """

    path: str
    version: int
    created_unix_ns: int
    fenced: bool
    fence_reason: str
    devices: tuple[DeviceEntry, ...]
    processes: tuple[ProcessSlot, ...]

    def device(self, uuid: str) -> DeviceEntry | None:
        """The device entry for ``uuid``, or None."""
        for dev in self.devices:
            if dev.uuid == uuid:
                return dev
        return None

    def used_bytes(self, uuid: str) -> int:
        """Bytes the container is charged on ``uuid`` (all processes; bytes)."""
        return sum(p.devices[uuid].charged_bytes for p in self.processes if uuid in p.devices)

    def process_used_bytes(self, pid: int, uuid: str) -> int:
        """Bytes process ``pid`` is charged on ``uuid`` (bytes; 0 if unknown)."""
        return sum(
            p.devices[uuid].charged_bytes
            for p in self.processes
            if p.pid == pid and uuid in p.devices
        )

    def oversubscribed_bytes(self, uuid: str) -> int:
        """Host-backed bytes of the container on ``uuid`` (all processes; bytes)."""
        return sum(
            p.devices[uuid].oversubscribed_bytes for p in self.processes if uuid in p.devices
        )

    def busy_ns(self, uuid: str) -> int:
        """GPU time of the container's kernels on ``uuid`` (ns): its live processes'
        and those that left (``DeviceEntry.exited_busy_ns``)."""
        exited = sum(d.exited_busy_ns for d in self.devices if d.uuid == uuid)
        return exited + sum(p.devices[uuid].busy_ns for p in self.processes if uuid in p.devices)


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def parse_region(data: bytes | bytearray | memoryview | mmap.mmap, path: str = "<bytes>") -> Region:
    """Decodes region bytes. Raises a :class:`RegionError` subclass when unusable."""
    size = len(data)
    if size < DEVICES_OFFSET:
        raise RegionTruncatedError(f"{path}: {size} bytes, the header alone needs {DEVICES_OFFSET}")
    (
        magic,
        version,
        header_size,
        device_entry_size,
        max_devices,
        slot_size,
        max_slots,
        file_size,
        created,
        device_count,
        slot_hwm,
        flags,
        _reserved,
        _lock,
        reason,
    ) = HEADER_STRUCT.unpack_from(data, 0)
    if magic == b"\0" * 8:
        raise RegionNotReadyError(f"{path}: header not written yet")
    if magic != MAGIC:
        raise RegionFormatError(f"{path}: not a hami-vgpu region (magic {magic!r})")
    if version not in VERSIONS:
        known = " and ".join(str(v) for v in VERSIONS)
        raise RegionVersionError(
            f"{path}: region version {version}, this reader knows {known}", version
        )
    want = _FILE_SIZES[version]
    expected = (HEADER_SIZE, DEVICE_STRUCT.size, MAX_DEVICES, SLOT_SIZE, MAX_SLOTS, want)
    found = (header_size, device_entry_size, max_devices, slot_size, max_slots, file_size)
    if found != expected:
        raise RegionFormatError(
            f"{path}: geometry {found} differs from version {version}'s {expected}"
        )
    if size < want:
        raise RegionTruncatedError(f"{path}: {size} bytes of {want}")

    devices = []
    for i in range(min(device_count, MAX_DEVICES)):
        uuid, limit, total, tat, sm, dflags, exited_busy, exited_launches, _ = (
            DEVICE_STRUCT.unpack_from(data, DEVICES_OFFSET + i * DEVICE_STRUCT.size)
        )
        devices.append(
            DeviceEntry(
                index=i,
                uuid=_cstr(uuid),
                mem_limit_bytes=limit,
                mem_total_bytes=total,
                sm_limit_percent=sm,
                fenced=bool(dflags & DEV_FENCED),
                throttled=bool(dflags & DEV_THROTTLED),
                throttle_clock_ns=tat,
                exited_busy_ns=exited_busy,
                exited_launches=exited_launches,
            )
        )

    processes = []
    for s in range(min(slot_hwm, MAX_SLOTS)):
        base = HEADER_SIZE + s * SLOT_SIZE
        pid, sflags, start, prio, _r0, attach, _ = SLOT_HEAD_STRUCT.unpack_from(data, base)
        if pid == 0:
            continue
        usage = {}
        for dev in devices:
            oversub = 0
            if version >= 2:
                (oversub,) = OVERSUB_STRUCT.unpack_from(
                    data, OVERSUB_OFFSET + (s * MAX_DEVICES + dev.index) * OVERSUB_STRUCT.size
                )
            used, untracked, busy, launches = SLOT_DEVICE_STRUCT.unpack_from(
                data, base + SLOT_HEAD_STRUCT.size + dev.index * SLOT_DEVICE_STRUCT.size
            )
            u = DeviceUsage(used, untracked, busy, launches, oversub)
            if u.used_bytes or u.untracked_bytes or u.busy_ns or u.launches or oversub:
                usage[dev.uuid] = u
        processes.append(
            ProcessSlot(
                index=s,
                pid=pid,
                start_time_ticks=start,
                priority=prio,
                attach_unix_ns=attach,
                fenced=bool(sflags & SLOT_FENCED),
                devices=usage,
            )
        )

    return Region(
        path=path,
        version=version,
        created_unix_ns=created,
        fenced=bool(flags & REGION_FLAG_FENCED),
        fence_reason=_cstr(reason),
        devices=tuple(devices),
        processes=tuple(processes),
    )


def read_region(path: str | os.PathLike[str]) -> Region:
    """Reads and decodes the region file at ``path`` (never modifies it).

    Raises:
        FileNotFoundError / PermissionError: as :func:`open` does.
        RegionTruncatedError: the file is shorter than its layout.
        RegionVersionError: a layout version not in ``VERSIONS`` (``.version`` holds it).
        RegionFormatError: not a region, or inconsistent geometry.
        RegionNotReadyError: being created right now; retry shortly.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise RegionTruncatedError(f"{path}: empty file")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return parse_region(m[:], path)
