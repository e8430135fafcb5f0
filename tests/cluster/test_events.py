"""The event recorder: off the request thread, repeats aggregated into one Event."""

from __future__ import annotations

import threading

from hami_core.cluster import MemoryCluster
from hami_core.cluster.events import EventRecorder
from tests.builders import pod


def stored(c: MemoryCluster, name: str) -> dict:
    return c.add_pod(pod(name))


def test_repeats_of_one_reason_become_one_event_with_a_count():
    c = MemoryCluster()
    p, q = stored(c, "p"), stored(c, "q")
    rec = EventRecorder(c).start()
    for i in range(5):
        rec.record_event(p, type="Normal", reason="FilteringSucceed", message=f"try {i}")
    rec.record_event(p, type="Warning", reason="FilteringFailed", message="no")
    rec.record_event(q, type="Normal", reason="FilteringSucceed", message="q")
    assert rec.flush()
    for _ in range(3):
        rec.record_event(p, type="Normal", reason="FilteringSucceed", message="later")
    assert rec.flush()
    rec.stop()
    by = {(e.name, e.reason): e for e in c.events}
    assert len(c.events) == 3
    assert by[("p", "FilteringSucceed")].count == 8
    assert by[("p", "FilteringSucceed")].message == "later"
    assert by[("p", "FilteringFailed")].count == 1
    assert by[("q", "FilteringSucceed")].count == 1


def test_a_series_older_than_the_window_starts_a_new_event():
    c = MemoryCluster()
    p = stored(c, "p")
    now = [0.0]
    rec = EventRecorder(c, window_s=600, clock=lambda: now[0]).start()
    rec.record_event(p, type="Normal", reason="BindingSucceed", message="a")
    assert rec.flush()
    now[0] = 601.0
    rec.record_event(p, type="Normal", reason="BindingSucceed", message="b")
    assert rec.flush()
    rec.stop()
    assert [(e.message, e.count) for e in c.events] == [("a", 1), ("b", 1)]


class SlowStore:
    """A store whose writes block until released, then fail once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0

    def record_event_series(self, obj, *, type, reason, message, count, existing):
        self.release.wait(5)
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("API server down")
        return "ev"


def test_recording_never_blocks_or_raises_and_the_queue_is_bounded():
    store = SlowStore()
    rec = EventRecorder(store, max_pending=2).start()
    p = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}}
    for reason in ("A", "B", "C", "D", "E"):  # returns at once although writes block
        rec.record_event(p, type="Normal", reason=reason, message="m")
    assert rec.dropped >= 2
    store.release.set()
    assert rec.flush()
    rec.stop()
    assert rec.written == store.calls - 1  # the failed write is logged, not raised
