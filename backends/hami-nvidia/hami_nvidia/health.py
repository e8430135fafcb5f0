"""GPU health from NVML events, with recovery.

A GPU turns unhealthy on a critical XID event that is not an application error, on a
double-bit ECC error, or when NVML stops answering for it. It turns healthy again
when, ``healthRecoverySeconds`` after the last such event, NVML answers for it again
(handle by UUID and memory info); 0 disables recovery, as in NVIDIA's device plugin.

XIDs ignored by default (``ignoredXids``) are the ones NVIDIA's k8s-device-plugin skips
because they are caused by an application, not the GPU: 13 graphics engine exception,
31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video
processor exception, 109 context switch timeout (NVIDIA "XID Errors" reference).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

import attrs

from .nvml import EVENT_DOUBLE_BIT_ECC, EVENT_XID_CRITICAL, XidEvent

log = logging.getLogger(__name__)

DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)
DEFAULT_RECOVERY_S = 120


@attrs.frozen(kw_only=True)
class Sickness:
    """Why and since when (monotonic seconds) a GPU is unhealthy."""

    reason: str
    since: float


class HealthTracker:
    """Which GPUs are unhealthy, fed by events and probes. Thread-safe; no NVML inside."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sick: dict[str, Sickness] = {}

    def healthy(self, uuid: str) -> bool:
        with self._lock:
            return uuid not in self._sick

    @property
    def unhealthy(self) -> dict[str, Sickness]:
        with self._lock:
            return dict(self._sick)

    def mark(self, uuid: str, reason: str, *, now: float) -> bool:
        """Mark ``uuid`` unhealthy (again) at ``now``; True when it was healthy."""
        with self._lock:
            was_healthy = uuid not in self._sick
            self._sick[uuid] = Sickness(reason=reason, since=now)
        if was_healthy:
            log.warning("GPU %s is unhealthy: %s", uuid, reason)
        return was_healthy

    def on_event(
        self,
        event: XidEvent,
        *,
        all_uuids: Iterable[str],
        ignored_xids: Iterable[int],
        now: float,
    ) -> list[str]:
        """Apply one NVML event; returns the UUIDs that turned unhealthy."""
        if event.event_type & EVENT_XID_CRITICAL:
            if event.xid in set(ignored_xids):
                log.info("ignoring XID %d on %s (application error)", event.xid, event.uuid or "?")
                return []
            reason = f"XID {event.xid}"
        elif event.event_type & EVENT_DOUBLE_BIT_ECC:
            reason = "double-bit ECC error"
        else:
            return []
        targets = [event.uuid] if event.uuid else list(all_uuids)
        return [u for u in targets if self.mark(u, reason, now=now)]

    def recover(self, *, now: float, recovery_s: float, probe: Callable[[str], bool]) -> list[str]:
        """Return to health the GPUs quiet for ``recovery_s`` that ``probe`` says answer;
        returns them. ``recovery_s`` <= 0: nothing recovers."""
        if recovery_s <= 0:
            return []
        back = []
        for uuid, sick in self.unhealthy.items():
            if now - sick.since < recovery_s:
                continue
            if probe(uuid):
                with self._lock:
                    current = self._sick.get(uuid)
                    if current is not None and current.since == sick.since:
                        del self._sick[uuid]
                        back.append(uuid)
                log.info("GPU %s is healthy again (was: %s)", uuid, sick.reason)
        return back

    def forget(self, keep: Iterable[str]) -> None:
        """Drop GPUs not in ``keep`` (they left the node)."""
        wanted = set(keep)
        with self._lock:
            for uuid in [u for u in self._sick if u not in wanted]:
                del self._sick[uuid]
