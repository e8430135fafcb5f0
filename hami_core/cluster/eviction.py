"""Evicting pods and nominating their replacement's node: the writes that make room.

Preemption (``hami_core.scheduling.preemptor``) and any later mover of pods (a
consolidation planner) go through ``evict_victim``: the Eviction API, so every
PodDisruptionBudget is asked; a budget's refusal (HTTP 429) leaves the pod running and
is reported (``Evicted.BLOCKED_BY_BUDGET``). That is stricter than kube-scheduler, whose
preemption deletes its chosen victims whatever their budgets say (it only prefers
candidates violating fewer: ``pkg/scheduler/framework/plugins/defaultpreemption``):
nothing here deletes a pod. kube-apiserver 1.20 serves the Eviction
subresource as ``policy/v1beta1`` (``policy/v1`` from 1.22).

Two implementations of ``Evictions``: ``kube_eviction.KubeEvictions`` over the API server (RBAC: the
scheduler needs ``create`` on ``pods/eviction``, ``patch`` on ``pods/status`` and
``list`` on ``poddisruptionbudgets``) and ``MemoryEvictions`` over the
embedded cluster of ``hami simulate`` and the tests.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from hami_core.errors import ConflictError, NotFoundError

from .base import KubeObject
from .memory import MemoryCluster


class Evicted(enum.StrEnum):
    """How one eviction ended."""

    EVICTED = "evicted"  # the Eviction API accepted it
    BLOCKED_BY_BUDGET = "blocked-by-budget"  # a PodDisruptionBudget refused (429)
    GONE = "gone"  # the pod was gone already (or is another pod now: its uid changed)


class Evictions(Protocol):
    """The writes that make room (module docstring)."""

    def evict(self, namespace: str, name: str, *, uid: str) -> bool:
        """Ask the Eviction API to evict the pod with ``uid``: True when accepted,
        False when a PodDisruptionBudget refuses (429). Raises ``NotFoundError`` when the
        pod is gone or has another uid."""
        ...

    def nominate(self, namespace: str, name: str, node: str) -> None:
        """Set the pod's ``status.nominatedNodeName`` to ``node`` ("" clears it)."""
        ...

    def budgets(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        """The namespace's PodDisruptionBudgets (empty when they cannot be read)."""
        ...


def _allowed(pdb: Mapping[str, Any]) -> int:
    value = (pdb.get("status") or {}).get("disruptionsAllowed")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """A ``LabelSelector`` over ``labels`` (``matchLabels``; ``matchExpressions`` with
    ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``); a malformed one selects nothing."""
    if not isinstance(selector, Mapping):
        return False
    match = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not isinstance(match, Mapping) or not isinstance(exprs, list):
        return False
    if not all(labels.get(str(k)) == str(v) for k, v in match.items()):
        return False
    for e in exprs:
        if not isinstance(e, Mapping):
            return False
        key, op, values = str(e.get("key", "")), e.get("operator"), e.get("values") or []
        has = key in labels
        if op == "In":
            ok = has and labels[key] in values
        elif op == "NotIn":
            ok = not has or labels[key] not in values
        elif op in ("Exists", "DoesNotExist"):
            ok = has == (op == "Exists")
        else:
            ok = False
        if not ok:
            return False
    return True


def selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether PodDisruptionBudget ``pdb`` covers ``pod``: same namespace, a non-empty
    selector matching the pod's labels (kube-scheduler 1.20 skips empty selectors)."""
    meta = pod.get("metadata") or {}
    if (pdb.get("metadata") or {}).get("namespace") != meta.get("namespace"):
        return False
    selector = (pdb.get("spec") or {}).get("selector")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    return bool(selector) and bool(labels) and _selector_matches(selector, labels)


def pdb_violations(
    victims: Iterable[Mapping[str, Any]],
    budgets: Iterable[Mapping[str, Any]],
    *,
    spare: bool = False,
) -> int:
    """How many of ``victims`` evicting all would violate a PodDisruptionBudget: a victim
    counts when a budget covering it (``selects``) has its ``status.disruptionsAllowed``
    used up by the victims before it (kube-scheduler's ``filterPodsWithPDBViolation``,
    ``pkg/scheduler/framework/plugins/defaultpreemption``). With ``spare``, a victim
    any budget covers counts, whatever it allows (the victims to evict first)."""
    rows = [b for b in budgets if isinstance(b, Mapping)]
    left = [_allowed(b) for b in rows]
    count = 0
    for pod in victims:
        violated = False
        for pos, pdb in enumerate(rows):
            if selects(pdb, pod):
                left[pos] -= 1
                violated = violated or left[pos] < 0 or spare
        count += violated
    return count


def evict_victim(evictions: Evictions, pod: Mapping[str, Any]) -> Evicted:
    """Evict ``pod`` through the Eviction API (module docstring). Raises the store's
    errors but a missing pod or a failed uid precondition (then GONE)."""
    meta = pod.get("metadata") or {}
    namespace, name, uid = str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid"))
    try:
        if evictions.evict(namespace, name, uid=uid):
            return Evicted.EVICTED
        return Evicted.BLOCKED_BY_BUDGET
    except (NotFoundError, ConflictError):  # gone, or its uid precondition failed (409)
        return Evicted.GONE


class MemoryEvictions:
    """``Evictions`` over the embedded cluster: an eviction deletes at once; budgets
    are those given (``add_budget``), each allowing ``status.disruptionsAllowed``."""

    def __init__(self, store: MemoryCluster) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._budgets: list[KubeObject] = []

    def add_budget(self, pdb: Mapping[str, Any]) -> None:
        with self._lock:
            self._budgets.append(dict(pdb))

    def _check(self, namespace: str, name: str, uid: str) -> KubeObject:
        pod = self.store.get_pod(namespace, name)
        if (pod.get("metadata") or {}).get("uid") != uid:
            raise NotFoundError(f"pod {namespace}/{name} ({uid}) is gone")
        return pod

    def evict(self, namespace: str, name: str, *, uid: str) -> bool:
        pod = self._check(namespace, name, uid)
        with self._lock:
            mine = [b for b in self._budgets if selects(b, pod)]
            if any(_allowed(b) <= 0 for b in mine):
                return False
            for b in mine:  # the eviction uses one disruption of each budget selecting it
                b.setdefault("status", {})["disruptionsAllowed"] = _allowed(b) - 1
        self.store.delete_pod(namespace, name)
        return True

    def nominate(self, namespace: str, name: str, node: str) -> None:
        self.store.set_pod_status(namespace, name, {"nominatedNodeName": node or None})

    def budgets(self, namespace: str) -> Sequence[Mapping[str, Any]]:
        with self._lock:
            return [
                dict(b)
                for b in self._budgets
                if (b.get("metadata") or {}).get("namespace") == namespace
            ]


__all__ = [
    "Evicted",
    "Evictions",
    "MemoryEvictions",
    "evict_victim",
    "pdb_violations",
    "selects",
]
