"""The list+watch cache survives dropped watches and 410 Gone. The client's list call is
replaced by a scripted fake that answers as the API server does (a JSON list, or a
streamed watch of newline-separated events), so the real event reading is exercised."""

import json
import time

import pytest
from kubernetes.client.exceptions import ApiException

import hami_core.cluster.kube as kube


class FakeResponse:
    """What ``list_*(_preload_content=False)`` returns: urllib3's response, reduced."""

    def __init__(self, *, data=b"", chunks=(), status=200, stop=None):
        self.data = data
        self.status = status
        self._chunks = chunks
        self._stop = stop
        self.closed = False

    def stream(self, amt=None, decode_content=False):
        for chunk in self._chunks:
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk
        while self._stop is not None and not self._stop() and not self.closed:
            time.sleep(0.01)  # a quiet watch stays open

    def close(self):
        self.closed = True

    def release_conn(self):
        pass


class FakeApi:
    """Answers lists from ``snapshots`` and watches from ``watches`` (each a list of
    event dicts / exceptions / raw lines), recording the versions watched from."""

    def __init__(self, snapshots, watches):
        self.snapshots, self.watches = list(snapshots), list(watches)
        self.lists = 0
        self.watched_from = []

    def __call__(self, watch=False, resource_version=None, _preload_content=False, **kwargs):
        if not watch:
            self.lists += 1
            body = self.snapshots[min(self.lists, len(self.snapshots)) - 1]
            if isinstance(body, BaseException):
                raise body
            return FakeResponse(data=json.dumps(body).encode())
        self.watched_from.append(resource_version)
        script = self.watches.pop(0) if self.watches else []
        if isinstance(script, BaseException):
            raise script
        chunks = [
            s if isinstance(s, BaseException) else (json.dumps(s) + "\n").encode() for s in script
        ]
        return FakeResponse(chunks=chunks, stop=lambda: bool(self.watches))


def node(name, rv, **meta):
    return {"metadata": {"name": name, "resourceVersion": str(rv), **meta}}


def node_list(rv, *names):
    return {"metadata": {"resourceVersion": str(rv)}, "items": [node(n, rv) for n in names]}


@pytest.fixture(autouse=True)
def fast_retry(monkeypatch):
    monkeypatch.setattr(kube, "RETRY_DELAY_S", 0.01)


def wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def names(inf):
    return [o["metadata"]["name"] for o in inf.items()]


def test_events_update_the_cache_and_a_dropped_watch_resumes_from_the_last_version():
    api = FakeApi(
        [node_list(10, "a")],
        [
            [
                {"type": "ADDED", "object": node("b", 11)},
                {"type": "DELETED", "object": node("a", 12)},
                ConnectionResetError("connection dropped"),
            ],
            [
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
                {"type": "MODIFIED", "object": node("b", 13, labels={"x": "y"})},
            ],
        ],
    )
    inf = kube.Informer("nodes", api)
    inf.start()
    assert inf.wait_synced(5)
    wait(lambda: (inf.get("b") or {}).get("metadata", {}).get("labels") == {"x": "y"})
    assert names(inf) == ["b"]
    assert api.watched_from[:2] == ["10", "12"]  # resumed after the drop, no re-list
    assert inf.relists == 1
    inf.stop()


@pytest.mark.parametrize(
    "gone",
    [
        [
            {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "message": "too old",
                },
            }
        ],
        ApiException(status=410, reason="Gone"),
    ],
    ids=["error-event", "http-410"],
)
def test_410_gone_forces_a_fresh_list(gone):
    api = FakeApi([node_list(10, "a"), node_list(50, "a", "c")], [gone, []])
    inf = kube.Informer("nodes", api)
    inf.start()
    wait(lambda: names(inf) == ["a", "c"])
    assert inf.relists == 2 and api.lists == 2
    assert api.watched_from == ["10", "50"]
    inf.stop()


def test_a_failing_list_is_retried_and_other_errors_do_not_kill_the_watch():
    api = FakeApi(
        [ApiException(status=500, reason="etcd hiccup"), node_list(20, "y")],
        [ApiException(status=500, reason="boom"), [{"type": "ADDED", "object": node("z", 21)}]],
    )
    inf = kube.Informer("nodes", api)
    inf.start()
    wait(lambda: names(inf) == ["y", "z"])
    assert api.watched_from == ["20", "20"]
    inf.stop()


def test_stop_ends_a_quiet_watch():
    api = FakeApi([node_list(1, "a")], [[]])
    inf = kube.Informer("nodes", api)
    inf.start()
    assert inf.wait_synced(5)
    wait(lambda: api.watched_from == ["1"])
    inf.stop()
    inf._thread.join(timeout=5)
    assert not inf._thread.is_alive()


