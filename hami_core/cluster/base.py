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
