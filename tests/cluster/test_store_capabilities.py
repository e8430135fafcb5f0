"""The store contract's capabilities (``ClusterStore``: ``read_pod_live``,
``pods_settled``, ``live``, ``namespace_labels``), asked of every store.

The scheduler's bind and the device plugin's ``Allocate`` lean on them; a store that
lacked one used to be probed with ``getattr`` and silently fell back to something
weaker. Each store now answers each one: the three API-server stores over a fake API
server whose watches deliver nothing (so their caches stay as first listed, and a
change made afterwards is what a lagging cache misses).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from hami_core.cluster import MemoryCluster
from hami_core.cluster.base import ClusterStore
from hami_core.cluster.direct import DirectKubeCluster, NodeKubeCluster
from hami_core.cluster.kube import KubeCluster
from tests import builders as b
from tests.deviceplugin.fake_apiserver import FakeApiServer

NODE = "n1"
CAPABILITIES = ("read_pod_live", "pods_settled", "live", "namespace_labels")


def _bound(name: str) -> dict[str, Any]:
    p = b.pod(name, namespace="team-a")
    p["spec"]["nodeName"] = NODE
    return p


class Stores:
    """One store under test and the truth behind it (the API server's objects)."""

    def __init__(self, store: ClusterStore, truth: MemoryCluster) -> None:
        self.store = store
        self.truth = truth


def _client(api: FakeApiServer) -> k8s.ApiClient:
    conf = k8s.Configuration()
    conf.host = api.url
    return k8s.ApiClient(conf)


def _memory(truth: MemoryCluster, api: FakeApiServer) -> ClusterStore:
    return truth


def _kube(truth: MemoryCluster, api: FakeApiServer) -> ClusterStore:
    store = KubeCluster(_client(api))
    store.start(timeout_s=10)
    return store


def _direct(truth: MemoryCluster, api: FakeApiServer) -> ClusterStore:
    return DirectKubeCluster(_client(api), node=NODE)


def _node(truth: MemoryCluster, api: FakeApiServer) -> ClusterStore:
    store = NodeKubeCluster(_client(api), node=NODE)
    store.start()
    assert store.pods.wait_synced(10) and store.nodes.wait_synced(10)
    return store


MAKERS: dict[str, Callable[[MemoryCluster, FakeApiServer], ClusterStore]] = {
    "memory": _memory,
    "kube": _kube,
    "direct": _direct,
    "node": _node,
}


@pytest.fixture(params=sorted(MAKERS))
def stores(request: pytest.FixtureRequest) -> Iterator[Stores]:
    truth = b.cluster(b.node(NODE, [b.gpu("GPU-0")]))
    truth.add_pod(_bound("p"))
    truth.label_namespace("team-a", {"hami.io/disable-control": "allow"})
    api = FakeApiServer(truth).start()
    store = MAKERS[request.param](truth, api)
    try:
        yield Stores(store, truth)
    finally:
        stop = getattr(store, "stop", None)
        if stop is not None and store is not truth:
            stop()
        api.stop()


def test_every_store_class_declares_every_capability() -> None:
    """Not probed: each store's class has each one (a method, or ``live``'s answer)."""
    for cls in (MemoryCluster, KubeCluster, DirectKubeCluster, NodeKubeCluster):
        missing = [c for c in CAPABILITIES if not hasattr(cls, c)]
        assert missing == [], f"{cls.__name__} lacks {missing}"
    for c in CAPABILITIES:
        assert c in ClusterStore.__dict__, f"ClusterStore does not declare {c}"


def test_read_pod_live_sees_a_change_the_cache_may_miss(stores: Stores) -> None:
    stores.store.get_pod("team-a", "p")  # a cache that missed it keeps this one
    stores.truth.patch_pod_metadata("team-a", "p", annotations={"seen": "now"})
    live = stores.store.read_pod_live("team-a", "p")
    assert live["metadata"]["annotations"]["seen"] == "now"


def test_pods_settled_once_watching(stores: Stores) -> None:
    """A started store's pods settle once its watch is open (a memory store and an
    uncached one are settled always)."""
    deadline = time.monotonic() + 10
    while not stores.store.pods_settled() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stores.store.pods_settled() is True


def test_live_view_reads_what_the_cache_missed(stores: Stores) -> None:
    """``live`` is a view without the cache, or None where the store's reads are already
    current (memory, direct) or it offers none (the scheduler's cluster-wide caches)."""
    live = stores.store.live
    if isinstance(stores.store, NodeKubeCluster):
        assert live is not None
        stores.truth.add_pod(_bound("q"))
        names = {p["metadata"]["name"] for p in live.pods_on_node(NODE)}
        assert names == {"p", "q"}
        cached = {p["metadata"]["name"] for p in stores.store.pods_on_node(NODE)}
        assert cached == {"p"}  # the cache lags (the fake's watch delivers nothing)
    else:
        assert live is None


def test_namespace_labels_are_the_administrators(stores: Stores) -> None:
    assert stores.store.namespace_labels("team-a") == {"hami.io/disable-control": "allow"}
    assert stores.store.namespace_labels("team-b") == {}


def test_no_caller_probes_the_store() -> None:
    """Declared, so called: no ``getattr`` / ``hasattr`` of a store in the core."""
    import ast
    from pathlib import Path

    import hami_core

    core = Path(hami_core.__file__).parent
    probes = []
    for path in sorted(core.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and node.args
                and ast.unparse(node.args[0]).split(".")[-1] in ("store", "cluster")
            ):
                probes.append(f"{path.relative_to(core)}:{node.lineno}: {ast.unparse(node)}")
    assert probes == []
