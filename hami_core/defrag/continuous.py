"""Continuous consolidation in the scheduler (``hami scheduler --consolidation``, off by
default; docs/consolidation.md).

The extender's ``/filter`` hands every pod it finds no node for to ``request`` (only on
the leader: kube-scheduler calls the extender beside its own leader, and the extender's
lease is asked again before any write). A worker thread, every ``period_s``, re-reads
the pods queued from the API server's cache; one gone or bound leaves the queue; one
that has waited (from its ``creationTimestamp``, an API fact that survives a failover)
longer than ``after_s`` is a target. The targets are handed to an ``apply.Applier`` at
once, which plans, checks the eviction budgets and carries out what fits them, one
eviction at a time. A pod that got no help is tried again after ``retry_s``. The worker
also runs a round when the ledger records moved pods whose replacements are still to be
nominated (a plan a previous leader left), so a new leader resumes it. On every replica,
leading or not, the worker reads the ledger each period, so the filter holds the room of
the plans in progress (``scheduling.held``) from before a failover.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.errors import HamiError

from .apply import Applier, ApplyReport
from .movable import pod_key
from .replacements import created_at, open_steps, uid_of

log = logging.getLogger(__name__)

#: How often the worker looks at the queue.
PERIOD_S = 5.0
#: How long a pod that got no help waits before it is tried again.
RETRY_S = 60.0


class Consolidator:
    """The queue and the worker (module docstring)."""

    def __init__(
        self,
        applier: Applier,
        *,
        read_pod: Callable[[str, str], Mapping[str, Any]],
        after_s: float,
        is_leader: Callable[[], bool] = lambda: True,
        period_s: float = PERIOD_S,
        retry_s: float = RETRY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Args:
        applier: carries plans out (``apply``), with the scheduler's limits.
        read_pod: ``(namespace, name) -> pod`` as the API server has it now (raises
            ``HamiError`` when gone).
        after_s: how long a pod waits before it is a target.
        """
        self.applier = applier
        self.read_pod = read_pod
        self.after_s = after_s
        self.is_leader = is_leader
        self.period_s = period_s
        self.retry_s = retry_s
        self.clock = clock
        self.observer: Callable[[ApplyReport], None] | None = None
        self._lock = threading.Lock()
        self._queue: dict[str, tuple[str, float]] = {}  # uid -> (pod key, not before)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def request(self, pod: Mapping[str, Any], names: Any = ()) -> None:
        """Queue ``pod`` (the filter found no node for it); cheap, never raises."""
        uid = uid_of(pod)
        if uid:
            with self._lock:
                self._queue.setdefault(uid, (pod_key(pod), 0.0))

    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    def start(self) -> Consolidator:
        self._thread = threading.Thread(target=self._run, name="consolidation", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.tick()
            except Exception as exc:  # the worker outlives any one round
                log.warning("consolidation round failed: %s", exc)

    def tick(self) -> ApplyReport | None:
        """One look at the queue (module docstring); the run's report, None when nothing
        was due. Raises what the applier raises."""
        # every replica reads the ledger: its filter holds the room of the plans in
        # progress (a ``RememberingLedger`` remembers them), leader or not yet
        state = self.applier.ledger.load()
        if not self.is_leader():
            return None
        due = self._due()
        if not due and not open_steps(state):
            return None
        report = self.applier.run(due)
        now = self.clock()
        with self._lock:
            for uid, (key, _) in list(self._queue.items()):
                if key in due:
                    self._queue[uid] = (key, now + self.retry_s)
        if report.steps:
            log.info("consolidation: %d evicted (%s)", report.evicted, report.stopped)
        if self.observer is not None:
            self.observer(report)
        return report

    def _due(self) -> list[str]:
        """The queued pods still pending that waited long enough; the others that are
        gone or bound leave the queue."""
        now = self.clock()
        with self._lock:
            items = list(self._queue.items())
        due = []
        for uid, (key, not_before) in items:
            namespace, _, name = key.partition("/")
            try:
                pod = self.read_pod(namespace, name)
            except HamiError:
                pod = None
            if (
                pod is None
                or uid_of(pod) != uid
                or (pod.get("spec") or {}).get("nodeName")
                or (pod.get("metadata") or {}).get("deletionTimestamp")
            ):
                with self._lock:
                    self._queue.pop(uid, None)
                continue
            born = created_at(pod)
            if not_before <= now and born is not None and now - born >= self.after_s:
                due.append(key)
        return due


__all__ = ["PERIOD_S", "RETRY_S", "Consolidator"]