def test_writes_are_seen_at_once_but_never_replace_a_newer_version():
    inf = kube.Informer("nodes", FakeApi([node_list(1)], []))
    inf.put(node("n", 5))
    inf.put(node("n", 3))  # a stale echo of an older write
    assert inf.get("n")["metadata"]["resourceVersion"] == "5"
    inf.put(node("n", 7))
    assert inf.get("n")["metadata"]["resourceVersion"] == "7"


def test_the_node_index_follows_every_change():
    inf = kube.Informer("pods", FakeApi([node_list(1)], []), index_fn=kube._pod_nodes)

    def pod(name, rv, *, annotated=None, bound=None):
        obj = {
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)},
            "spec": {},
        }
        if annotated:
            obj["metadata"]["annotations"] = {"hami.io/vgpu-node": annotated}
        if bound:
            obj["spec"]["nodeName"] = bound
        return obj

    inf.put(pod("p", 1, annotated="n1"))
    assert [p["metadata"]["name"] for p in inf.indexed("n1")] == ["p"]
    inf.put(pod("p", 2, annotated="n1", bound="n1"))
    inf.put(pod("q", 3, bound="n2"))
    assert [p["metadata"]["name"] for p in inf.indexed("n1")] == ["p"]
    inf.put(pod("p", 4))  # allocation rolled back
    assert inf.indexed("n1") == [] and [p["metadata"]["name"] for p in inf.indexed("n2")] == ["q"]
    inf.remove(pod("q", 5))
    assert inf.indexed("n2") == []


def test_the_cache_is_settled_only_a_while_after_a_broken_watch_reopens():
    """Issue 24 item 13: after an API-server restart the pod cache may miss a Binding;
    ``settled`` says so until the re-opened watch has had time to deliver what it missed
    (the scheduler then reads a pod live before taking a node lock)."""
    reopened = {"go": False}
    api = FakeApi(
        [node_list(10, "a")],
        [[ConnectionResetError("API server killed")], []],
    )
    real = api.__call__

    def gated(*a, **k):  # the API server comes back only when the test says so
        if k.get("watch") and len(api.watched_from) == 1 and not reopened["go"]:
            raise ConnectionRefusedError("down")
        return real(*a, **k)

    inf = kube.Informer("pods", gated)
    assert not inf.settled(settle_s=0.2)  # never listed
    inf.start()
    assert inf.wait_synced(5)
    wait(lambda: len(api.watched_from) >= 1)
    wait(lambda: inf._gap_since is not None)
    assert not inf.settled(settle_s=0.2)  # the watch broke: the cache may lag
    reopened["go"] = True
    wait(lambda: inf._watch_opened is not None)
    assert not inf.settled(settle_s=0.2)  # just re-opened: still catching up
    time.sleep(0.3)
    assert inf.settled(settle_s=0.2)
    inf.stop()


def test_reads_never_wait_for_a_handler_still_running():
    # A handler runs on the writing thread (the watch, or a caller remembering its own
    # write) and may wait for a lock of its own (the scheduler's state, held by a
    # /filter); readers of the cache (a bind's cached pod and node) must not queue behind
    # it: measured under bench_pipeline, they did, for ~9 % of a bind's time.
    import threading

    inf = kube.Informer("pods", lambda **kw: None, index_fn=lambda o: {o["spec"]["nodeName"]})
    inf.put(
        {
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"},
            "spec": {"nodeName": "n1"},
        }
    )
    entered, release = threading.Event(), threading.Event()

    def slow_handler(old, new):
        if new is not None and new["metadata"]["name"] == "b":
            entered.set()
            release.wait(10)

    inf.add_handler(slow_handler)
    writer = threading.Thread(
        target=inf.put,
        args=(
            {
                "metadata": {"name": "b", "namespace": "ns", "resourceVersion": "2"},
                "spec": {"nodeName": "n1"},
            },
        ),
    )
    writer.start()
    try:
        assert entered.wait(5)
        answers: dict = {}

        def read():
            answers["peek"] = inf.peek("ns/a")
            answers["get"] = inf.get("ns/b")
            answers["indexed"] = [p["metadata"]["name"] for p in inf.indexed("n1")]
            answers["items"] = len(inf.items())

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(2)
        assert not reader.is_alive(), "a read waited for the handler"
        assert answers["peek"]["metadata"]["name"] == "a"
        # the object is stored before its handlers run, as before
        assert answers["get"]["metadata"]["name"] == "b"
        assert answers["indexed"] == ["a", "b"]
        assert answers["items"] == 2
    finally:
        release.set()
        writer.join(5)
