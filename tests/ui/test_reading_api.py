"""The web view's reading of the API server is ``hami defrag``'s listing of nodes, pods
and quotas (``defrag.sources.list_cluster``, one copy), and no more: its client lists
nodes, pods and resourcequotas only (docs/web-view.md, what its RBAC grants), never
PodDisruptionBudgets, Jobs or namespaces, which ``hami defrag`` reads besides."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.simulate.runner import make_manager
from hami_core.ui.reading import from_api
from tests.defrag.world import MIB, gpu_node, pending, running
from tests.deviceplugin.fake_apiserver import FakeApiServer


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    cluster = MemoryCluster()
    cluster.add_node(gpu_node("node-0"))
    cluster.add_pod(running("held", "node-0", (0,), mem=MIB // 2, cores=50, namespace="a"))
    cluster.add_pod(pending("waiting", namespace="b"))
    finished = running("done", "node-0", (1,), mem=MIB, cores=100, namespace="a")
    finished["status"] = {"phase": "Succeeded"}
    cluster.add_pod(finished)
    other = pending("theirs", namespace="b")
    other["spec"]["schedulerName"] = "default-scheduler"
    cluster.add_pod(other)
    server = FakeApiServer(cluster).start()
    yield server
    server.stop()


def test_the_web_view_lists_nodes_pods_and_quotas_and_nothing_else(api, tmp_path):
    read = from_api(str(api.write_kubeconfig(tmp_path / "kubeconfig")), make_manager(None))
    reading = read()
    assert [p["metadata"]["name"] for p in reading.read.pending] == ["waiting"]
    assert {p["metadata"]["name"] for p in reading.read.cluster.list_pods()} == {"held"}
    assert [n["metadata"]["name"] for n in reading.read.cluster.list_nodes()] == ["node-0"]
    assert {path for _, path in api.requests} == {
        "/api/v1/nodes",
        "/api/v1/pods",
        "/api/v1/resourcequotas",
    }
    assert all(method == "GET" for method, _ in api.requests)
