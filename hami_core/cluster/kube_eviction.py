"""``Evictions`` over the API server (``eviction`` for the rules).

kube-apiserver 1.20 serves the Eviction subresource as ``policy/v1beta1`` and
PodDisruptionBudgets as ``policy/v1beta1`` (``policy/v1`` for both from 1.21/1.22).
RBAC of the scheduler: ``create`` on ``pods/eviction``, ``patch`` on ``pods/status``,
``list`` on ``policy/poddisruptionbudgets``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client as k8s

from .kube import ApiError, KubeCluster, call


class KubeEvictions:
    """``Evictions`` over the API server, beside a ``KubeCluster``."""

    def __init__(self, store: KubeCluster) -> None:
        self.core = store.core
        self.custom = k8s.CustomObjectsApi(store.api)

    def evict(self, namespace: str, name: str, *, uid: str) -> bool:
        body = {
            "apiVersion": "policy/v1beta1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        try:
            call(
                f"evict pod {namespace}/{name}",
                self.core.create_namespaced_pod_eviction,
                name,
                namespace,
                body,
            )
        except ApiError as exc:
            if exc.status == 429:  # a PodDisruptionBudget allows no disruption now
                return False
            raise
        return True

    def nominate(self, namespace: str, name: str, node: str) -> None:
        call(
            f"nominate pod {namespace}/{name}",
            self.core.patch_namespaced_pod_status,
            name,
            namespace,
            {"status": {"nominatedNodeName": node or None}},
            _content_type="application/merge-patch+json",
        )

    def budgets(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        try:
            found = call(
                f"list poddisruptionbudgets in {namespace}",
                self.custom.list_namespaced_custom_object,
                "policy",
                "v1beta1",
                namespace,
                "poddisruptionbudgets",
            )
        except Exception:  # unreadable budgets: choose as if none (eviction still asks)
            return ()
        return list(found.get("items") or ())


__all__ = ["KubeEvictions"]
