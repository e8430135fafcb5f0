"""``hami webhook``'s store: its scheduler's pods watched only once a quota exists.

The webhook reads pods for one thing: what a namespace's pods already count against its
device quota (PROTOCOL.md §8), asked only for a namespace whose ResourceQuotas limit a
device resource. A cluster without any ResourceQuota never asks, yet a pod cache decodes
every pod event of the cluster (with ``KubeCluster(scheduler_name=...)``, every event of
our scheduler's pods: several per pod scheduled). So the pod list+watch starts when the
first ResourceQuota is seen (the quota cache's own watch tells), or when pods are first
read; until that cache has listed, a read waits for it a little and then lists the pods
live, so a quota check never counts from a partial cache.
"""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import client as k8s

from .base import KubeObject
from .kube import KubeCluster, _pod_nodes, _slim, call

#: How long a read of pods waits for the pod cache's first list before it lists live
#: (seconds): well under the API server's webhook timeout (10 s by default).
PODS_WAIT_S = 3.0


class QuotaPodsKubeCluster(KubeCluster):
    """``KubeCluster`` (nodes and quotas cached from ``start``) whose pod cache, of
    ``scheduler_name``'s pods only, starts with the first ResourceQuota or read of pods
    (module docstring). ``start`` waits for the nodes and quotas only."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        scheduler_name: str,
        component: str = "hami-webhook",
        pods_wait_s: float = PODS_WAIT_S,
    ) -> None:
        """Args:
        scheduler_name: our ``schedulerName``: only its pods count for a quota
            (``quota.placed_by_us``), only they are cached or listed.
        pods_wait_s: how long a read of pods waits for the cache's first list before it
            lists them live.
        """
        super().__init__(api_client, component=component, scheduler_name=scheduler_name)
        self.pods_wait_s = pods_wait_s
        self._informers = (self.nodes, self.quotas)
        self._pods_lock = threading.Lock()
        self._pods_started = False

    def start(self, *, timeout_s: float = 30.0) -> None:
        """``KubeCluster.start`` for the nodes and quotas, then the pod cache at once if
        a ResourceQuota exists, else with the first one the quota watch brings."""
        super().start(timeout_s=timeout_s)
        self.quotas.add_handler(self._on_quota)  # replays the quotas listed

    def stop(self) -> None:
        super().stop()
        with self._pods_lock:
            started = self._pods_started
        if started:
            self.pods.stop()

    @property
    def watching_pods(self) -> bool:
        """Whether the pod cache has been started."""
        with self._pods_lock:
            return self._pods_started

    def watch_pods(self) -> None:
        """Start the pod cache (once; never blocks)."""
        with self._pods_lock:
            if self._pods_started:
                return
            self._pods_started = True
        self.pods.start()

    def _on_quota(self, old: KubeObject | None, new: KubeObject | None) -> None:
        if new is not None:
            self.watch_pods()

    def list_pods(self, *, namespace: str | None = None) -> list[KubeObject]:
        """Our scheduler's pods (of ``namespace``): from the cache once it has listed,
        else (within ``pods_wait_s``) read live.

        Raises:
            ApiUnavailableError, ApiError: the live list failed.
        """
        self.watch_pods()
        if self.pods.wait_synced(self.pods_wait_s):
            return super().list_pods(namespace=namespace)
        return self._live_pods(namespace)

    def pods_on_node(self, node: str) -> list[KubeObject]:
        """Our scheduler's pods on ``node``, as ``list_pods`` reads them."""
        self.watch_pods()
        if self.pods.wait_synced(self.pods_wait_s):
            return super().pods_on_node(node)
        return [p for p in self._live_pods(None) if node in _pod_nodes(p)]

    def _live_pods(self, namespace: str | None) -> list[KubeObject]:
        selector = f"spec.schedulerName={self.scheduler_name}"
        data: dict[str, Any]
        if namespace is None:
            data = call("list pods", self.core.list_pod_for_all_namespaces, field_selector=selector)
        else:
            data = call(
                f"list pods of {namespace}",
                self.core.list_namespaced_pod,
                namespace,
                field_selector=selector,
            )
        return [_slim(p) for p in data.get("items") or []]


__all__ = ["PODS_WAIT_S", "QuotaPodsKubeCluster"]
