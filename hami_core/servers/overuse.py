"""The node monitor's actions about overuse, through the Kubernetes API (issue 24 item
19): a Warning Event on the pod (core/v1 ``Event``, as kubelet writes them) and an
eviction through the Eviction API (``pods/eviction``: PodDisruptionBudgets and the
pod's grace period apply, unlike a delete). The domain side is
``hami_core.monitor.overuse``.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.protocol.annotations import OVERUSE_POLICY

log = logging.getLogger(__name__)

#: ``source.component`` / ``reportingComponent`` of the Events.
COMPONENT = "hami-monitor"


class KubeOveruseActions:
    """``OveruseActions`` over a ``CoreV1Api``."""

    def __init__(self, core: Any, *, node_name: str) -> None:
        """Args:
        core: ``kubernetes.client.CoreV1Api``.
        node_name: this node (``source.host`` of the Events).
        """
        self.core = core
        self.node_name = node_name

    def event(self, pod: Mapping[str, Any], reason: str, message: str) -> None:
        """Create a Warning Event about ``pod`` (core/v1; the API server 1.20 serves it).

        Raises:
            kubernetes.client.ApiException: the API server refused it.
        """
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta.get('name', 'pod')}.{uuidlib.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "type": "Warning",
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT, "host": self.node_name},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.core.create_namespaced_event(namespace, body)

    def evict(self, pod: Mapping[str, Any], message: str) -> None:
        """Ask the Eviction API to evict ``pod``: ``policy/v1`` (Kubernetes >= 1.22),
        else ``policy/v1beta1`` (1.20, 1.21), which the subresource answers 404 / 400 to
        the other. The pod's UID is a precondition, so a pod recreated under the same
        name is never evicted for its predecessor.

        Raises:
            kubernetes.client.ApiException: refused (429 while a PodDisruptionBudget
                forbids it; the enforcer retries later).
        """
        from kubernetes.client.exceptions import ApiException

        meta = pod.get("metadata") or {}
        name, namespace = str(meta.get("name")), str(meta.get("namespace") or "default")
        last: ApiException | None = None
        for version in ("policy/v1", "policy/v1beta1"):
            body = {
                "apiVersion": version,
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": meta.get("uid")}},
            }
            try:
                self.core.create_namespaced_pod_eviction(name, namespace, body)
                return
            except ApiException as exc:
                if exc.status not in (400, 404, 415):
                    raise
                last = exc
        assert last is not None
        raise last


class NamespacePolicies:
    """The ``hami.io/overuse-policy`` label of each namespace, read when asked and kept
    ``ttl_s`` seconds (only namespaces with a container over its allocation are asked)."""

    def __init__(
        self,
        core: Any,
        *,
        ttl_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = core
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, str | None]] = {}

    def __call__(self, namespace: str) -> str | None:
        """The label's value, or None (absent).

        Raises:
            kubernetes.client.ApiException: the namespace cannot be read (the enforcer
                counts the policy as unset).
        """
        now = self.clock()
        with self._lock:
            hit = self._cache.get(namespace)
            if hit is not None and now - hit[0] < self.ttl_s:
                return hit[1]
        ns = self.core.read_namespace(namespace)
        labels = (getattr(ns, "metadata", None) and ns.metadata.labels) or {}
        value = labels.get(OVERUSE_POLICY)
        with self._lock:
            self._cache[namespace] = (now, value)
        return value
