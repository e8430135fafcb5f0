"""What the node monitor does about a container over its device memory (issue 24 item 19).

The shim's accounting lives in the container (a tenant with code execution can bypass
it or write its own region), so the monitor also measures each container from the host:
NVML's per-process device memory (``HostDevice.processes``), attributed to a pod and
container by the process's cgroup (``cgroups``), compared with the memory the
scheduler allocated (the pod's ``*-devices-allocated`` annotation, which tenants cannot
write). A container over it is an ``Overuse``; ``OveruseEnforcer`` turns each into a
Warning Event and, where the policy says ``evict`` and it persists, an eviction.

Policy (``hami.io/overuse-policy``: ``report`` | ``evict``): the strictest of the
monitor's ``--overuse-policy`` (the node-wide default), the pod's namespace label (an
administrator's) and the pod's annotation (the tenant's). Reporting is the floor: a
tenant can only make its own pod stricter. An unknown value is ignored (logged once).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from hami_core.protocol.annotations import (
    OVERUSE_EVICT,
    OVERUSE_POLICIES,
    OVERUSE_POLICY,
    OVERUSE_REPORT,
)

log = logging.getLogger(__name__)

Pod = Mapping[str, Any]


@attrs.frozen(kw_only=True)
class Overuse:
    """One container over its allocation on one device, measured from the host.

    Attributes:
        pod: the pod (API object).
        container: the container's name.
        device_uuid: the device.
        used_bytes: device memory its processes hold, NVML per process (bytes).
        limit_bytes: what the scheduler allocated to it on that device (bytes; 0 for a
            device it was not allocated).
        pids: the host PIDs counted.
    """

    pod: Pod
    container: str
    device_uuid: str
    used_bytes: int
    limit_bytes: int
    pids: tuple[int, ...] = ()

    @property
    def uid(self) -> str:
        return str((self.pod.get("metadata") or {}).get("uid") or "")

    @property
    def ref(self) -> str:
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}"

    def message(self) -> str:
        mib = 1 << 20
        return (
            f"container {self.container!r} holds {self.used_bytes // mib} MiB of device memory "
            f"on {self.device_uuid} (measured from the host, pids "
            f"{', '.join(map(str, self.pids)) or '-'}), over its {self.limit_bytes // mib} MiB"
        )


class OveruseActions(Protocol):
    """What the enforcer asks of the cluster (the servers layer: the Kubernetes API)."""

    def event(self, pod: Pod, reason: str, message: str) -> None:
        """Record a Warning Event on ``pod``. May raise; the enforcer logs it."""

    def evict(self, pod: Pod, message: str) -> None:
        """Evict ``pod`` through the Eviction API (PodDisruptionBudgets apply). May
        raise (e.g. 429 while a budget forbids it); the enforcer retries later."""


#: Reasons of the Events (``involvedObject`` the pod).
REASON_OVERUSE = "GPUMemoryOverAllocation"
REASON_EVICTING = "GPUMemoryOverAllocationEvicting"


@attrs.define
class OveruseStats:
    """Counters: ``found`` overuses seen (per scan and container device), ``events``
    written, ``evictions`` asked, ``failures`` of either."""

    found: int = 0
    events: int = 0
    evictions: int = 0
    failures: int = 0


class OveruseEnforcer:
    """Turns each scan's overuses into Events and, by policy, evictions. Not
    thread-safe: the monitor calls it under its scan lock."""

    #: A container is evicted only when over in this many consecutive scans (one
    #: reading may catch a process between freeing and the driver's accounting).
    SCANS_BEFORE_EVICTION = 2
    #: At most one Event per container and device in this many seconds.
    EVENT_INTERVAL_S = 300.0
    #: At most one eviction request per pod in this many seconds (a PDB may refuse).
    EVICTION_RETRY_S = 60.0

    def __init__(
        self,
        actions: OveruseActions,
        *,
        default_policy: str = OVERUSE_REPORT,
        namespace_policy: Callable[[str], str | None] = lambda namespace: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        actions: the cluster side (Events, evictions).
        default_policy: the node-wide policy (``--overuse-policy``).
        namespace_policy: the ``hami.io/overuse-policy`` label of a namespace, or None
            (an administrator's setting; may raise, then it counts as unset).
        clock: monotonic seconds.
        Raises:
            ValueError: ``default_policy`` is not ``report`` or ``evict``.
        """
        if default_policy not in OVERUSE_POLICIES:
            raise ValueError(
                f"overuse policy {default_policy!r} is not one of {', '.join(OVERUSE_POLICIES)}"
            )
        self.actions = actions
        self.default_policy = default_policy
        self.namespace_policy = namespace_policy
        self.clock = clock
        self.stats = OveruseStats()
        self._streak: dict[tuple[str, str, str], int] = {}
        self._evented: dict[tuple[str, str, str], float] = {}
        self._evicted: dict[str, float] = {}
        self._warned: set[tuple[str, str]] = set()

    def policy(self, pod: Pod) -> str:
        """The strictest of the node's default, the namespace's label and the pod's
        annotation (``report`` < ``evict``); unknown values are ignored."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        values: list[str | None] = [self.default_policy]
        try:
            values.append(self._valid(self.namespace_policy(namespace), f"namespace {namespace}"))
        except Exception as exc:  # an unreadable namespace counts as unset
            log.debug("namespace %s: overuse policy unreadable: %s", namespace, exc)
        pod_value = (meta.get("annotations") or {}).get(OVERUSE_POLICY)
        values.append(self._valid(pod_value, f"pod {namespace}/{meta.get('name', '')}"))
        return OVERUSE_EVICT if OVERUSE_EVICT in values else OVERUSE_REPORT

    def _valid(self, value: object, where: str) -> str | None:
        if value is None:
            return None
        text = str(value).strip().lower()
        if text in OVERUSE_POLICIES:
            return text
        if (where, text) not in self._warned:
            if len(self._warned) >= 1024:  # tenants choose these values: stay bounded
                self._warned.clear()
            self._warned.add((where, text))
            log.warning("%s: %s=%r is not report or evict; ignored", where, OVERUSE_POLICY, value)
        return None

    def handle(self, found: Sequence[Overuse]) -> None:
        """Act on one scan's overuses (every container over its allocation now).

        Per container and device: a Warning Event at most every ``EVENT_INTERVAL_S``;
        under ``evict``, an eviction once it was over in ``SCANS_BEFORE_EVICTION``
        consecutive scans, retried at most every ``EVICTION_RETRY_S``. A container not
        over in a scan starts its count again. Never raises.
        """
        now = self.clock()
        seen: set[tuple[str, str, str]] = set()
        for o in found:
            key = (o.uid, o.container, o.device_uuid)
            seen.add(key)
            self.stats.found += 1
            self._streak[key] = self._streak.get(key, 0) + 1
            last = self._evented.get(key)
            if last is None or now - last >= self.EVENT_INTERVAL_S:
                self._evented[key] = now
                self._call(self.actions.event, o.pod, REASON_OVERUSE, o.message())
                self.stats.events += 1
            if self.policy(o.pod) != OVERUSE_EVICT:
                continue
            if self._streak[key] < self.SCANS_BEFORE_EVICTION:
                continue
            asked = self._evicted.get(o.uid)
            if asked is not None and now - asked < self.EVICTION_RETRY_S:
                continue
            self._evicted[o.uid] = now
            message = f"evicting: {o.message()} ({OVERUSE_POLICY}: {OVERUSE_EVICT})"
            log.warning("pod %s: %s", o.ref, message)
            self._call(self.actions.event, o.pod, REASON_EVICTING, message)
            if self._call(self.actions.evict, o.pod, message):
                self.stats.evictions += 1
        for key in [k for k in self._streak if k not in seen]:
            del self._streak[key]
        uids = {k[0] for k in seen}
        for key in [k for k, at in self._evented.items() if now - at >= self.EVENT_INTERVAL_S]:
            del self._evented[key]
        for uid in [
            u
            for u, at in self._evicted.items()
            if u not in uids and now - at >= self.EVICTION_RETRY_S
        ]:
            del self._evicted[uid]

    def _call(self, fn: Callable[..., None], *args: Any) -> bool:
        try:
            fn(*args)
        except Exception as exc:
            self.stats.failures += 1
            log.warning("overuse action %s failed: %s", getattr(fn, "__name__", fn), exc)
            return False
        return True
