"""The embedded cluster: nodes, pods and resource quotas held in process.

Used by ``hami simulate`` and most tests. Semantics follow the API server where the
scheduler depends on them: every write bumps ``metadata.resourceVersion``, a stale
``resource_version`` precondition raises ``ConflictError``, reads return copies.
"""

from __future__ import annotations

import copy
import itertools
import threading
import uuid as uuidlib
from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.errors import ConflictError, InvalidInputError, NotFoundError
from hami_core.protocol.annotations import VGPU_NODE

from .base import ClusterStore, KubeObject, Listener


@attrs.frozen
class Event:
    """An event recorded by the embedded cluster."""

    kind: str
    namespace: str
    name: str
    type: str
    reason: str
    message: str
    #: how often it happened (an ``EventRecorder`` aggregates repeats into one event)
    count: int = 1
    event_name: str = ""


class MemoryCluster:
    """A ``ClusterStore`` in memory. Thread-safe; objects are copied in and out.

    It is its own truth, with no cache to lag: ``read_pod_live`` is ``get_pod``,
    ``pods_settled`` is always True and ``live`` is None.
    """

    #: ``ClusterStore.live``: no cache, so no view without one.
    live: ClusterStore | None = None

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._nodes: dict[str, KubeObject] = {}
        self._pods: dict[tuple[str, str], KubeObject] = {}
        self._quotas: dict[tuple[str, str], KubeObject] = {}
        self._namespace_labels: dict[str, dict[str, str]] = {}
        # node name -> pods assigned to it (annotation or spec.nodeName): the scheduler
        # asks per node on every filter, so it must not scan every pod of the cluster.
        self._by_node: dict[str, set[tuple[str, str]]] = {}
        self._nodes_of: dict[tuple[str, str], set[str]] = {}
        self._versions = itertools.count(1)
        self._listeners: list[Listener] = []
        self.events: list[Event] = []

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(kind, old, new)`` after every change of a node, pod or quota;
        the objects present now are replayed first as additions (``old`` None), so the
        listener never misses one. Objects are shared snapshots: read-only."""
        with self._lock:
            for node in self._nodes.values():
                listener("Node", None, node)
            for quota in self._quotas.values():
                listener("ResourceQuota", None, quota)
            for pod in self._pods.values():
                listener("Pod", None, pod)
            self._listeners.append(listener)

    def _emit(self, kind: str, old: KubeObject | None, new: KubeObject | None) -> None:
        for listener in self._listeners:
            listener(kind, old, new)

    # -- writes used by loaders and tests ------------------------------------------

    def add_node(self, node: Mapping[str, Any]) -> KubeObject:
        """Add or replace a node object."""
        obj = self._stamp(node, "Node")
        with self._lock:
            old = self._nodes.get(obj["metadata"]["name"])
            self._nodes[obj["metadata"]["name"]] = obj
            self._emit("Node", old, obj)
        return copy.deepcopy(obj)

    def add_pod(self, pod: Mapping[str, Any]) -> KubeObject:
        """Create a pod (a ``uid`` is assigned when missing). Replaces one of the same name."""
        obj = self._stamp(pod, "Pod")
        meta = obj["metadata"]
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuidlib.uuid4()))
        obj.setdefault("status", {}).setdefault("phase", "Pending")
        with self._lock:
            key = (meta["namespace"], meta["name"])
            old = self._pods.get(key)
            self._pods[key] = obj
            self._index(key, obj)
            self._emit("Pod", old, obj)
        return copy.deepcopy(obj)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Remove a pod; its devices are free at once (usage is recomputed from pods)."""
        with self._lock:
            old = self._pods.pop((namespace, name), None)
            if old is None:
                raise NotFoundError(f"pod {namespace}/{name} not found")
            self._index((namespace, name), None)
            self._emit("Pod", old, None)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> None:
        """Set ``status.phase`` (``Succeeded`` / ``Failed`` pods hold no devices)."""
        self.set_pod_status(namespace, name, {"phase": phase})

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Set fields of ``status`` (what kubelet writes), e.g. ``phase`` or
        ``initContainerStatuses`` (finished init containers free their devices)."""
        with self._lock:
            old = self._pod(namespace, name)
            pod = copy.deepcopy(old)
            pod.setdefault("status", {}).update(copy.deepcopy(dict(status)))
            self._bump(pod)
            self._pods[(namespace, name)] = pod
            self._emit("Pod", old, pod)

    def add_quota(self, quota: Mapping[str, Any]) -> KubeObject:
        """Add a ``ResourceQuota``."""
        obj = self._stamp(quota, "ResourceQuota")
        meta = obj["metadata"]
        meta.setdefault("namespace", "default")
        with self._lock:
            old = self._quotas.get((meta["namespace"], meta["name"]))
            self._quotas[(meta["namespace"], meta["name"])] = obj
            self._emit("ResourceQuota", old, obj)
        return copy.deepcopy(obj)

    # -- ClusterStore --------------------------------------------------------------

    def list_nodes(self) -> list[KubeObject]:
        with self._lock:
            return [copy.deepcopy(n) for _, n in sorted(self._nodes.items())]

    def get_node(self, name: str) -> KubeObject:
        with self._lock:
            return copy.deepcopy(self._node(name))

    def cached_node(self, name: str) -> KubeObject:
        """The stored node itself (a shared snapshot: read-only). Raises ``NotFoundError``."""
        with self._lock:
            return self._node(name)

    def list_pods(self, *, namespace: str | None = None) -> list[KubeObject]:
        with self._lock:
            return [
                copy.deepcopy(p)
                for (ns, _), p in sorted(self._pods.items())
                if namespace is None or ns == namespace
            ]

    def cached_pods(self) -> list[KubeObject]:
        """Every stored pod itself, by namespace and name: shared snapshots, not copies
        (writers replace a stored pod, never change it, so a snapshot never changes under
        its reader; readers must not modify it). ``list_pods`` copies each pod, the most of
        a whole-cluster read's time at 1000 nodes (the consolidation planner's)."""
        with self._lock:
            return [p for _, p in sorted(self._pods.items())]

    def pods_on_node(self, node: str) -> list[KubeObject]:
        """Shared snapshots, not copies (the scheduler calls this for every node on every
        filter): writers replace stored pods instead of changing them, so a snapshot never
        changes under its reader; readers must not modify it."""
        with self._lock:
            return [self._pods[k] for k in sorted(self._by_node.get(node, ()))]

    def get_pod(self, namespace: str, name: str) -> KubeObject:
        with self._lock:
            return copy.deepcopy(self._pod(namespace, name))

    def read_pod_live(self, namespace: str, name: str) -> KubeObject:
        """``get_pod``: this store is the truth."""
        return self.get_pod(namespace, name)

    def pods_settled(self) -> bool:
        """Always True: nothing lags."""
        return True

    def patch_node_annotations(
        self,
        name: str,
        annotations: Mapping[str, str | None],
        *,
        resource_version: str | None = None,
    ) -> KubeObject:
        with self._lock:
            old = self._node(name)
            self._check_version(old, resource_version)
            node = copy.deepcopy(old)  # replaced, never changed in place: snapshots stay valid
            _merge(node["metadata"].setdefault("annotations", {}), annotations)
            self._bump(node)
            self._nodes[name] = node
            self._emit("Node", old, node)
            return copy.deepcopy(node)

    def remove_node_annotation(self, name: str, key: str, *, value: str) -> bool:
        """``KubeCluster.remove_node_annotation``: remove ``key`` only if it equals ``value``."""
        with self._lock:
            node = self._nodes.get(name)
            if node is None or (node["metadata"].get("annotations") or {}).get(key) != value:
                return False
            self.patch_node_annotations(name, {key: None})
            return True

    def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        *,
        annotations: Mapping[str, str | None] | None = None,
        labels: Mapping[str, str | None] | None = None,
        resource_version: str | None = None,
    ) -> KubeObject:
        with self._lock:
            old = self._pod(namespace, name)
            pod = copy.deepcopy(old)
            self._check_version(pod, resource_version)
            _merge(pod["metadata"].setdefault("annotations", {}), annotations or {})
            _merge(pod["metadata"].setdefault("labels", {}), labels or {})
            self._bump(pod)
            self._pods[(namespace, name)] = pod
            self._index((namespace, name), pod)
            self._emit("Pod", old, pod)
            return copy.deepcopy(pod)

    def bind_pod(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        with self._lock:
            old = self._pod(namespace, name)
            pod = copy.deepcopy(old)
            if pod["metadata"].get("uid") != uid:
                raise ConflictError(f"pod {namespace}/{name} has another uid than {uid}")
            if pod.setdefault("spec", {}).get("nodeName"):
                raise ConflictError(f"pod {namespace}/{name} is already bound")
            self._node(node)
            pod["spec"]["nodeName"] = node
            if annotations:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
            self._bump(pod)
            self._pods[(namespace, name)] = pod
            self._index((namespace, name), pod)
            self._emit("Pod", old, pod)

    def list_quotas(self, namespace: str) -> list[KubeObject]:
        with self._lock:
            return [
                copy.deepcopy(q) for (ns, _), q in sorted(self._quotas.items()) if ns == namespace
            ]

    def label_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        """Set namespace ``name``'s labels (an administrator's; namespaces exist implicitly)."""
        with self._lock:
            self._namespace_labels[name] = dict(labels)

    def namespace_labels(self, name: str) -> dict[str, str]:
        """The labels ``label_namespace`` set (none for any other namespace)."""
        with self._lock:
            return dict(self._namespace_labels.get(name, {}))

    def record_event(self, obj: KubeObject, *, type: str, reason: str, message: str) -> None:
        self.record_event_series(obj, type=type, reason=reason, message=message, count=1)

    def record_event_series(
        self,
        obj: KubeObject,
        *,
        type: str,
        reason: str,
        message: str,
        count: int,
        existing: str | None = None,
    ) -> str:
        """``KubeCluster.record_event_series`` in memory: a repeat updates the event."""
        meta = obj.get("metadata") or {}
        with self._lock:
            for i, e in enumerate(self.events):
                if existing is not None and e.event_name == existing:
                    self.events[i] = attrs.evolve(e, message=message, count=count)
                    return existing
            name = f"{meta.get('name', 'object')}.{next(self._versions)}"
            self.events.append(
                Event(
                    kind=str(obj.get("kind", "")),
                    namespace=str(meta.get("namespace", "")),
                    name=str(meta.get("name", "")),
                    type=type,
                    reason=reason,
                    message=message,
                    count=count,
                    event_name=name,
                )
            )
            return name

    # -- internals -----------------------------------------------------------------

    def _stamp(self, obj: Mapping[str, Any], kind: str) -> KubeObject:
        out = copy.deepcopy(dict(obj))
        out.setdefault("kind", kind)
        meta = out.setdefault("metadata", {})
        if not meta.get("name"):
            raise InvalidInputError(f"{kind} without metadata.name")
        self._bump(out)
        return out

    def _index(self, key: tuple[str, str], pod: KubeObject | None) -> None:
        for node in self._nodes_of.pop(key, ()):
            self._by_node.get(node, set()).discard(key)
        if pod is None:
            return
        nodes = {
            (pod["metadata"].get("annotations") or {}).get(VGPU_NODE),
            (pod.get("spec") or {}).get("nodeName"),
        }
        names = {str(n) for n in nodes if n}
        self._nodes_of[key] = names
        for node in names:
            self._by_node.setdefault(node, set()).add(key)

    def _bump(self, obj: KubeObject) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._versions))

    def _node(self, name: str) -> KubeObject:
        try:
            return self._nodes[name]
        except KeyError:
            raise NotFoundError(f"node {name} not found") from None

    def _pod(self, namespace: str, name: str) -> KubeObject:
        try:
            return self._pods[(namespace, name)]
        except KeyError:
            raise NotFoundError(f"pod {namespace}/{name} not found") from None

    @staticmethod
    def _check_version(obj: KubeObject, resource_version: str | None) -> None:
        current = obj["metadata"].get("resourceVersion")
        if resource_version is not None and resource_version != current:
            kind = obj.get("kind", "object")
            raise ConflictError(
                f"{kind} {obj['metadata']['name']} changed (resourceVersion {current}, "
                f"expected {resource_version})"
            )


def _merge(target: dict[str, str], changes: Mapping[str, str | None]) -> None:
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
