"""The list+watch cache survives dropped watches and 410 Gone (without an API server:
the client's list call and Watch are replaced by scripted fakes)."""

import json
import time
from typing import ClassVar

import pytest
from kubernetes.client.exceptions import ApiException

import hami_core.cluster.kube as kube


class FakeList:
    """Stands in for e.g. CoreV1Api.list_node(_preload_content=False)."""

    def __init__(self, snapshots):
        self.snapshots = list(snapshots)
        self.calls = 0

    def __call__(self, _preload_content=False, **kwargs):
        self.calls += 1
        body = self.snapshots[min(self.calls, len(self.snapshots)) - 1]
        return type("Resp", (), {"data": json.dumps(body).encode()})()


def node(name, rv):
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


def node_list(rv, *names):
    return {"metadata": {"resourceVersion": str(rv)}, "items": [node(n, rv) for n in names]}


class ScriptedWatch:
    """Each Watch() plays the next script: a list of events, or an exception to raise."""

    scripts: ClassVar[list] = []
    started_from: ClassVar[list] = []

    def __init__(self):
        self._stop = False

    def stop(self):
        self._stop = True

    def stream(self, func, resource_version=None, **kwargs):
        ScriptedWatch.started_from.append(resource_version)
        script = ScriptedWatch.scripts.pop(0) if ScriptedWatch.scripts else []
        for step in script:
            if isinstance(step, BaseException):
                raise step
            yield step
        while not self._stop and not ScriptedWatch.scripts:
            time.sleep(0.01)


@pytest.fixture
def scripted(monkeypatch):
    ScriptedWatch.scripts = []
    ScriptedWatch.started_from = []
    monkeypatch.setattr(kube, "Watch", ScriptedWatch)
    monkeypatch.setattr(kube, "RETRY_DELAY_S", 0.01)
    return ScriptedWatch


def wait(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def names(inf):
    return [o["metadata"]["name"] for o in inf.items()]


def test_events_update_the_cache_and_a_dropped_watch_resumes_from_the_last_version(scripted):
    scripted.scripts = [
        [
            {"type": "ADDED", "object": node("b", 11)},
            {"type": "DELETED", "object": node("a", 12)},
            ConnectionResetError("connection dropped"),
        ],
        [
            {
                "type": "MODIFIED",
                "object": {
                    "metadata": {"name": "b", "resourceVersion": "13", "labels": {"x": "y"}}
                },
            }
        ],
    ]
    inf = kube.Informer("nodes", FakeList([node_list(10, "a")]))
    inf.start()
    assert inf.wait_synced(5)
    wait(lambda: (inf.get("b") or {}).get("metadata", {}).get("labels") == {"x": "y"})
    assert names(inf) == ["b"]
    assert scripted.started_from[:2] == ["10", "12"]  # resumed after the drop, no re-list
    assert inf.relists == 1
    inf.stop()


@pytest.mark.parametrize("gone", [ApiException(status=410, reason="Gone"), "error-event"])
def test_410_gone_forces_a_fresh_list(scripted, gone):
    first = (
        [gone]
        if isinstance(gone, BaseException)
        else [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}]
    )
    scripted.scripts = [first, []]
    lister = FakeList([node_list(10, "a"), node_list(50, "a", "c")])
    inf = kube.Informer("nodes", lister)
    inf.start()
    wait(lambda: names(inf) == ["a", "c"])
    assert inf.relists == 2 and lister.calls == 2
    assert scripted.started_from[-1] == "50"
    inf.stop()


def test_a_failing_list_is_retried_and_other_errors_do_not_kill_the_watch(scripted):
    class Flaky(FakeList):
        def __call__(self, _preload_content=False, **kwargs):
            if self.calls == 0:
                self.calls += 1
                raise ApiException(status=500, reason="etcd hiccup")
            return super().__call__()

    scripted.scripts = [
        [ApiException(status=500, reason="boom")],
        [{"type": "ADDED", "object": node("z", 21)}],
    ]
    lister = Flaky([node_list(20, "y")])
    inf = kube.Informer("nodes", lister)
    inf.start()
    wait(lambda: names(inf) == ["y", "z"])
    inf.stop()


def test_writes_are_seen_at_once_but_never_replace_a_newer_version():
    inf = kube.Informer("nodes", FakeList([node_list(1)]))
    inf.put(node("n", 5))
    inf.put(node("n", 3))  # a stale echo of an older write
    assert inf.get("n")["metadata"]["resourceVersion"] == "5"
    inf.put(node("n", 7))
    assert inf.get("n")["metadata"]["resourceVersion"] == "7"


def test_the_node_index_follows_every_change():
    inf = kube.Informer(
        "pods",
        FakeList([{"metadata": {"resourceVersion": "1"}, "items": []}]),
        index_fn=kube._pod_nodes,
    )

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
