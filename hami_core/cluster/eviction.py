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
from .selectors import SelectorError, selector_matches


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


def disruptions_allowed(pdb: Mapping[str, Any]) -> int:
    """A PodDisruptionBudget's ``status.disruptionsAllowed`` (0 when unset or not an
    integer)."""
    return _allowed(pdb)


def covers(
    namespace: Any, selector: Any, pod: Mapping[str, Any], *, fail_closed: bool = False
) -> bool:
    """Whether a PodDisruptionBudget of ``namespace`` with ``spec.selector`` ``selector``
    covers ``pod``: same namespace and the selector matches the pod's labels
    (``selectors.selector_matches``).

    By default as kube-scheduler 1.20's preemption reads budgets: an empty or unreadable
    selector, or a pod without labels, is covered by nothing. With ``fail_closed`` (a
    planner that must not guess): a missing namespace reads as ``default``, an empty
    selector covers every pod of the namespace (``policy/v1``) and an unreadable one
    covers them too."""
    meta = pod.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    if fail_closed:
        if str(meta.get("namespace") or "default") != str(namespace or "default"):
            return False
        try:
            return selector_matches(selector if selector is not None else {}, labels)
        except SelectorError:
            return True
    if namespace != meta.get("namespace") or not selector or not labels:
        return False
    try:
        return selector_matches(selector, labels)
    except SelectorError:
        return False


def selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether PodDisruptionBudget ``pdb`` covers ``pod`` as kube-scheduler 1.20's
    preemption reads it (``covers``): same namespace, a non-empty readable selector
    matching the pod's labels."""
    return covers(
        (pdb.get("metadata") or {}).get("namespace"), (pdb.get("spec") or {}).get("selector"), pod
    )


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
    "covers",
    "disruptions_allowed",
    "evict_victim",
    "pdb_violations",
    "selects",
]
