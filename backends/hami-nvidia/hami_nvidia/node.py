"""The node side of hami-nvidia: discovery, health and link scores over one NVML.

``NvidiaNode`` keeps the state that outlives one hook call: the NVML session, the
health of each GPU, and the last good record of each GPU (so a GPU NVML stops answering
for is still advertised, unhealthy, instead of vanishing from kubelet's list). The hook
implementations in ``plugin`` are one-line calls into the process's ``NvidiaNode``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from hami_core.backend import DeviceInfo, VendorConfig

from .discover import DEFAULT_SYSFS_ROOT, device_infos, numa_node
from .health import DEFAULT_IGNORED_XIDS, DEFAULT_RECOVERY_S, HealthTracker
from .migdevices import (
    ALLOWLIST_KEY,
    CREATE_GRACE_S,
    DYNAMIC,
    GRACE_KEY,
    SINGLE,
    MigManager,
    mig_device,
    single_strategy_devices,
)
from .nvml import Nvml, NvmlError, NvmlGpu, NvmlMissingError, PynvmlLibrary
from .topology import link_scores

log = logging.getLogger(__name__)

SYSFS_ENV = "HAMI_NVIDIA_SYSFS_ROOT"
#: Backend options of the node side (the ``nvidia:`` section of the hami configuration).
OPTION_DEFAULTS: dict[str, Any] = {
    # MiB a unified-memory GPU (NVML reports no memory) hands out; 0 = fail discovery.
    "unifiedMemoryMiB": 0,
    # Critical XIDs that do not make a GPU unhealthy (application errors).
    "ignoredXids": list(DEFAULT_IGNORED_XIDS),
    # Seconds without a new fault before a GPU that answers NVML is healthy again; 0 = never.
    "healthRecoverySeconds": DEFAULT_RECOVERY_S,
    # HAMi's migProfileAllowlist: [{models: [...], profiles: ["1g.10gb", ...]}]; a model no
    # entry names offers every profile NVML reports (dynamic MIG, operatingmode: mig).
    ALLOWLIST_KEY: [],
    # Seconds a dynamic MIG instance is kept after its creation even when no pod in the
    # (possibly lagging) pod list names it.
    GRACE_KEY: CREATE_GRACE_S,
}


class NvidiaNode:
    """Discovery, health watch and link scores of this node's NVIDIA GPUs. Thread-safe."""

    def __init__(
        self,
        nvml: Nvml | None = None,
        *,
        sysfs_root: str | Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        nvml: the NVML to use; default ``PynvmlLibrary`` (the real library).
        sysfs_root: where sysfs is; default ``$HAMI_NVIDIA_SYSFS_ROOT`` or ``/sys``.
        clock: monotonic seconds (tests pin it).
        """
        self.nvml: Nvml = nvml if nvml is not None else PynvmlLibrary()
        self.sysfs_root = Path(sysfs_root or os.environ.get(SYSFS_ENV) or DEFAULT_SYSFS_ROOT)
        self.clock = clock
        self.health = HealthTracker()
        self._lock = threading.Lock()
        self._known: dict[int, NvmlGpu] = {}
        self._watching = False
        self._warned_single = False
        self.mig = MigManager(self.nvml, clock=clock)

    # -- hami_discover -----------------------------------------------------------------

    def discover(self, config: VendorConfig) -> list[DeviceInfo] | None:
        """The inventory of this node's GPUs (see ``discover``), or None without a driver.

        Under ``migstrategy: single`` on a node not in dynamic MIG mode, every MIG
        instance is a device of its own (``migdevices.single_strategy_devices``).

        Raises:
            NvmlError: NVML does not initialise or cannot count the GPUs.
            ConfigError: a unified-memory GPU and no ``unifiedMemoryMiB``; under
                ``migstrategy: single``, a GPU with MIG off or no instance, or
                instances of several profiles.
        """
        try:
            reported = self.nvml.gpus()
        except NvmlMissingError as exc:
            log.warning("no NVIDIA driver on this node: %s", exc)
            return None
        gpus = self._with_last_good(reported)
        self.health.forget(g.uuid for g in gpus)
        infos = device_infos(
            gpus,
            config,
            healthy=self.health.healthy,
            numa=lambda bus_id: numa_node(bus_id, sysfs_root=self.sysfs_root),
        )
        by_index = {g.index: g for g in gpus}
        if config.mig_strategy == SINGLE:
            if config.operating_mode != DYNAMIC:
                return single_strategy_devices(
                    [(info, by_index[info.index].mig_enabled) for info in infos], self.nvml
                )
            if not self._warned_single:
                self._warned_single = True
                log.warning(
                    "migstrategy: single is not applied on a node whose operatingmode is "
                    "mig: dynamic MIG creates each instance for the pod it is chosen for"
                )
        out = []
        for info in infos:
            gpu = by_index[info.index]
            if not gpu.mig_enabled:
                if config.operating_mode == DYNAMIC:
                    log.error(
                        "GPU %d %s: the node's operatingmode is mig but MIG mode is off "
                        "(nvidia-smi -i %d -mig 1, then reset the GPU): not advertised",
                        info.index,
                        info.uuid,
                        info.index,
                    )
                    continue
                out.append(info)
                continue
            mig = mig_device(info, self.nvml, config, total_mib=gpu.memory_mib or 0)
            if mig is not None:
                out.append(mig)
        return out

    # -- hami_release ------------------------------------------------------------------

    def release(
        self, pods: Sequence[Any], devices: Sequence[DeviceInfo], config: VendorConfig
    ) -> list[str] | None:
        """Destroy dynamic MIG instances no live pod holds (``MigManager.release``);
        None on a node that is not in dynamic MIG mode (static instances are the
        administrator's: only who holds which is read, ``MigManager.observe``, so
        ``Allocate`` hands none to a second pod)."""
        if config.operating_mode != DYNAMIC:
            self.mig.observe(pods)
            return None
        return self.mig.release(pods, devices, grace_s=float(config.options[GRACE_KEY]))

    def _with_last_good(self, reported: Sequence[NvmlGpu]) -> list[NvmlGpu]:
        now = self.clock()
        out = []
        with self._lock:
            for gpu in reported:
                if not gpu.error:
                    self._known[gpu.index] = gpu
                    out.append(gpu)
                    continue
                last = self._known.get(gpu.index)
                if last is None or (gpu.uuid and gpu.uuid != last.uuid):
                    log.error("GPU %d is not advertised: NVML: %s", gpu.index, gpu.error)
                    continue
                self.health.mark(last.uuid, f"NVML does not answer: {gpu.error}", now=now)
                out.append(last)
        return out

    # -- hami_watch_health -------------------------------------------------------------

    def watch_health(self, config: VendorConfig, timeout_s: float) -> list[str] | None:
        """Wait up to ``timeout_s`` for a health change; returns the UUIDs that changed.

        Recovery is checked first (``healthRecoverySeconds``), then NVML events are
        awaited. None when there is no driver (nothing to watch).

        Raises:
            NvmlError: NVML fails outside a timeout.
        """
        opts = config.options
        try:
            self._start_watch()
        except NvmlMissingError:
            return None
        recovered = self.health.recover(
            now=self.clock(),
            recovery_s=float(opts["healthRecoverySeconds"]),
            probe=self._answers,
        )
        if recovered:
            return recovered
        event = self.nvml.wait_event(max(1, int(timeout_s * 1000)))
        if event is None:
            return []
        with self._lock:
            known = [g.uuid for g in self._known.values()]
        return self.health.on_event(
            event,
            all_uuids=known,
            ignored_xids=[int(x) for x in opts["ignoredXids"]],
            now=self.clock(),
        )

    def _start_watch(self) -> None:
        with self._lock:
            if self._watching:
                return
            unsupported = self.nvml.watch()
            self._watching = True
        for uuid in unsupported:
            log.warning("GPU %s reports no XID events: its health is not watched", uuid)

    def _answers(self, uuid: str) -> bool:
        try:
            self.nvml.probe(uuid)
        except NvmlError as exc:
            log.info("GPU %s still does not answer: %s", uuid, exc)
            return False
        return True

    # -- hami_link_scores --------------------------------------------------------------

    def link_scores(self, devices: Sequence[DeviceInfo]) -> dict[str, dict[str, int]] | None:
        """Pair scores of ``devices`` (PROTOCOL.md §2), or None when NVML cannot say."""
        wanted = {d.uuid for d in devices}
        with self._lock:
            gpus = [g for g in self._known.values() if g.uuid in wanted]
        try:
            return link_scores(
                gpus,
                common_ancestor=self.nvml.common_ancestor,
                nvlink_peers=self.nvml.nvlink_peers,
            )
        except NvmlError as exc:
            log.warning("no link scores: %s", exc)
            return None


@attrs.define
class _Holder:
    node: NvidiaNode | None = None
    lock: threading.Lock = attrs.field(factory=threading.Lock)


_HOLDER = _Holder()


def current() -> NvidiaNode:
    """The process's ``NvidiaNode`` (created on first use, over the real NVML)."""
    with _HOLDER.lock:
        if _HOLDER.node is None:
            _HOLDER.node = NvidiaNode()
        return _HOLDER.node
