"""NVML behind a small interface: what discovery, health and topology need, in plain
Python values.

``PynvmlLibrary`` is the real one: NVIDIA's ``nvidia-ml-py`` (module ``pynvml``), which
loads ``libnvidia-ml.so.1`` through the dynamic loader, so ``LD_LIBRARY_PATH`` decides
which library answers (the tests put a stand-in written in C first). Tests of the pure
logic use a Python fake of ``Nvml`` instead.

Source of the calls and constants: NVML API reference (docs.nvidia.com/deploy/nvml-api),
``nvmlDeviceGetMemoryInfo`` (bytes), ``nvmlDeviceGetPciInfo_v3`` (``busId``
``DDDDDDDD:BB:DD.F``), ``nvmlDeviceGetMigMode``, ``nvmlEventSetWait_v2`` (XID in
``eventData``), ``nvmlDeviceGetTopologyCommonAncestor``, ``nvmlDeviceGetNvLinkState``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from .nvml_errors import NvmlError, NvmlMissingError, nvml_call, reason_of
from .nvml_mig import NvmlMigInstance, NvmlMigProfile, PynvmlMig

__all__ = [
    "Nvml",
    "NvmlError",
    "NvmlGpu",
    "NvmlMissingError",
    "NvmlUsage",
    "PynvmlLibrary",
    "XidEvent",
    "normalise_bus_id",
    "running_processes",
]

log = logging.getLogger(__name__)

#: NVML event masks (nvml.h ``nvmlEventType*``).
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
#: NVML return codes used here (nvml.h ``nvmlReturn_t``).
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
#: ``nvmlGpuTopologyLevel_t``: same board, one PCIe switch, several switches, host
#: bridge, same CPU (NUMA node), across CPUs.
TOPOLOGY_INTERNAL = 0
TOPOLOGY_SINGLE = 10
TOPOLOGY_MULTIPLE = 20
TOPOLOGY_HOSTBRIDGE = 30
TOPOLOGY_NODE = 40
TOPOLOGY_SYSTEM = 50
NVLINK_MAX_LINKS = 18


@attrs.frozen(kw_only=True)
class NvmlUsage:
    """What one GPU is doing now (NVML): bytes in use of total, utilization 0..100, and
    per process (host PID) the bytes it holds; ``processes`` None when NVML cannot
    list them (an old driver, a MIG-enabled GPU queried without instance handles)."""

    index: int
    uuid: str
    name: str
    memory_used_bytes: int
    memory_total_bytes: int
    utilization_pct: float
    memory_utilization_pct: float
    processes: tuple[tuple[int, int], ...] | None = None


@attrs.frozen(kw_only=True)
class NvmlGpu:
    """One GPU as NVML reports it, before any hami scaling.

    Attributes:
        index: the NVML index.
        uuid: ``GPU-...``.
        name: the model name as NVML gives it, e.g. ``NVIDIA A100-SXM4-80GB``.
        memory_mib: total memory in MiB (bytes // 2**20), or None when NVML reports
            none (unified-memory systems answer NOT_SUPPORTED or 0).
        bus_id: PCI bus id, NVML form ``00000000:3B:00.0``.
        mig_enabled: True when MIG mode is on (current mode).
        error: why NVML did not answer for this GPU ("" when it did); the other fields
            are then empty, ``uuid`` too when even the handle or UUID failed.
    """

    index: int
    uuid: str
    name: str = ""
    memory_mib: int | None = None
    bus_id: str = ""
    mig_enabled: bool = False
    error: str = ""


@attrs.frozen(kw_only=True)
class XidEvent:
    """A health event: ``uuid`` None means "not attributable: every GPU"."""

    uuid: str | None
    event_type: int
    xid: int


class Nvml(Protocol):
    """What hami-nvidia needs of NVML. Every method raises ``NvmlError``."""

    def gpus(self) -> list[NvmlGpu]:
        """Every GPU, index order; a GPU NVML cannot query has ``error`` set."""
        ...

    def probe(self, uuid: str) -> None:
        """Raise unless the GPU answers (handle by UUID, then its memory info)."""
        ...

    def watch(self) -> list[str]:
        """Register for XID / ECC events on every GPU that supports them; returns the
        UUIDs that do not (they get no event-based health)."""
        ...

    def wait_event(self, timeout_ms: int) -> XidEvent | None:
        """The next event, or None after ``timeout_ms``. Call ``watch`` first."""
        ...

    def common_ancestor(self, index_a: int, index_b: int) -> int:
        """``TOPOLOGY_*`` level of the closest common PCIe ancestor of two GPUs."""
        ...

    def nvlink_peers(self, index: int) -> Mapping[str, int]:
        """Active NVLinks of a GPU: normalised peer bus id -> number of links."""
        ...

    def mig_profiles(self, index: int) -> list[NvmlMigProfile]:
        """The GPU instance profiles of a GPU in MIG mode, with their placements."""
        ...

    def mig_instances(self, index: int) -> list[NvmlMigInstance]:
        """The GPU instances of a GPU in MIG mode (with compute instance and MIG UUID)."""
        ...

    def create_mig_instance(
        self, index: int, profile_id: int, start: int, size: int
    ) -> NvmlMigInstance:
        """Create a GPU instance at a placement and a compute instance covering it."""
        ...

    def destroy_mig_instance(self, index: int, gpu_instance_id: int) -> None:
        """Destroy a GPU instance and its compute instances (gone already: no error)."""
        ...


def normalise_bus_id(bus_id: str) -> str:
    """``00000000:3B:00.0`` -> ``0000:3b:00.0``: the form of ``/sys/bus/pci/devices``
    (4-digit domain, lower case)."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if sep and len(domain) > 4:
        domain = domain[-4:]
    return f"{domain}{sep}{rest}"


class PynvmlLibrary(PynvmlMig):
    """``Nvml`` through ``pynvml``; initialises NVML once, on first use. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._started = False
        self._events: Any = None

    def start(self) -> None:
        """``nvmlInit``, once.

        Raises:
            NvmlMissingError: ``libnvidia-ml.so.1`` not found (no driver).
            NvmlError: NVML does not initialise (driver not loaded, version mismatch...).
        """
        with self._lock:
            if self._started:
                return
            import pynvml

            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                code = int(getattr(exc, "value", 0) or 0)
                if code == NVML_ERROR_LIBRARY_NOT_FOUND:
                    raise NvmlMissingError("nvmlInit", code, reason_of(exc)) from None
                raise NvmlError(
                    "nvmlInit",
                    code,
                    f"{reason_of(exc)}: NVML does not initialise; is the NVIDIA driver loaded "
                    "and libnvidia-ml.so.1 the one of that driver?",
                ) from None
            self._started = True

    def gpus(self) -> list[NvmlGpu]:
        with self._lock:
            self.start()
            import pynvml

            count = nvml_call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
            return [self._gpu(pynvml, index) for index in range(count)]

    def _gpu(self, pynvml: Any, index: int) -> NvmlGpu:
        try:
            handle = nvml_call(
                "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index
            )
            uuid = str(nvml_call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
        except NvmlError as exc:
            return NvmlGpu(index=index, uuid="", error=str(exc))
        try:
            try:
                memory = nvml_call(
                    "nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle
                )
                memory_mib: int | None = int(memory.total) // (1 << 20) or None
            except NvmlError as exc:
                if exc.code != NVML_ERROR_NOT_SUPPORTED:
                    raise
                memory_mib = None  # unified memory
            pci = nvml_call("nvmlDeviceGetPciInfo", pynvml.nvmlDeviceGetPciInfo, handle)
            bus_id = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
            try:
                current, _pending = nvml_call(
                    "nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle
                )
                mig = int(current) == 1
            except NvmlError as exc:
                if exc.code not in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
                    raise
                mig = False
            name = str(nvml_call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
        except NvmlError as exc:
            return NvmlGpu(index=index, uuid=uuid, error=str(exc))
        return NvmlGpu(
            index=index,
            uuid=uuid,
            name=name,
            memory_mib=memory_mib,
            bus_id=bus_id,
            mig_enabled=mig,
        )

    def usage(self) -> list[NvmlUsage]:
        """Memory in use and utilization rates of every GPU, index order (the node
        monitor's host figures). A GPU whose figures NVML refuses is left out (logged).

        Source: NVML API reference, ``nvmlDeviceGetMemoryInfo`` (bytes) and
        ``nvmlDeviceGetUtilizationRates`` (percent of the last sample period).

        Raises:
            NvmlMissingError / NvmlError: NVML does not initialise or cannot count GPUs.
        """
        with self._lock:
            self.start()
            import pynvml

            out = []
            for index in range(nvml_call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)):
                try:
                    handle = nvml_call(
                        "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index
                    )
                    uuid = str(nvml_call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
                    name = str(nvml_call("nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
                    try:
                        mem = nvml_call(
                            "nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle
                        )
                        used, total = int(mem.used), int(mem.total)
                    except NvmlError as exc:
                        if exc.code != NVML_ERROR_NOT_SUPPORTED:
                            raise
                        used = total = 0  # unified memory: no device memory figures
                    try:
                        rates = nvml_call(
                            "nvmlDeviceGetUtilizationRates",
                            pynvml.nvmlDeviceGetUtilizationRates,
                            handle,
                        )
                        gpu_pct, mem_pct = float(rates.gpu), float(rates.memory)
                    except NvmlError as exc:
                        if exc.code not in (
                            NVML_ERROR_NOT_SUPPORTED,
                            NVML_ERROR_FUNCTION_NOT_FOUND,
                        ):
                            raise
                        gpu_pct = mem_pct = 0.0
                    processes = running_processes(pynvml, handle)
                except NvmlError as exc:
                    log.warning("GPU %d: no figures from NVML: %s", index, exc)
                    continue
                out.append(
                    NvmlUsage(
                        index=index,
                        uuid=uuid,
                        name=name,
                        memory_used_bytes=used,
                        memory_total_bytes=total,
                        utilization_pct=gpu_pct,
                        memory_utilization_pct=mem_pct,
                        processes=processes,
                    )
                )
            return out

    def probe(self, uuid: str) -> None:
        with self._lock:
            self.start()
            import pynvml

            handle = nvml_call(
                "nvmlDeviceGetHandleByUUID", pynvml.nvmlDeviceGetHandleByUUID, uuid.encode()
            )
            nvml_call("nvmlDeviceGetMemoryInfo", pynvml.nvmlDeviceGetMemoryInfo, handle)

    def watch(self) -> list[str]:
        with self._lock:
            self.start()
            import pynvml

            if self._events is None:
                self._events = nvml_call("nvmlEventSetCreate", pynvml.nvmlEventSetCreate)
            unsupported = []
            wanted = EVENT_XID_CRITICAL | EVENT_DOUBLE_BIT_ECC | EVENT_SINGLE_BIT_ECC
            for index in range(nvml_call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)):
                handle = nvml_call(
                    "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index
                )
                uuid = str(nvml_call("nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
                try:
                    supported = nvml_call(
                        "nvmlDeviceGetSupportedEventTypes",
                        pynvml.nvmlDeviceGetSupportedEventTypes,
                        handle,
                    )
                    mask = int(supported) & wanted
                    if not mask & EVENT_XID_CRITICAL:
                        unsupported.append(uuid)
                    if mask:
                        nvml_call(
                            "nvmlDeviceRegisterEvents",
                            pynvml.nvmlDeviceRegisterEvents,
                            handle,
                            mask,
                            self._events,
                        )
                except NvmlError as exc:
                    if exc.code != NVML_ERROR_NOT_SUPPORTED:
                        raise
                    unsupported.append(uuid)
            return unsupported

    def wait_event(self, timeout_ms: int) -> XidEvent | None:
        # Not under the lock: the wait blocks for up to timeout_ms (ctypes releases the
        # GIL) and discovery must not wait for it.
        import pynvml

        events = self._events
        if events is None:
            raise NvmlError("nvmlEventSetWait", 0, "watch() was not called")
        try:
            data = pynvml.nvmlEventSetWait_v2(events, timeout_ms)
        except pynvml.NVMLError as exc:
            code = int(getattr(exc, "value", 0) or 0)
            if code == NVML_ERROR_TIMEOUT:
                return None
            raise NvmlError("nvmlEventSetWait", code, reason_of(exc)) from None
        uuid: str | None
        try:
            uuid = str(pynvml.nvmlDeviceGetUUID(data.device)) if data.device else None
        except pynvml.NVMLError:
            uuid = None
        return XidEvent(uuid=uuid, event_type=int(data.eventType), xid=int(data.eventData))

    def common_ancestor(self, index_a: int, index_b: int) -> int:
        with self._lock:
            self.start()
            import pynvml

            a = nvml_call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index_a)
            b = nvml_call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index_b)
            return int(
                nvml_call(
                    "nvmlDeviceGetTopologyCommonAncestor",
                    pynvml.nvmlDeviceGetTopologyCommonAncestor,
                    a,
                    b,
                )
            )

    def nvlink_peers(self, index: int) -> Mapping[str, int]:
        with self._lock:
            self.start()
            import pynvml

            handle = nvml_call(
                "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index
            )
            peers: dict[str, int] = {}
            for link in range(NVLINK_MAX_LINKS):
                try:
                    active = nvml_call(
                        "nvmlDeviceGetNvLinkState", pynvml.nvmlDeviceGetNvLinkState, handle, link
                    )
                    if not active:
                        continue
                    pci = nvml_call(
                        "nvmlDeviceGetNvLinkRemotePciInfo",
                        pynvml.nvmlDeviceGetNvLinkRemotePciInfo,
                        handle,
                        link,
                    )
                except NvmlError:
                    break  # NOT_SUPPORTED / INVALID_ARGUMENT: no (more) links
                bus = pci.busId.decode() if isinstance(pci.busId, bytes) else str(pci.busId)
                key = normalise_bus_id(bus)
                peers[key] = peers.get(key, 0) + 1
            return peers


#: The per-process calls, newest first: ``_v3`` (driver >= 510), ``_v2``; both fill
#: ``nvmlProcessInfo_v2_t`` (pid, usedGpuMemory, gpuInstanceId, computeInstanceId).
_RUNNING = (
    ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"),
    ("nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v2"),
)


def running_processes(pynvml: Any, handle: Any) -> tuple[tuple[int, int], ...] | None:
    """``(host PID, device memory bytes)`` of every process with a compute or graphics
    context on the device, one entry per PID (a process in both lists counts once, with
    the larger figure); None when NVML has no per-process accounting here.

    Source: NVML API reference, ``nvmlDeviceGetComputeRunningProcesses_v3`` and
    ``nvmlDeviceGetGraphicsRunningProcesses_v3`` (``usedGpuMemory`` in bytes, PIDs of
    the host's namespace; ``NVML_VALUE_NOT_AVAILABLE`` when the driver cannot say, as
    under Windows WDDM). An older driver without ``_v3`` answers the ``_v2`` names.

    Raises:
        NvmlError: a call failed otherwise (the GPU is lost, NVML uninitialised).
    """
    for names in _RUNNING:
        fns = [getattr(pynvml, name, None) for name in names]
        if any(fn is None for fn in fns):
            continue
        used: dict[int, int] = {}
        try:
            for name, fn in zip(names, fns, strict=True):
                for p in nvml_call(name, fn, handle):
                    if p.usedGpuMemory is None:  # not available (pynvml maps it to None)
                        continue
                    pid = int(p.pid)
                    used[pid] = max(used.get(pid, 0), int(p.usedGpuMemory))
        except NvmlError as exc:
            if exc.code == NVML_ERROR_FUNCTION_NOT_FOUND:
                continue  # an older driver: try the previous version
            if exc.code == NVML_ERROR_NOT_SUPPORTED:
                return None
            raise
        return tuple(sorted(used.items()))
    return None
