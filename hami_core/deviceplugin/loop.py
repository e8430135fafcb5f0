"""The device plugin's health and inventory loop (PROTOCOL.md §2): watch health, discover
again after every answer and at least every ``health_interval_s``, keep kubelet's device
list (``DeviceState``) current, and republish the inventory when it changed and at
least every ``register_interval_s``; sweep CDI specs of pods gone from the node.

Pure of gRPC: the server (``hami_core.servers.deviceplugin_main``) starts it after it
serves kubelet; tests drive it over a ``MemoryCluster``.
"""

from __future__ import annotations

import logging
import threading
import time

from hami_core.cluster.base import ClusterStore
from hami_core.errors import HamiError, NotFoundError
from hami_core.model import DeviceInfo

from .agent import NodeAgent
from .allocator import Allocator
from .cdi import CdiWriter
from .migwarn import UnreadableReservations
from .state import DeviceState

log = logging.getLogger(__name__)


class HealthLoop:
    """Keeps one node agent's devices current in ``state`` and on the Node."""

    def __init__(
        self,
        agent: NodeAgent,
        state: DeviceState,
        store: ClusterStore,
        *,
        health_interval_s: float,
        register_interval_s: float,
        cdi: CdiWriter | None = None,
        allocator: Allocator | None = None,
    ) -> None:
        """Args:
        health_interval_s: the longest wait between discoveries, seconds.
        register_interval_s: the longest time between two publications, seconds.
        cdi: the CDI spec writer to sweep, when CDI is on.
        allocator: the process's ``Allocator``: ``hami_release`` then gets its node
            records and runs between its calls (``Allocator.release``); None: the
            backend's release without records.
        """
        self.agent = agent
        self.state = state
        self.store = store
        self.health_interval_s = health_interval_s
        self.register_interval_s = register_interval_s
        self.cdi = cdi
        self.allocator = allocator
        self.unreadable = UnreadableReservations(
            store, agent.manager.device_type(agent.vendor).mig_annotation
        )
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._scores_for: tuple[str, ...] | None = None
        self._scores: dict[str, dict[str, int]] | None = None

    @property
    def node(self) -> str:
        return self.agent.node

    def first_round(self) -> tuple[DeviceInfo, ...]:
        """Discover and publish once, before kubelet is served; nothing is published (nor
        released) when live pods hold these devices in another shape
        (``NodeAgent.check_reshaped``).

        Raises:
            HamiError: discovery failed (the message says why).
            ConfigError: live pods hold devices the node now publishes in another shape
                (its ``migstrategy`` changed under them), naming the pods and devices.
        """
        devices = self.agent.discover()
        self.agent.check_reshaped(devices)
        self.state.update(devices)
        log.info(
            "discovered %d %s device(s) on %s: %s",
            len(devices),
            self.agent.vendor,
            self.node,
            ", ".join(
                f"{d.uuid} ({d.model}, {d.memory_mib} MiB, x{d.split_count})" for d in devices
            )
            or "none",
        )
        self._next_publish = self._publish(devices)
        return devices

    def release(self, devices: tuple[DeviceInfo, ...]) -> None:
        """Let the backend free what no pod on the node holds (``hami_release``); an
        unreadable pod list or a driver error frees nothing this round. A live pod's
        unreadable MIG reservation is reported on it once (``migwarn``)."""
        try:
            pods = self.store.pods_on_node(self.node)
            if self.allocator is not None:
                freed = self.allocator.release(pods, devices)
            else:
                freed = self.agent.manager.release(self.agent.backend, pods, devices)
        except HamiError as exc:
            log.warning("cannot release what pods no longer hold: %s", exc)
            return
        for line in freed:
            log.info("released %s", line)
        for line in self.unreadable.check(pods):
            log.warning("unreadable MIG reservation of pod %s (reported on the pod)", line)

    def start(self) -> None:
        """Run the loop on a daemon thread (after ``first_round``)."""
        self._thread = threading.Thread(
            target=self._loop,
            args=(getattr(self, "_next_publish", 0.0),),
            name="health-and-inventory",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to stop; the inventory stays on the node."""
        self._done.set()

    def join(self) -> None:
        """Wait for a stopped loop to end its round (at most one health interval)."""
        if self._thread is not None:
            self._thread.join(self.health_interval_s + 5)

    def _loop(self, next_publish: float) -> None:
        # One round must never end the loop: without it health changes stop reaching
        # kubelet and the inventory goes stale while the plugin still looks alive.
        while not self._done.is_set():
            try:
                next_publish = self._round(next_publish)
            except Exception:
                log.exception("health and inventory round failed; retrying")
                self._done.wait(min(5.0, self.health_interval_s))
                next_publish = 0.0

    def _round(self, next_publish: float) -> float:
        backend = self.agent.backend
        if not self._done.is_set():
            try:
                changed = self.agent.manager.watch_health(backend, timeout_s=self.health_interval_s)
            except HamiError as exc:
                log.error("health watch failed: %s", exc)
                changed = None
            if changed is None:
                self._done.wait(self.health_interval_s)
            if self._done.is_set():
                return next_publish
            try:
                devices = self.agent.discover()
            except HamiError as exc:
                log.error("discovery failed; reporting every device unhealthy: %s", exc)
                if self.state.mark_unhealthy():
                    next_publish = 0.0
                devices = self.state.devices
            else:
                if self.state.update(devices):
                    sick = [d.uuid for d in devices if not d.healthy]
                    log.info("device list changed; unhealthy now: %s", sick or "none")
                    next_publish = 0.0
            if time.monotonic() >= next_publish:
                next_publish = self._publish(devices)
        return next_publish

    def _publish(self, devices: tuple[DeviceInfo, ...]) -> float:
        """Publish and sweep; returns the monotonic time of the next periodic publish
        (soon again when the API server could not be reached)."""
        try:
            self.agent.publish(devices, scores=self._link_scores(devices))
        except NotFoundError:
            log.warning("node %s does not exist yet; retrying", self.node)
            return time.monotonic() + min(5.0, self.register_interval_s)
        except HamiError as exc:
            log.error("cannot publish the inventory of %s: %s", self.node, exc)
            return time.monotonic() + min(5.0, self.register_interval_s)
        self.release(devices)
        if self.cdi is not None:
            try:
                live = [
                    str((p.get("metadata") or {}).get("uid"))
                    for p in self.store.pods_on_node(self.node)
                ]
                for path in self.cdi.sweep(live):
                    log.info("removed CDI spec %s of a pod gone from the node", path)
            except HamiError as exc:
                log.warning("cannot list pods to sweep CDI specs: %s", exc)
        return time.monotonic() + self.register_interval_s

    def _link_scores(self, devices: tuple[DeviceInfo, ...]) -> dict[str, dict[str, int]] | None:
        key = tuple(d.uuid for d in devices)
        if self._scores_for != key:
            self._scores = self.agent.scores(devices)
            self._scores_for = key
        return self._scores
