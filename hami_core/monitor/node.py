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

Against a tenant (issue 24 item 16): one malformed pod or directory is skipped and
counted (``hami_monitor_scan_errors_total``), never the whole scan; a gone pod's tree is
removed with bounded descriptors and work per scan (``remove_tree``), whatever its
depth; per-series state lives only while its series is scanned, and one container has
at most ``MAX_SERIES_PER_CONTAINER`` series (the rest dropped and counted); ``latest``
serves one scan to every request within its age, so a client looping /metrics costs
one scan per ``max_age_s``, not one per request.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from hami_core.backend import remove_tree
from hami_core.errors import AnnotationError, HamiError, InvalidInputError
from hami_core.facts.usage import pod_allocation
from hami_core.model import ContainerUsage, DeviceTypeInfo, HostDevice
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.migallocations import decode_mig_allocations
from hami_core.protocol.pods import containers, is_live

from .families import Family
from .files import UntrustedFileError, cap_tenant_file, open_directory, read_tenant_file
from .hostusage import HostMeasure, measure
from .overuse import Overuse, OveruseEnforcer
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
        scan_errors: unexpected failures per part of a scan: ``pod`` (one pod object),
            ``container`` (one container directory), ``scan`` (the scan as a whole; the
            families collected before it are still served).
        series_dropped: container series over ``MAX_SERIES_PER_CONTAINER``, per scan.
        truncated_files: usage files cut back to their largest size (a tenant writing
            past the end of its region to fill the node's disk), and the bytes cut.
    """

    skipped: dict[str, int] = attrs.field(factory=dict)
    removed_directories: int = 0
    host_errors: dict[str, int] = attrs.field(factory=dict)
    scan_errors: dict[str, int] = attrs.field(factory=dict)
    series_dropped: int = 0
    truncated_files: int = 0
    truncated_bytes: int = 0


@attrs.frozen
class Scan:
    """One scan's result, shared by every request that asks within its age.

    Attributes:
        families: the metric families.
        at: when it was made (the monitor's monotonic clock, seconds).
        seq: its number (1 for the first scan); a new number is a new scan.
        error: why the scan failed as a whole (its families are partial), else None.
    """

    families: list[Family]
    at: float
    seq: int
    error: str | None = None


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

    #: Most device series one container has: a region holds 16 devices (shim
    #: ``REGION_MAX_DEVICES``, HAMi-core's ``CUDA_DEVICE_MAX_COUNT``).
    MAX_SERIES_PER_CONTAINER = 16
    #: Most removal operations (unlink, rmdir, rename) one scan spends on gone pods'
    #: directories; the rest waits for the next scan.
    REMOVAL_BUDGET = 20_000

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
        overuse: OveruseEnforcer | None = None,
        overuse_tolerance_bytes: int = 0,
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
        overuse: what to do about a container over its allocation measured from the
            host (Events, evictions); None: metrics only.
        overuse_tolerance_bytes: bytes a container may hold beyond its allocation,
            measured from the host, before it is an overuse (the metric shows the
            whole excess regardless).
        """
        self.backends = backends
        self.root = root
        self.node_name = node_name
        self.pods = pods
        self.grace_s = grace_s
        self.proc_root = proc_root
        self.clock = clock
        self.overuse = overuse
        self.overuse_tolerance_bytes = overuse_tolerance_bytes
        self.stats = MonitorStats()
        self._lock = threading.Lock()
        self._files: dict[str, dict[str, tuple[int, ...]]] | None = None
        self._missing_since: dict[str, float] = {}
        self._logged: dict[str, str] = {}
        self._busy: dict[tuple[str, str, str], tuple[float, int]] = {}
        self._kernels: dict[tuple[str, str, str], tuple[int, float | None]] = {}
        self._seen_series: set[tuple[str, str, str]] = set()
        self._removal_budget = self.REMOVAL_BUDGET
        self._last: Scan | None = None
        self._seq = 0

    # -- public ----------------------------------------------------------------------

    def collect(self) -> list[Family]:
        """One fresh scan: the node's metric families (PROTOCOL.md §9, node monitor).
        Never raises: a failure is counted and the families made before it are
        returned (``latest`` also says why)."""
        return self._scan().families

    def latest(self, max_age_s: float) -> Scan:
        """The last scan if it is at most ``max_age_s`` old, else a new one.

        Concurrent callers share one scan: one scans while the others wait for it, and
        then take it (single flight), so N requests cost one scan, not N.

        Args:
            max_age_s: the oldest scan served, seconds (0: always a new one, unless
                another caller's scan completes while this one waits for it).
        Raises:
            ValueError: ``max_age_s`` is negative or not a number.
        """
        if not max_age_s >= 0 or math.isinf(max_age_s):
            raise ValueError(f"max_age_s must be a finite number >= 0, got {max_age_s!r}")
        asked = self.clock()
        last = self._last
        if last is not None and asked - last.at <= max_age_s:
            return last
        with self._lock:
            last = self._last
            # made while this caller waited for the lock, or young enough
            if last is not None and (last.at >= asked or self.clock() - last.at <= max_age_s):
                return last
            return self._scan_locked()

    def state_size(self) -> int:
        """How many series the monitor keeps state for (utilisation, last kernel)."""
        return len(self._busy.keys() | self._kernels.keys())

    def _scan(self) -> Scan:
        with self._lock:
            return self._scan_locked()

    def _scan_locked(self) -> Scan:
        now = self.clock()
        families = _families()
        self._seen_series = set()
        self._removal_budget = self.REMOVAL_BUDGET
        error: str | None = None
        try:
            host = self._collect_host(families)
            pods = self._collect_containers(families, now)
            self._collect_host_usage(families, host, pods)
        except Exception as exc:  # one bug or hostile input must not end every scrape
            self._count_error("scan")
            error = f"{type(exc).__name__}: {exc}"
            self._log_once("scan", error, "the scan failed; serving what it read: %s")
            log.debug("scan failure", exc_info=True)
        else:
            self._logged.pop("scan", None)
            self._forget_unseen_series()
        self._collect_own(families)
        self._seq += 1
        self._last = Scan(families=list(families.values()), at=now, seq=self._seq, error=error)
        return self._last

    # -- host devices ----------------------------------------------------------------

    def _collect_host(self, f: dict[str, Family]) -> list[HostDevice]:
        out: list[HostDevice] = []
        for record in self.backends.backends:
            name = record.name
            try:
                devices = self.backends.host_devices(name)
            except HamiError as exc:
                self.stats.host_errors[name] = self.stats.host_errors.get(name, 0) + 1
                self._log_once(f"host:{name}", str(exc), f"backend {name}: no host figures: %s")
                continue
            self._logged.pop(f"host:{name}", None)
            out.extend(devices or ())
            for d in devices or ():
                labels = (self.node_name, str(d.index), d.uuid, d.device_type)
                f["hami_host_gpu_memory_used_bytes"].add(labels, d.memory_used_bytes)
                f["hami_host_gpu_utilization_ratio"].add(labels, d.utilization_pct)
                f["hami_host_gpu_memory_controller_utilization_ratio"].add(
                    labels[1:], d.memory_utilization_pct
                )
                f["hami_gpu_memory_used_bytes"].add(labels, d.memory_used_bytes)
                f["hami_gpu_memory_total_bytes"].add(labels, d.memory_total_bytes)
        return out

    def _collect_host_usage(
        self, f: dict[str, Family], devices: list[HostDevice], pods: dict[str, Pod] | None
    ) -> None:
        """Each container's device memory from NVML's per-process accounting and the
        processes' cgroups (``hostusage``), against the scheduler's allocation; a
        container over it (beyond ``overuse_tolerance_bytes``) goes to ``overuse``.
        Only pods with a HAMi allocation are held to one (a pod of another device
        plugin, the MPS daemon, is shown but not judged)."""
        if pods is None:
            return
        host: HostMeasure = measure(devices, pods, proc_root=self.proc_root)
        if not host.attributable:
            self._log_once(
                "hostpid",
                "no",
                "not in the host's PID namespace (hostPID): NVML's process ids cannot be "
                "attributed, so no container is measured from the host (%s)",
                self.proc_root,
            )
        index = {d.uuid: d.index for d in devices}
        for uuid, used in sorted(host.unattributed.items()):
            f["hami_host_gpu_unattributed_memory_bytes"].add(
                (self.node_name, str(index.get(uuid, "")), uuid), used
            )
        found: list[Overuse] = []
        for r in host.readings:
            pod = pods[r.pod_uid]
            meta = pod.get("metadata") or {}
            allocated = self._allocated_bytes(pod, r.container)
            order = list(allocated)
            labels = (
                str(meta.get("namespace", "")),
                str(meta.get("name", "")),
                r.container,
                str(order.index(r.device_uuid)) if r.device_uuid in allocated else "",
                r.device_uuid,
            )
            f["hami_container_device_memory_host_bytes"].add(labels, r.used_bytes)
            if not self._has_allocation(pod):
                continue
            limit = allocated.get(r.device_uuid, 0)
            f["hami_container_device_memory_over_allocation_bytes"].add(
                labels, max(0, r.used_bytes - limit)
            )
            if r.used_bytes > limit + self.overuse_tolerance_bytes:
                found.append(
                    Overuse(
                        pod=pod,
                        container=r.container,
                        device_uuid=r.device_uuid,
                        used_bytes=r.used_bytes,
                        limit_bytes=limit,
                        pids=r.pids,
                    )
                )
        if self.overuse is not None:
            self.overuse.handle(found)

    def _has_allocation(self, pod: Pod) -> bool:
        """Whether the scheduler allocated the pod any device (a readable
        ``*-devices-allocated`` annotation naming one)."""
        try:
            allocation = pod_allocation(pod, self.backends.device_types())
        except AnnotationError:
            return False
        return any(slices for per_pod in allocation.values() for slices in per_pod)

    # -- containers ------------------------------------------------------------------

    def _usage_files(self) -> dict[str, dict[str, tuple[int, ...]]]:
        if self._files is None:
            files: dict[str, dict[str, tuple[int, ...]]] = {}
            for record in self.backends.backends:
                for fname, size in self.backends.usage_files(record.name).items():
                    files.setdefault(record.name, {})[fname] = size
            self._files = files
        return self._files

    def _collect_containers(self, f: dict[str, Family], now: float) -> dict[str, Pod] | None:
        """The container directories' metrics; returns this node's pods by UID (None
        while they are not listed)."""
        pods = self.pods()
        by_uid: dict[str, Pod] | None = None
        if pods is not None:
            by_uid = {}
            for pod in pods:
                uid = None
                try:
                    uid = (pod.get("metadata") or {}).get("uid")
                    if uid:
                        by_uid[str(uid)] = pod
                    self._mig_info(f, pod)
                except Exception as exc:  # a malformed pod object: skip it, count it
                    self._count_error("pod")
                    self._log_once("pod", str(exc), "skipped a malformed pod: %s", f"{uid}: {exc}")
        try:
            root_fd = open_directory(self.root)
        except FileNotFoundError:
            return by_uid
        except UntrustedFileError as exc:
            self._log_once("root", str(exc), "monitor root unusable: %s")
            return by_uid
        try:
            entries = sorted(os.listdir(root_fd))
        except OSError as exc:
            self._log_once("root", str(exc), "cannot list the monitor root: %s")
            os.close(root_fd)
            return by_uid
        live = live_processes(self.proc_root)
        seen: set[str] = set()
        try:
            for entry in entries:
                match = DIRECTORY_NAME.match(entry)
                if match is None:
                    continue  # not a directory the device plugin made: leave it alone
                seen.add(entry)
                if by_uid is None:
                    continue
                try:
                    self._collect_container(f, root_fd, entry, match, by_uid, live, now)
                except Exception as exc:  # one directory or pod must not end the scan
                    self._count_error("container")
                    where = f"{self.root.rstrip('/')}/{entry}"
                    self._log_once(where, str(exc), "skipped a container: %s", f"{where}: {exc}")
        finally:
            os.close(root_fd)
        for gone in set(self._missing_since) - seen:
            del self._missing_since[gone]
        prefix = f"{self.root.rstrip('/')}/"
        for key in [k for k in self._logged if k.startswith(prefix)]:
            if key[len(prefix) :].split("/", 1)[0] not in seen:
                del self._logged[key]
        return by_uid

    def _collect_container(
        self,
        f: dict[str, Family],
        root_fd: int,
        entry: str,
        match: re.Match[str],
        by_uid: dict[str, Pod],
        live: frozenset[tuple[int, int]],
        now: float,
    ) -> None:
        uid, container = match.group(1), match.group(2)
        owner = by_uid.get(uid)
        if owner is None:
            self._maybe_remove(root_fd, entry, now)
            return
        self._missing_since.pop(entry, None)
        if container not in _container_names(owner):
            return
        readings = self._read_container(root_fd, entry, live)
        allocated = self._allocated_bytes(owner, container)
        readings = [
            attrs.evolve(r, limit_bytes=allocated[r.uuid]) if r.uuid in allocated else r
            for r in readings
        ]
        readings = self._bounded(readings, allocated)
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

    def _bounded(
        self, readings: list[_DeviceReading], allocated: Mapping[str, int]
    ) -> list[_DeviceReading]:
        """At most ``MAX_SERIES_PER_CONTAINER`` readings, one per UUID: the devices the
        scheduler allocated first, then in the region's order; the rest are counted."""
        unique: dict[str, _DeviceReading] = {}
        for r in sorted(readings, key=lambda r: r.uuid not in allocated):
            unique.setdefault(r.uuid, r)
        kept = list(unique.values())[: self.MAX_SERIES_PER_CONTAINER]
        self.stats.series_dropped += len(readings) - len(kept)
        return kept

    def _forget_unseen_series(self) -> None:
        """Drop the state of series this scan did not make (a device UUID a region no
        longer names, a container that stopped): the state follows the series."""
        for table in (self._busy, self._kernels):
            for key in [k for k in table if k not in self._seen_series]:
                del table[key]

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
                    self._cap(dir_fd, fname, max(size), path)
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

    def _cap(self, dir_fd: int, name: str, max_bytes: int, path: str) -> None:
        """Cut a usage file grown past its largest size back to it (a tenant filling
        the node's disk through its one writable host file), counted and logged."""
        try:
            cut = cap_tenant_file(name, max_bytes, dir_fd=dir_fd)
        except OSError as exc:
            self._log_once(f"{path}:cap", str(exc), "cannot truncate an oversized file: %s")
            return
        if cut:
            self.stats.truncated_files += 1
            self.stats.truncated_bytes += cut
            log.warning("%s: grown %d bytes past its %d; truncated", path, cut, max_bytes)

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
            self._seen_series.add(key)
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
        if self._removal_budget <= 0:
            return
        spent = [0]
        try:
            # descriptor-based, never follows a link, bounded in depth and work: a tree
            # the tenant made thousands deep or wide is removed over several scans
            done = remove_tree(entry, dir_fd=root_fd, max_entries=self._removal_budget, spent=spent)
        except OSError as exc:
            self._log_once(path, str(exc), "cannot remove the directory of a gone pod: %s")
            self._removal_budget = 0
            return
        finally:
            self._removal_budget -= spent[0]
        if not done:
            self._log_once(path, "partial", "removing the large directory of a gone pod: %s")
            return
        self._logged.pop(path, None)
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
        for part, n in sorted(self.stats.scan_errors.items()):
            f["hami_monitor_scan_errors_total"].add((part,), n)
        f["hami_monitor_series_dropped_total"].add((), self.stats.series_dropped)
        if self.overuse is not None:
            o = self.overuse.stats
            f["hami_monitor_overuse_total"].add((), o.found)
            f["hami_monitor_overuse_events_total"].add((), o.events)
            f["hami_monitor_overuse_evictions_total"].add((), o.evictions)
            f["hami_monitor_overuse_action_failures_total"].add((), o.failures)
        f["hami_monitor_files_truncated_total"].add((), self.stats.truncated_files)
        f["hami_monitor_truncated_bytes_total"].add((), self.stats.truncated_bytes)

    def _count_error(self, part: str) -> None:
        self.stats.scan_errors[part] = self.stats.scan_errors.get(part, 0) + 1

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
        (
            "hami_monitor_scan_errors_total",
            "Unexpected failures skipped in a scan, per part (pod, container, scan).",
            ("part",),
            "counter",
        ),
        (
            # Ours (issue 24 item 19): from the host, not from the tenant-written region.
            "hami_container_device_memory_host_bytes",
            "Device memory a container's processes hold, bytes, measured from the host "
            "(NVML per process, attributed by cgroup).",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_container_device_memory_over_allocation_bytes",
            "Device memory a container holds beyond what the scheduler allocated it, "
            "bytes, measured from the host (0 within it).",
            CONTAINER_LABELS,
            "gauge",
        ),
        (
            "hami_host_gpu_unattributed_memory_bytes",
            "Device memory held by processes of no pod on this node, bytes (NVML).",
            ("node", "device_index", "device_uuid"),
            "gauge",
        ),
        (
            "hami_monitor_overuse_total",
            "Containers seen over their allocation from the host, per scan and device.",
            (),
            "counter",
        ),
        (
            "hami_monitor_overuse_events_total",
            "Warning Events written about containers over their allocation.",
            (),
            "counter",
        ),
        (
            "hami_monitor_overuse_evictions_total",
            "Evictions requested of pods over their allocation (hami.io/overuse-policy: evict).",
            (),
            "counter",
        ),
        (
            "hami_monitor_overuse_action_failures_total",
            "Events or evictions about overuse that the API server refused.",
            (),
            "counter",
        ),
        (
            "hami_monitor_files_truncated_total",
            "Usage files a tenant grew past their size, truncated back.",
            (),
            "counter",
        ),
        (
            "hami_monitor_truncated_bytes_total",
            "Bytes cut off usage files grown past their size.",
            (),
            "counter",
        ),
        (
            "hami_monitor_series_dropped_total",
            "Container device series dropped over the per-container cap.",
            (),
            "counter",
        ),
    ]
    return {name: Family(name, help_, labels, kind) for name, help_, labels, kind in specs}  # type: ignore[arg-type]
