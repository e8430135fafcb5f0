"""One interface over cluster state: ``ClusterStore``.

Objects are the JSON form of Kubernetes objects (plain dicts), as the API server
serves them. Two implementations: ``memory`` (embedded, in process) and ``kube`` (the
API server through the official client). Every component's logic runs on either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

KubeObject = dict[str, Any]


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

    def bind_pod(self, namespace: str, name: str, *, uid: str, node: str) -> None:
        """Create the pod's ``Binding`` to ``node`` (sets ``spec.nodeName``)."""
        ...

    def list_quotas(self, namespace: str) -> list[KubeObject]:
        """``ResourceQuota`` objects of a namespace."""
        ...

    def record_event(self, obj: KubeObject, *, type: str, reason: str, message: str) -> None:
        """Write an event about ``obj`` (``type`` Normal or Warning)."""
        ...
