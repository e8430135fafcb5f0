"""The monitor's Events and evictions through the Kubernetes client (issue 24 item 19):
the bodies the API server receives, the Eviction API's version fallback for 1.20, the
namespace policy cache."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from hami_core.servers.overuse import KubeOveruseActions, NamespacePolicies

POD = {"metadata": {"name": "trainer", "namespace": "team-a", "uid": "u-1"}}


class Core:
    def __init__(self, *, known_eviction: str = "policy/v1") -> None:
        self.known = known_eviction
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.evictions: list[tuple[str, str, dict[str, Any]]] = []
        self.reads = 0

    def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.events.append((namespace, body))

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: dict) -> None:
        self.evictions.append((name, namespace, body))
        if body["apiVersion"] != self.known:
            raise ApiException(status=404, reason="Not Found")

    def read_namespace(self, name: str) -> Any:
        self.reads += 1
        return SimpleNamespace(metadata=SimpleNamespace(labels={"hami.io/overuse-policy": "evict"}))


def test_the_event_names_the_pod_and_comes_from_the_monitor_of_this_node():
    core = Core()
    KubeOveruseActions(core, node_name="node-1").event(POD, "GPUMemoryOverAllocation", "m" * 5000)
    ((ns, body),) = core.events
    assert ns == "team-a" and body["type"] == "Warning"
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "trainer",
        "namespace": "team-a",
        "uid": "u-1",
    }
    assert body["source"] == {"component": "hami-monitor", "host": "node-1"}
    assert len(body["message"]) == 1024


@pytest.mark.parametrize("served", ["policy/v1", "policy/v1beta1"])
def test_the_eviction_carries_the_uid_and_falls_back_to_v1beta1_on_1_20(served):
    core = Core(known_eviction=served)
    KubeOveruseActions(core, node_name="node-1").evict(POD, "over")
    assert core.evictions[-1][2]["apiVersion"] == served
    assert core.evictions[-1][2]["deleteOptions"] == {"preconditions": {"uid": "u-1"}}
    assert [e[:2] for e in core.evictions] == [("trainer", "team-a")] * len(core.evictions)


def test_a_refused_eviction_is_raised_for_the_enforcer_to_retry():
    class Budget(Core):
        def create_namespaced_pod_eviction(self, name, namespace, body):
            raise ApiException(status=429, reason="Too Many Requests")

    with pytest.raises(ApiException):
        KubeOveruseActions(Budget(), node_name="n").evict(POD, "over")


def test_namespace_policies_are_cached():
    now = [0.0]
    core = Core()
    policies = NamespacePolicies(core, ttl_s=60, clock=lambda: now[0])
    assert policies("team-a") == "evict" and policies("team-a") == "evict"
    assert core.reads == 1
    now[0] = 61
    policies("team-a")
    assert core.reads == 2
