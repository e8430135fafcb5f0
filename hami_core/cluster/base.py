"""One interface over cluster state: ``ClusterStore``.

Objects are the JSON form of Kubernetes objects (plain dicts), as the API server
serves them. Two implementations: ``memory`` (embedded, in process) and ``kube`` (the
API server through the official client). Every component's logic runs on either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

KubeObject = dict[str, Any]

#: ``listener(kind, old, new)``: ``kind`` is ``Node``, ``Pod`` or ``ResourceQuota``;
#: ``old`` is None for an addition, ``new`` None for a deletion. Both are shared,
#: read-only snapshots. Called on the thread that applied the change, in order.
Listener = Callable[[str, "KubeObject | None", "KubeObject | None"], None]


class ClusterStore(Protocol):
    """What the scheduler, webhook and device plugin need from the cluster.

    Errors: ``NotFoundError`` for a missing object, ``ConflictError`` when a
    ``resource_version`` precondition fails (the caller re-reads and retries).

    Reads may come from a cache that lags the API server. Four members say how far to
    trust it, and every store answers each (none is optional, none is probed):
    ``read_pod_live`` and ``pods_settled`` (the scheduler's bind), ``live`` (the device
    plugin's ``Allocate``, whose kubelet call may follow the bind faster than a watch),
    ``namespace_labels`` (the device plugin's opt-out).
    """

    def list_nodes(self) -> list[KubeObject]:
        """Every node."""
        ...

    def get_node(self, name: str) -> KubeObject:
        """One node. Raises ``NotFoundError``."""
        ...

    def cached_node(self, name: str) -> KubeObject:
        """One node as the store's cache holds it, without a request to the API server
        (a shared snapshot: read-only; its ``resourceVersion`` may be stale, so a write
        conditioned on it may answer ``ConflictError``). Raises ``NotFoundError``."""
        ...

    def subscribe(self, listener: Listener) -> None:
        """Have ``listener`` told of every change of nodes, pods and quotas, after the
        objects present now are replayed to it as additions (an informer's event
        handler: Kubernetes client-go ``AddEventHandler``)."""
        ...

    def list_pods(self, *, namespace: str | None = None) -> list[KubeObject]:
        """Every pod, or those of one namespace."""
        ...

    def pods_on_node(self, node: str) -> list[KubeObject]:
        """Pods assigned to ``node`` by us (annotation ``hami.io/vgpu-node``) or by
        ``spec.nodeName``. Read-only: implementations may return shared snapshots."""
        ...

    def get_pod(self, namespace: str, name: str) -> KubeObject:
        """One pod. Raises ``NotFoundError``."""
        ...

    def read_pod_live(self, namespace: str, name: str) -> KubeObject:
        """One pod as the API server has it now, never from a cache (a bind's rollback
        decides on it); a store without a cache answers ``get_pod``. Raises
        ``NotFoundError``."""
        ...

    def pods_settled(self) -> bool:
        """True when the pod reads can be trusted to hold every change up to about now;
        False while a cache may miss recent ones (before its first list, or after its
        watch broke: an API-server restart), when the caller reads live. Always True for
        a store without a cache."""
        ...

    @property
    def live(self) -> ClusterStore | None:
        """The same reads without the cache, for a caller whose cached read may have
        missed what just happened; None where the reads are current already (no cache)
        or the store has no such view (the scheduler's cluster-wide caches: a caller
        there uses ``read_pod_live``)."""
        ...

    def namespace_labels(self, name: str) -> dict[str, str]:
        """The labels of namespace ``name`` (an administrator's, never a pod author's);
        empty for a namespace without labels. Raises ``NotFoundError`` for a missing
        namespace where the store knows namespaces (the API server's), and the store's
        errors when they cannot be read."""
        ...

    def patch_node_annotations(
        self,
        name: str,
        annotations: Mapping[str, str | None],
        *,
        resource_version: str | None = None,
    ) -> KubeObject:
        """Set (str) or remove (None) node annotations; with ``resource_version``, only
        if the node is unchanged since (optimistic concurrency). Returns the new node."""
        ...

    def remove_node_annotation(self, name: str, key: str, *, value: str) -> bool:
        """Remove a node annotation only if it still equals ``value``, in one write;
        False when it changed, is gone, or the node is gone."""
        ...

    def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        *,
        annotations: Mapping[str, str | None] | None = None,
        labels: Mapping[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> KubeObject:
        """Set or remove pod annotations and labels. Returns the new pod."""
        ...

    def bind_pod(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Create the pod's ``Binding`` to ``node`` (sets ``spec.nodeName``); its
        ``annotations`` land on the pod in the same write (the API server copies a
        Binding's annotations onto the pod: ``BindingREST`` ``setPodHostAndAnnotations``,
        kubernetes ``pkg/registry/core/pod/storage``), so the pod is never seen
        annotated but unbound."""
        ...

    def list_quotas(self, namespace: str) -> list[KubeObject]:
        """``ResourceQuota`` objects of a namespace."""
        ...

    def record_event(self, obj: KubeObject, *, type: str, reason: str, message: str) -> None:
        """Write an event about ``obj`` (``type`` Normal or Warning)."""
        ...
