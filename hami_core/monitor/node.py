"""``NodeMonitor``: one node's container usage and host devices as metric families.

Each ``collect()`` is one scan: for every directory ``<root>/<pod UID>_<container>``
of a pod on this node, every usage file a backend names (``hami_usage_files``) is read
with the care of ``files`` and decoded by that backend (``hami_parse_usage``); only
processes that are alive now (``procs``) count. Host figures come from
``hami_host_devices``. Metric names and labels are HAMi 2.10's (PROTOCOL.md §9, from
Project-HAMi/HAMi ``cmd/vGPUmonitor/metrics.go``), plus the handbook's aliases and the
monitor's own counters.

Improvements over HAMi's monitor: exited processes never count (HAMi sums every slot
of the file); a corrupt, foreign or hostile file is skipped with one log line and a
counter instead of failing the scrape; the directories of pods that no longer exist are
removed after ``grace_s`` (HAMi never collects them); the memory limit shown is the
scheduler's allocation (a pod annotation tenants cannot write), not the region's.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from hami_core.errors import AnnotationError, HamiError, InvalidInputError
from hami_core.model import ContainerUsage, DeviceTypeInfo, HostDevice
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.migallocations import decode_mig_allocations
from hami_core.scheduling.podspec import containers
from hami_core.scheduling.usage import is_live, pod_allocation

from .families import Family
from .files import UntrustedFileError, open_directory, read_tenant_file
from .procs import live_processes

log = logging.getLogger(__name__)

#: ``<pod UID>_<container name>``: a Kubernetes UID (RFC 4122 text form) and a DNS-1123
#: label (the container name rules, Kubernetes API ``Container.name``).
DIRECTORY_NAME = re.compile(
    r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})_([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$"
)

MIB = 1024 * 1024
HOST_LABELS = ("node", "device_index", "device_uuid", "device_type")
CONTAINER_LABELS = ("namespace", "pod", "container", "vdevice_index", "device_uuid")

Pod = Mapping[str, Any]


class UsageBackends(Protocol):
    """What the monitor needs of ``BackendManager`` (tests may pass their own)."""

    @property
    def backends(self) -> Sequence[Any]: ...

    def usage_files(self, backend: str) -> dict[str, tuple[int, ...]]: ...

    def parse_usage(self, backend: str, name: str, data: bytes) -> ContainerUsage | None: ...

    def host_devices(self, backend: str) -> list[HostDevice] | None: ...

    def device_types(self) -> tuple[DeviceTypeInfo, ...]: ...


@attrs.define
class MonitorStats:
    """The monitor's own counters (cumulative since start).

    Attributes:
        skipped: files skipped per reason (``symlink``, ``not-regular``, ``size``,
            ``unreadable``, ``short-read``, ``corrupt``), one count per file and scan.
        removed_directories: directories of gone pods removed.
        host_errors: scans whose host figures failed, per backend.
    """

    skipped: dict[str, int] = attrs.field(factory=dict)
    removed_directories: int = 0
    host_errors: dict[str, int] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class _DeviceReading:
    vdevice_index: int
    uuid: str
    limit_bytes: int
    buffer_bytes: int
    context_bytes: int
    busy_ns: int
    launches: int
    oversubscribed_bytes: int = 0


class NodeMonitor:
    """Reads one node's container directories and host devices. Thread-safe."""

    def __init__(
        self,
        backends: UsageBackends,
        *,
        root: str,
        node_name: str,
        pods: Callable[[], Sequence[Pod] | None],
        grace_s: float = 300.0,
        proc_root: str = "/proc",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        backends: the loaded backends (``BackendManager``).
        root: the directory holding one directory per container (HAMi and the NVIDIA
            device plugin: ``/usr/local/vgpu/containers``).
        node_name: this node (the ``node`` label of host metrics).
        pods: this node's pods (API objects), or None while they are not known (the
            cache has not listed yet): then no directory is removed and no container
            metric is served.
        grace_s: seconds a directory whose pod is gone is kept before removal.
        proc_root: where procfs is mounted (tests point it elsewhere).
        clock: monotonic seconds.
        """
        self.backends = backends
        self.root = root
        self.node_name = node_name
        self.pods = pods
        self.grace_s = grace_s
        self.proc_root = proc_root
        self.clock = clock
        self.stats = MonitorStats()
        self._lock = threading.Lock()
        self._files: dict[str, dict[str, tuple[int, ...]]] | None = None
        self._missing_since: dict[str, float] = {}
        self._logged: dict[str, str] = {}
        self._busy: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._kernels: dict[tuple[str, str, str], tuple[int, float | None]] = {}

    # -- public ----------------------------------------------------------------------

    def collect(self) -> list[Family]:
        """One scan: the node's metric families (PROTOCOL.md §9, node monitor)."""
        with self._lock:
            now = self.clock()
            families = _families()
            self._collect_host(families)
            self._collect_containers(families, now)
            self._collect_own(families)
            return list(families.values())

    # -- host devices ----------------------------------------------------------------

    def _collect_host(self, f: dict[str, Family]) -> None:
        for record in self.backends.backends:
            name = record.name
            try:
                devices = self.backends.host_devices(name)
            except HamiError as exc:
                self.stats.host_errors[name] = self.stats.host_errors.get(name, 0) + 1
                self._log_once(f"host:{name}", str(exc), f"backend {name}: no host figures: %s")
                continue
            self._logged.pop(f"host:{name}", None)
            for d in devices or ():
                labels = (self.node_name, str(d.index), d.uuid, d.device_type)
                f["hami_host_gpu_memory_used_bytes"].add(labels, d.memory_used_bytes)
                f["hami_host_gpu_utilization_ratio"].add(labels, d.utilization_pct)
                f["hami_host_gpu_memory_controller_utilization_ratio"].add(
                    labels[1:], d.memory_utilization_pct
                )
                f["hami_gpu_memory_used_bytes"].add(labels, d.memory_used_bytes)
                f["hami_gpu_memory_total_bytes"].add(labels, d.memory_total_bytes)

    # -- containers ------------------------------------------------------------------

    def _usage_files(self) -> dict[str, dict[str, tuple[int, ...]]]:
        if self._files is None:
            files: dict[str, dict[str, tuple[int, ...]]] = {}
            for record in self.backends.backends:
                for fname, size in self.backends.usage_files(record.name).items():
                    files.setdefault(record.name, {})[fname] = size
            self._files = files
        return self._files

    def _collect_containers(self, f: dict[str, Family], now: float) -> None:
        pods = self.pods()
        by_uid: dict[str, Pod] | None = None
        if pods is not None:
            by_uid = {}
            for pod in pods:
                uid = (pod.get("metadata") or {}).get("uid")
                if uid:
                    by_uid[str(uid)] = pod
                self._mig_info(f, pod)
        try:
            root_fd = open_directory(self.root)
        except FileNotFoundError:
            return
        except UntrustedFileError as exc:
            self._log_once("root", str(exc), "monitor root unusable: %s")
            return
        try:
            entries = sorted(os.listdir(root_fd))
        except OSError as exc:
            self._log_once("root", str(exc), "cannot list the monitor root: %s")
            os.close(root_fd)
            return
        live = live_processes(self.proc_root)
        seen: set[str] = set()
        try:
            for entry in entries:
                match = DIRECTORY_NAME.match(entry)
                if match is None:
                    continue  # not a directory the device plugin made: leave it alone
                uid, container = match.group(1), match.group(2)
                seen.add(entry)
                if by_uid is None:
                    continue
                owner = by_uid.get(uid)
                if owner is None:
                    self._maybe_remove(root_fd, entry, now)
                    continue
                self._missing_since.pop(entry, None)
                if container not in _container_names(owner):
                    continue
                readings = self._read_container(root_fd, entry, live)
                allocated = self._allocated_bytes(owner, container)
                readings = [
                    attrs.evolve(r, limit_bytes=allocated[r.uuid]) if r.uuid in allocated else r
                    for r in readings
                ]
                meta = owner.get("metadata") or {}
                self._emit(
                    f,
                    str(meta.get("namespace", "")),
                    str(meta.get("name", "")),
                    uid,
                    container,
                    readings,
                    now,
                )
        finally:
            os.close(root_fd)
        for gone in set(self._missing_since) - seen:
            del self._missing_since[gone]

    def _read_container(
        self, root_fd: int, entry: str, live: frozenset[tuple[int, int]]
    ) -> list[_DeviceReading]:
        where = f"{self.root.rstrip('/')}/{entry}"
        try:
            dir_fd = open_directory(entry, dir_fd=root_fd, where=where)
        except FileNotFoundError:
            return []
        except UntrustedFileError as exc:
            self._skip(where, exc.reason, str(exc))
            return []
        readings: list[_DeviceReading] = []
        try:
            for backend, files in self._usage_files().items():
                for fname, size in files.items():
                    path = f"{where}/{fname}"
                    try:
                        data = read_tenant_file(fname, size, dir_fd=dir_fd, where=where)
                        usage = self.backends.parse_usage(backend, fname, data)
                    except FileNotFoundError:
                        continue
                    except UntrustedFileError as exc:
                        self._skip(path, exc.reason, str(exc))
                        continue
                    except InvalidInputError as exc:
                        self._skip(path, "corrupt", f"{path}: {exc}")
                        continue
                    if self._logged.pop(path, None) is not None:
                        log.info("%s: readable again", path)
                    if usage is not None:
                        readings.extend(_readings(usage, live))
        finally:
            os.close(dir_fd)
        return readings

    def _mig_info(self, f: dict[str, Family], pod: Pod) -> None:
        """``hami_mig_device_info`` of a live pod's realised MIG devices: those of its
        ``hami.io/vgpu-mig-allocations`` (scheduler- and device-plugin-owned, PROTOCOL.md
        §6) that carry the runtime triple and whose GPU its own device list names at
        the same position. An unreadable value makes no series."""
        if not is_live(pod):
            return
        meta = pod.get("metadata") or {}
        ann = meta.get("annotations") or {}
        names = [str(c.get("name", "")) for c, _, _ in containers(pod)]
        for dtype in self.backends.device_types():
            raw = ann.get(dtype.mig_annotation) if dtype.mig_annotation else None
            if not raw:
                continue
            try:
                instances = decode_mig_allocations(str(raw))
                listed = decode_pod_devices(str(ann.get(dtype.allocated_annotation) or ""))
            except AnnotationError:
                continue
            for a in instances:
                if not a.realised or a.container_index >= min(len(names), len(listed)):
                    continue
                entry = listed[a.container_index]
                if a.device_index >= len(entry) or entry[a.device_index].uuid != a.gpu_uuid:
                    continue
                f["hami_mig_device_info"].add(
                    (
                        str(meta.get("namespace", "")),
                        str(meta.get("name", "")),
                        names[a.container_index],
                        str(a.device_index),
                        a.gpu_uuid,
                        a.mig_uuid,
                        a.slot.profile,
                        str(a.gpu_instance_id),
                        str(a.compute_instance_id),
                    ),
                    1,
                )

    def _allocated_bytes(self, pod: Pod, container: str) -> dict[str, int]:
        """Device UUID -> bytes the scheduler allocated to ``container`` (its
        ``*-devices-allocated`` annotation, which only the scheduler may write:
        PROTOCOL.md §3, §6). The limit in a region is written from inside the container,
        so a tenant could forge it; this one it cannot. Empty when unreadable."""
        try:
            allocation = pod_allocation(pod, self.backends.device_types())
        except AnnotationError:
            return {}
        names = [str(c.get("name", "")) for c, _, _ in containers(pod)]
        if container not in names:
            return {}
        index = names.index(container)
        out: dict[str, int] = {}
        for per_pod in allocation.values():
            if index < len(per_pod):
                for slice_ in per_pod[index]:
                    out[slice_.uuid] = slice_.memory_mib * MIB
        return out

    def _emit(
        self,
        f: dict[str, Family],
        namespace: str,
        pod: str,
        uid: str,
        container: str,
        readings: Iterable[_DeviceReading],
        now: float,
    ) -> None:
        for r in readings:
            labels = (namespace, pod, container, str(r.vdevice_index), r.uuid)
            used = r.buffer_bytes + r.context_bytes
            key = (uid, container, r.uuid)
            util = self._utilization(key, r.busy_ns, now)
            f["hami_vgpu_memory_used_bytes"].add(labels, used)
            f["hami_vgpu_memory_limit_bytes"].add(labels, r.limit_bytes)
            f["hami_container_device_memory_bytes"].add(labels, used)
            f["hami_container_device_utilization_ratio"].add(labels, util)
            f["hami_vgpu_memory_context_bytes"].add(labels, r.context_bytes)
            f["hami_vgpu_memory_module_bytes"].add(labels, 0)
            f["hami_vgpu_memory_buffer_bytes"].add(labels, r.buffer_bytes)
            f["hami_vgpu_memory_oversubscribed_bytes"].add(labels, r.oversubscribed_bytes)
            f["hami_vgpu_memory_usage_bytes"].add(labels, used)
            f["hami_vgpu_utilization_percent"].add(labels, util)
            elapsed = self._last_kernel(key, r.launches, now)
            if elapsed is not None:
                f["hami_container_last_kernel_elapsed_seconds"].add(labels, elapsed)

    def _utilization(self, key: tuple[str, str, str], busy_ns: int, now: float) -> float:
        """Percent of wall time the container's kernels ran since the previous scan."""
        prev = self._busy.get(key)
        self._busy[key] = (now, busy_ns)
        if prev is None or now <= prev[0] or busy_ns < prev[1]:
            return 0.0
        return min(100.0, 100.0 * (busy_ns - prev[1]) / ((now - prev[0]) * 1e9))

    def _last_kernel(self, key: tuple[str, str, str], launches: int, now: float) -> float | None:
        """Seconds since the launch count last grew; None until it was seen growing."""
        prev = self._kernels.get(key)
        if prev is None:
            self._kernels[key] = (launches, None)
            return None
        count, at = prev
        if launches > count:
            self._kernels[key] = (launches, now)
            return 0.0
        self._kernels[key] = (launches, at)
        return None if at is None else max(0.0, now - at)

    # -- garbage collection ----------------------------------------------------------

    def _maybe_remove(self, root_fd: int, entry: str, now: float) -> None:
        since = self._missing_since.setdefault(entry, now)
        if now - since < self.grace_s:
            return
        path = f"{self.root.rstrip('/')}/{entry}"
        try:
            # rmtree works on descriptors and never follows links inside the tree
            # (shutil.rmtree.avoids_symlink_attacks on Linux).
            shutil.rmtree(entry, dir_fd=root_fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self._log_once(path, str(exc), "cannot remove the directory of a gone pod: %s")
            return
        del self._missing_since[entry]
        self.stats.removed_directories += 1
        for key in [k for k in self._busy if f"{k[0]}_{k[1]}" == entry]:
            del self._busy[key]
        for key in [k for k in self._kernels if f"{k[0]}_{k[1]}" == entry]:
            del self._kernels[key]
        log.info("removed %s: its pod is gone since %.0fs", path, now - since)

    # -- the monitor's own metrics ---------------------------------------------------

    def _collect_own(self, f: dict[str, Family]) -> None:
        for reason, n in sorted(self.stats.skipped.items()):
            f["hami_monitor_usage_files_skipped_total"].add((reason,), n)
        f["hami_monitor_directories_removed_total"].add((), self.stats.removed_directories)
        for backend, n in sorted(self.stats.host_errors.items()):
            f["hami_monitor_host_errors_total"].add((backend,), n)

    def _skip(self, path: str, reason: str, message: str) -> None:
        self.stats.skipped[reason] = self.stats.skipped.get(reason, 0) + 1
        self._log_once(path, reason, "skipped a usage file: %s", message)

    def _log_once(self, key: str, reason: str, fmt: str, message: str | None = None) -> None:
        if self._logged.get(key) == reason:
            return
        self._logged[key] = reason
        log.warning(fmt, message if message is not None else reason)


def _container_names(pod: Pod) -> set[str]:
    spec = pod.get("spec") or {}
    return {
        str(c.get("name", ""))
        for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
    }


def _readings(usage: ContainerUsage, live: frozenset[tuple[int, int]]) -> list[_DeviceReading]:
    """Per device of the file: its limit, memory summed over live processes only, and
    GPU time and launches as counters that never go back: every listed process's (a
    dead one's until its slot is reclaimed) plus those of processes that left."""
    alive = [p for p in usage.processes if (p.pid, p.start_time_ticks) in live]
    out = []
    for d in usage.devices:
        samples = [p.devices[d.uuid] for p in alive if d.uuid in p.devices]
        listed = [p.devices[d.uuid] for p in usage.processes if d.uuid in p.devices]
        out.append(
            _DeviceReading(
                vdevice_index=d.index,
                uuid=d.uuid,
                limit_bytes=d.memory_limit_bytes,
                buffer_bytes=sum(s.buffer_bytes for s in samples),
                context_bytes=sum(s.context_bytes for s in samples),
                busy_ns=d.exited_busy_ns + sum(s.busy_ns for s in listed),
                launches=d.exited_launches + sum(s.launches for s in listed),
                oversubscribed_bytes=sum(s.oversubscribed_bytes for s in samples),
            )
        )
    return out


def _families() -> dict[str, Family]:
    specs: list[tuple[str, str, tuple[str, ...], str]] = [
        (
            "hami_host_gpu_memory_used_bytes",
            "GPU device memory in use, bytes (NVML).",
            HOST_LABELS,
            "gauge",
        ),
        (
            "hami_host_gpu_utilization_ratio",
            "GPU core utilization, 0..100 (NVML).",
            HOST_LABELS,
            "gauge",
        ),
        (
            "hami_host_gpu_memory_controller_utilization_ratio",
            "GPU memory controller utilization, 0..100 (NVML).",
            HOST_LABELS[1:],
            "gauge",
        ),
        (
            "hami_gpu_memory_used_bytes",
            "GPU device memory in use, bytes (handbook name).",
            HOST_LABELS,
            "gauge",
        ),
        (
            "hami_gpu_memory_total_bytes",
            "GPU device memory, bytes (handbook name).",
            HOST_LABELS,
            "gauge",
        ),
        (
            "hami_vgpu_memory_used_bytes",
            "Device memory a container's live processes use, bytes.",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_vgpu_memory_limit_bytes",
            "Device memory limit of a container, bytes.",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_container_device_memory_bytes",
            "Device memory a container's live processes use, bytes.",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_container_device_utilization_ratio",
            "Share of time a container's kernels ran since the last scrape, 0..100.",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_container_last_kernel_elapsed_seconds",
            "Seconds since a container last launched a kernel.",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_vgpu_memory_context_bytes",
            "Device memory beyond a container's allocations (context, rounding), bytes.",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_vgpu_memory_module_bytes",
            "Device memory of loaded modules, bytes (not measured separately: 0).",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_vgpu_memory_buffer_bytes",
            "Device memory of a container's allocations, bytes.",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            # Ours (HAMi 2.10 has no such series): CUDA_OVERSUBSCRIBE's host-backed part
            # of the buffer bytes above, charged to the limit but not on the device.
            "hami_vgpu_memory_oversubscribed_bytes",
            "Part of a container's allocations served from host memory "
            "(memory oversubscription), bytes.",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            # HAMi 2.10 cmd/vGPUmonitor/metrics.go: one series per realised MIG device of
            # a container (hami.io/vgpu-mig-allocations with its runtime triple).
            "hami_mig_device_info",
            "MIG runtime identity for a container allocation.",
            (*CONTAINER_LABELS, "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id"),
            "gauge",
        ),
        (
            "hami_vgpu_memory_usage_bytes",
            "Device memory a container uses, bytes (handbook name).",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_vgpu_utilization_percent",
            "Container device utilization, 0..100 (handbook name).",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_monitor_usage_files_skipped_total",
            "Usage files skipped (corrupt, foreign, hostile), per reason.",
            ("reason",),
            "counter",
        ),
        (
            "hami_monitor_directories_removed_total",
            "Container directories of gone pods removed.",
            (),
            "counter",
        ),
        (
            "hami_monitor_host_errors_total",
            "Scrapes whose host figures failed, per backend.",
            ("backend",),
            "counter",
        ),
    ]
    return {name: Family(name, help_, labels, kind) for name, help_, labels, kind in specs}  # type: ignore[arg-type]
