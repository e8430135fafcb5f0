"""Events written off the request thread and aggregated, as client-go's recorder does.

kube-scheduler calls ``/filter`` for every pod on every attempt; writing one new Event per
call would add an API write to each filter and flood ``kubectl describe``. The
``EventRecorder`` queues events and a background thread writes them; repeats of the same
(object, type, reason) within ``window_s`` become one Event whose ``series.count`` grows
(``events.k8s.io/v1`` ``EventSeries``; client-go ``tools/events`` does the same, and
``tools/record``'s correlator aggregates similar events into ``count``), the message
being the latest one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

import attrs

from .base import KubeObject

log = logging.getLogger(__name__)

#: Repeats within this window update one Event (client-go: 10 minutes).
SERIES_WINDOW_S = 600.0
#: Distinct pending events kept when the API server is slower than the callers; more
#: are dropped (counted in ``dropped``), never blocking a request.
MAX_PENDING = 4096


class SeriesStore(Protocol):
    """A store that can write an event series (``KubeCluster``, ``MemoryCluster``)."""

    def record_event_series(
        self,
        obj: KubeObject,
        *,
        type: str,
        reason: str,
        message: str,
        count: int,
        existing: str | None,
    ) -> str:
        """Create the Event (``existing`` None) or set the series count of the Event
        named ``existing``; return the Event's name."""
        ...


@attrs.define
class _Pending:
    obj: KubeObject
    message: str
    count: int


@attrs.define
class _Series:
    name: str
    count: int
    first_s: float


class EventRecorder:
    """``record_event`` returns at once; a daemon thread writes, aggregated by
    (namespace, name, uid, type, reason). Call ``start()`` once, ``stop()`` at exit."""

    def __init__(
        self,
        store: SeriesStore,
        *,
        window_s: float = SERIES_WINDOW_S,
        max_pending: int = MAX_PENDING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._window_s = window_s
        self._max_pending = max_pending
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: dict[tuple[str, ...], _Pending] = {}
        self._series: dict[tuple[str, ...], _Series] = {}
        self._busy = False
        self._stop = False
        self._thread: threading.Thread | None = None
        self.dropped = 0
        self.written = 0

    def start(self) -> EventRecorder:
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, timeout_s: float = 2.0) -> None:
        """Write what is queued (within ``timeout_s``), then stop."""
        self.flush(timeout_s=timeout_s)
        with self._cond:
            self._stop = True
            self._cond.notify_all()

    def record_event(self, obj: KubeObject, *, type: str, reason: str, message: str) -> None:
        """Queue an event about ``obj``; a repeat still queued only raises its count."""
        meta = obj.get("metadata") or {}
        key = (
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            str(meta.get("uid") or ""),
            type,
            reason,
        )
        with self._cond:
            pending = self._pending.get(key)
            if pending is not None:
                pending.count += 1
                pending.message = message
                pending.obj = obj
            elif len(self._pending) >= self._max_pending:
                self.dropped += 1
                return
            else:
                self._pending[key] = _Pending(obj=obj, message=message, count=1)
            self._cond.notify_all()

    def flush(self, *, timeout_s: float = 5.0) -> bool:
        """Wait until every queued event is written; False on timeout (tests, shutdown)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stop:
                    self._cond.wait()
                if self._stop and not self._pending:
                    return
                batch, self._pending = self._pending, {}
                self._busy = True
            try:
                for key, item in batch.items():
                    self._write(key, item)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, key: tuple[str, ...], item: _Pending) -> None:
        now = self._clock()
        series = self._series.get(key)
        if series is not None and now - series.first_s > self._window_s:
            series = None
        count = item.count + (series.count if series is not None else 0)
        type_, reason = key[3], key[4]
        try:
            name = self._store.record_event_series(
                item.obj,
                type=type_,
                reason=reason,
                message=item.message,
                count=count,
                existing=series.name if series is not None else None,
            )
        except Exception as exc:  # best effort: events never fail a request
            log.warning("cannot record event %s: %s", reason, exc)
            return
        self.written += 1
        if series is None:
            series = _Series(name=name, count=0, first_s=now)
        series.count = count
        self._series[key] = series
        if len(self._series) > 4 * self._max_pending:  # forget the oldest series
            for old in sorted(self._series, key=lambda k: self._series[k].first_s)[
                : self._max_pending
            ]:
                del self._series[old]
