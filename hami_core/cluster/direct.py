"""A ``ClusterStore`` for one node's agent: every read goes to the API server.

The device plugin runs on every node. Watching every pod and node of the cluster from
each of them (what the scheduler's ``KubeCluster`` caches do) would cost the API server
one full watch per node for data the plugin reads a few times a minute; and a cache
may lag kubelet, which calls ``Allocate`` right after it sees the pod bound. So this
store reads on demand: the node by name, the pods of one node through the field
selector ``spec.nodeName=<node>``, a pod by name. Writes are the same merge patches as
``KubeCluster``'s.
"""

from __future__ import annotations

import functools

from kubernetes import client as k8s

from .base import ClusterStore, KubeObject
from .kube import Informer, KubeCluster, _pod_nodes, call


class DirectKubeCluster(KubeCluster):
    """``KubeCluster`` without caches; ``start()`` / ``stop()`` do nothing.

    ``list_pods`` / ``pods_on_node`` list only pods bound to ``node`` (the only pods a
    node agent has business with). Quotas are not read. ``namespace_labels`` is
    ``KubeCluster``'s (read live).
    """

    cache_writes = False

    def __init__(
        self, api_client: k8s.ApiClient, *, node: str, component: str = "hami-device-plugin"
    ) -> None:
        super().__init__(api_client, component=component)
        self.node = node

    def start(self, *, timeout_s: float = 30.0) -> None:
        return None

    def stop(self) -> None:
        return None

    def list_nodes(self) -> list[KubeObject]:
        return [self.get_node(self.node)]

    def get_node(self, name: str) -> KubeObject:
        node: KubeObject = call(f"get node {name}", self.core.read_node, name)
        return node

    def cached_node(self, name: str) -> KubeObject:
        return self.get_node(name)

    def list_pods(self, *, namespace: str | None = None) -> list[KubeObject]:
        pods = self.pods_on_node(self.node)
        if namespace is None:
            return pods
        return [p for p in pods if (p.get("metadata") or {}).get("namespace") == namespace]

    def pods_on_node(self, node: str) -> list[KubeObject]:
        data = call(
            f"list pods on node {node}",
            self.core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={node}",
        )
        return list(data.get("items") or [])

    def get_pod(self, namespace: str, name: str) -> KubeObject:
        pod: KubeObject = call(
            f"get pod {namespace}/{name}", self.core.read_namespaced_pod, name, namespace
        )
        return pod

    def read_pod_live(self, namespace: str, name: str) -> KubeObject:
        """``get_pod``: every read is live already."""
        return self.get_pod(namespace, name)

    def pods_settled(self) -> bool:
        """Always True: no cache to lag."""
        return True

    @property
    def live(self) -> ClusterStore | None:
        """None: every read is live already."""
        return None

    def list_quotas(self, namespace: str) -> list[KubeObject]:
        return []


class NodeKubeCluster(KubeCluster):
    """The device plugin's store: caches of its own Node and of the pods bound to it
    (list+watch with the field selectors ``metadata.name=<node>`` and
    ``spec.nodeName=<node>``: one small watch per node, not the cluster's pods), so
    ``Allocate`` reads nothing from the API server. A cache may lag kubelet, which calls
    ``Allocate`` as soon as it sees the pod bound: ``live`` (a ``DirectKubeCluster``)
    reads the same data on demand, for the caller to retry a miss. ``read_pod_live`` and
    ``namespace_labels`` are ``KubeCluster``'s (read live); ``pods_settled`` is the pod
    cache's. Quotas are not read.
    """

    def __init__(
        self, api_client: k8s.ApiClient, *, node: str, component: str = "hami-device-plugin"
    ) -> None:
        super().__init__(api_client, component=component)
        self.node = node
        self.nodes = Informer(
            "node", functools.partial(self.core.list_node, field_selector=f"metadata.name={node}")
        )
        self.pods = Informer(
            "pods on node",
            functools.partial(
                self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
            ),
            index_fn=_pod_nodes,
        )
        self._informers = (self.nodes, self.pods)
        self._direct = DirectKubeCluster(api_client, node=node, component=component)

    @property
    def live(self) -> ClusterStore | None:
        """``ClusterStore.live``: the node's data read on demand."""
        return self._direct

    def start(self, *, timeout_s: float = 30.0) -> None:
        """Start the watches without waiting for them: until they have listed, reads
        miss the cache and go live (the plugin must come up while the API server is
        away, and serve kubelet as soon as it is back)."""
        for inf in self._informers:
            inf.start()

    def list_nodes(self) -> list[KubeObject]:
        return self.nodes.items() or self._direct.list_nodes()

    def pods_on_node(self, node: str) -> list[KubeObject]:
        """The cache's pods of ``node`` once it has listed; before that (the device
        plugin's first discovery and release run before ``start``), read live: an empty
        cache would read as "no pod holds anything", and the first release would free the
        MIG instances live pods hold. Raises ``ApiUnavailableError`` when the live read
        fails (the caller then frees nothing)."""
        if self.pods.wait_synced(0):
            return super().pods_on_node(node)
        return self._direct.pods_on_node(node)

    def list_quotas(self, namespace: str) -> list[KubeObject]:
        return []
