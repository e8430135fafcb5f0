"""``KubeCluster(scheduler_name=...)``: the pod cache of ``hami scheduler`` and ``hami
webhook`` holds only their scheduler's pods, selected by the API server (a field
selector on list and watch), and nothing read or written here brings another pod in;
the webhook's (``QuotaPodsKubeCluster``) watches pods only once a quota exists."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.cluster.kube import KubeCluster, make_api_client
from hami_core.cluster.quotapods import QuotaPodsKubeCluster
from hami_core.facts.quota import namespace_usage
from hami_core.facts.usage import requested_vendors
from hami_core.webhook import Admission
from tests.builders import cluster, container, gpu, manager, node, pod
from tests.deviceplugin.fake_apiserver import FakeApiServer

OURS = "hami-scheduler"


def placed(name: str, scheduler: str) -> dict:
    """A pod bound to n1 carrying a 4000 MiB allocation on GPU-1 (forged unless ours)."""
    p = pod(name, container(gpu=1, gpumem=4000), scheduler_name=scheduler)
    p["metadata"]["namespace"] = "team-a"
    p["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "n1",
        "hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,4000,0:;",
        "hami.io/vgpu-devices-to-allocate": "GPU-1,NVIDIA,4000,0:;",
        "hami.io/bind-phase": "success",
    }
    p["spec"]["nodeName"] = "n1"
    p["status"] = {"phase": "Running"}
    return p


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path]]:
    c: MemoryCluster = cluster(node("n1", [gpu("GPU-1")]))
    c.add_pod(placed("mine", OURS))
    # a tenant's pod of another scheduler, annotated as if we had placed it
    c.add_pod(placed("forged", "default-scheduler"))
    server = FakeApiServer(c).start()
    try:
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig")
    finally:
        server.stop()


def names(store: KubeCluster) -> list[str]:
    return [p["metadata"]["name"] for p in store.list_pods()]


def test_only_our_schedulers_pods_are_listed_watched_and_cached(api):
    server, kubeconfig = api
    store = KubeCluster(make_api_client(str(kubeconfig)), scheduler_name=OURS)
    store.start(timeout_s=10)
    try:
        assert names(store) == ["mine"]
        # a live read of the other pod answers it, and leaves it out of the cache
        assert store.get_pod("team-a", "forged")["spec"]["schedulerName"] == "default-scheduler"
        assert store.read_pod_live("team-a", "forged")["metadata"]["name"] == "forged"
        assert names(store) == ["mine"]
        assert store.pods_on_node("n1")[0]["metadata"]["name"] == "mine"
        assert len(store.pods_on_node("n1")) == 1
        selector = f"spec.schedulerName={OURS}"
        assert (False, selector) in server.pod_selectors  # the list
        server_watches = [s for w, s in server.pod_selectors if w]
        assert server_watches and set(server_watches) == {selector}
        # what the quota counts is what it counted over every pod (the trust rule)
        m = manager()
        every = server.cluster.list_pods(namespace="team-a")
        counted = [
            namespace_usage(
                pods,
                m.device_types(),
                scheduler_name=OURS,
                requested=lambda p: requested_vendors(p, m),
            )
            for pods in (store.list_pods(namespace="team-a"), every)
        ]
        assert counted[0] == counted[1] and counted[0]
    finally:
        store.stop()


def test_without_a_scheduler_name_every_pod_is_cached(api):
    server, kubeconfig = api
    store = KubeCluster(make_api_client(str(kubeconfig)))
    store.start(timeout_s=10)
    try:
        assert names(store) == ["forged", "mine"]
        assert {s for _, s in server.pod_selectors} == {""}
    finally:
        store.stop()


# -- hami webhook's store: no pod watch until a quota exists ------------------------------

QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "gpu-quota", "namespace": "team-a", "resourceVersion": "1"},
    "spec": {"hard": {"limits.nvidia.com/gpumem": "6000"}},
}


def webhook_store(kubeconfig: Path, **kwargs) -> QuotaPodsKubeCluster:
    store = QuotaPodsKubeCluster(make_api_client(str(kubeconfig)), scheduler_name=OURS, **kwargs)
    store.start(timeout_s=10)
    return store


def test_the_webhook_watches_no_pod_while_the_cluster_has_no_quota(api):
    server, kubeconfig = api
    store = webhook_store(kubeconfig)
    try:
        time.sleep(0.3)
        assert server.pod_selectors == [] and not store.watching_pods
        # a read of pods (a quota seen by a reader first) starts the cache and waits for it
        assert names_of(store.list_pods(namespace="team-a")) == ["mine"]
        assert store.watching_pods
        selector = f"spec.schedulerName={OURS}"
        assert (False, selector) in server.pod_selectors
        wait_for(lambda: (True, selector) in server.pod_selectors)
    finally:
        store.stop()


def test_a_quota_starts_the_pod_watch_before_any_pod_is_read(api):
    server, kubeconfig = api
    server.quotas.append(QUOTA)
    store = webhook_store(kubeconfig)
    try:
        wait_for(lambda: (True, f"spec.schedulerName={OURS}") in server.pod_selectors)
        assert store.watching_pods and store.pods.wait_synced(5)
        assert names_of(store.list_pods()) == ["mine"]
    finally:
        store.stop()


def test_pods_are_read_live_until_the_cache_has_listed(api, monkeypatch):
    """The quota never counts from a cache still listing: a read waits ``pods_wait_s``,
    then lists our scheduler's pods live (the forged pod of another left out)."""
    server, kubeconfig = api
    store = webhook_store(kubeconfig, pods_wait_s=0.05)
    monkeypatch.setattr(store.pods, "wait_synced", lambda timeout_s: False)
    try:
        before = len(server.pod_selectors)
        assert names_of(store.list_pods(namespace="team-a")) == ["mine"]
        assert names_of(store.pods_on_node("n1")) == ["mine"]
        assert server.pod_selectors[before] == (False, f"spec.schedulerName={OURS}")
    finally:
        store.stop()


def test_the_webhook_denies_past_the_quota_with_its_store(api):
    """The admission's quota check through this store: 4000 MiB of ``mine`` and 4000
    asked exceed 6000; the tenant's forged pod of another scheduler counts nothing (2000
    asked fits beside ``mine``)."""
    server, kubeconfig = api
    server.quotas.append(QUOTA)
    store = webhook_store(kubeconfig)
    try:
        admission = Admission(manager(), store)

        def asking(mib: int) -> dict:
            p = pod(f"new-{mib}", container(gpu=1, gpumem=mib), scheduler_name=OURS)
            p["metadata"]["namespace"] = "team-a"
            return p

        denied = admission.review(asking(4000))
        assert not denied.allowed and denied.reason == "ResourceQuotaNotFit"
        assert admission.review(asking(2000)).allowed
    finally:
        store.stop()


def names_of(pods: list[dict]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def wait_for(check, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
