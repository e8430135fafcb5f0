"""Which running pods the planner may move, and why not (docs/consolidation.md).

A move is an eviction: the pod is deleted and its controller creates a replacement,
which the scheduler places. So a pod is movable for a pending pod only when all hold:

1. a controller recreates it: its controlling ``ownerReference`` is a ReplicaSet
   (Deployments), StatefulSet, ReplicationController, or a Job with restarts left
   (an evicted Job pod counts as failed against ``spec.backoffLimit``, default 6:
   Kubernetes ``pkg/controller/job``); a bare pod, a DaemonSet's (recreated on the
   same node) and a static pod's mirror never move;
2. every PodDisruptionBudget of its namespace that selects it allows one more
   disruption (``status.disruptionsAllowed``, less the evictions already planned);
   an unreadable selector protects the pod;
3. its priority (``spec.priority``, resolved by the API server from its
   ``priorityClassName``) is not above the pending pod's;
4. it is not opted out: the annotation ``hami.io/defrag: never`` on the pod itself,
   its namespace named in the administrator's ``--protect-namespace`` (``kube-system``
   by default) or labelled ``hami.io/defrag=never``.

Trust (docs/PROTOCOL.md §6-7): every rule reads the candidate pod's own object, its
own namespace's budgets and labels, or the administrator's settings. Nothing a
pending pod's author writes enters here, so no tenant can make another namespace's pod
movable; an opt-out annotation can only protect the pod that carries it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import attrs

from hami_core.cluster.eviction import covers, disruptions_allowed

#: The annotation (on a pod) and label (on a Namespace) that opt out of moves.
OPT_OUT_KEY = "hami.io/defrag"
OPT_OUT_VALUE = "never"
#: Namespaces never touched unless the administrator says otherwise.
DEFAULT_PROTECTED_NAMESPACES = ("kube-system",)
#: Controllers that create a replacement for an evicted pod (on any node).
RECREATING_KINDS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})
#: Kubernetes' default ``spec.backoffLimit`` of a Job.
DEFAULT_BACKOFF_LIMIT = 6
_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name`` of a pod object."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def pod_priority(pod: Mapping[str, Any]) -> int:
    """``spec.priority`` (0 when unset or not an integer, as Kubernetes' default)."""
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@attrs.frozen(kw_only=True)
class Budget:
    """One PodDisruptionBudget as the planner reads it.

    Attributes:
        namespace, name: the budget.
        selector: its ``spec.selector`` (an empty one selects every pod of the namespace,
            as ``policy/v1``).
        allowed: ``status.disruptionsAllowed`` when read.
    """

    namespace: str
    name: str
    selector: Any
    allowed: int

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Budget:
        """From a PodDisruptionBudget object (``policy/v1`` or ``v1beta1``); a missing or
        malformed ``disruptionsAllowed`` reads as 0 (fail closed)."""
        meta = obj.get("metadata") or {}
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name", "")),
            selector=(obj.get("spec") or {}).get("selector", {}),
            allowed=max(disruptions_allowed(obj), 0),
        )

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, pod: Mapping[str, Any]) -> bool:
        """Whether the budget covers ``pod`` (same namespace, selector matches); an
        unreadable selector covers every pod of its namespace."""
        return covers(self.namespace, self.selector, pod, fail_closed=True)


@attrs.define(kw_only=True)
class MovePolicy:
    """The administrator's and the cluster's say on moves (the module docstring).

    Attributes:
        protected_namespaces: namespaces whose pods never move.
        namespace_labels: namespace -> its labels (``hami.io/defrag=never`` protects it).
        budgets: every PodDisruptionBudget read.
        jobs: ``namespace/name`` -> Job object, for the restarts a Job pod has left.
        spent: budget key -> evictions already planned against it.
    """

    protected_namespaces: frozenset[str] = frozenset(DEFAULT_PROTECTED_NAMESPACES)
    namespace_labels: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    budgets: tuple[Budget, ...] = ()
    jobs: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    spent: dict[str, int] = attrs.field(factory=dict)

    @classmethod
    def build(
        cls,
        *,
        protected_namespaces: Collection[str] = DEFAULT_PROTECTED_NAMESPACES,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
        budgets: Iterable[Mapping[str, Any]] = (),
        jobs: Iterable[Mapping[str, Any]] = (),
    ) -> MovePolicy:
        """From the objects read (PodDisruptionBudgets and Jobs as the API gives them)."""
        return cls(
            protected_namespaces=frozenset(protected_namespaces),
            namespace_labels=dict(namespace_labels or {}),
            budgets=tuple(Budget.from_object(b) for b in budgets),
            jobs={pod_key(j): j for j in jobs},
        )

    def budgets_of(self, pod: Mapping[str, Any]) -> list[Budget]:
        """The budgets that cover ``pod``."""
        return [b for b in self.budgets if b.selects(pod)]

    def why_not(self, pod: Mapping[str, Any], *, for_priority: int) -> str | None:
        """Why ``pod`` may not move to make room for a pod of priority ``for_priority``,
        or None when it may (the module docstring's rules, first failing one named)."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        annotations = meta.get("annotations") or {}
        if meta.get("deletionTimestamp"):
            return "it is being deleted"
        if annotations.get(OPT_OUT_KEY) == OPT_OUT_VALUE:
            return f"opted out (annotation {OPT_OUT_KEY}: {OPT_OUT_VALUE})"
        if namespace in self.protected_namespaces:
            return f"namespace {namespace} is protected (--protect-namespace)"
        if (self.namespace_labels.get(namespace) or {}).get(OPT_OUT_KEY) == OPT_OUT_VALUE:
            return f"namespace {namespace} is protected (label {OPT_OUT_KEY}={OPT_OUT_VALUE})"
        unowned = self._why_not_recreated(pod, namespace)
        if unowned:
            return unowned
        priority = pod_priority(pod)
        if priority > for_priority:
            return f"its priority {priority} is above the pending pod's {for_priority}"
        for budget in self.budgets_of(pod):
            if budget.allowed - self.spent.get(budget.key, 0) <= 0:
                return f"PodDisruptionBudget {budget.key} allows no more disruptions"
        return None

    def spend(self, pod: Mapping[str, Any]) -> None:
        """Count one planned eviction of ``pod`` against every budget covering it."""
        for budget in self.budgets_of(pod):
            self.spent[budget.key] = self.spent.get(budget.key, 0) + 1

    def refund(self, pod: Mapping[str, Any]) -> None:
        """Undo ``spend`` (a tried move that was not kept)."""
        for budget in self.budgets_of(pod):
            self.spent[budget.key] -= 1

    def _why_not_recreated(self, pod: Mapping[str, Any], namespace: str) -> str | None:
        meta = pod.get("metadata") or {}
        if _MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            return "a static pod (its kubelet owns it)"
        owners = [o for o in meta.get("ownerReferences") or () if isinstance(o, Mapping)]
        controller = next((o for o in owners if o.get("controller") is True), None)
        if controller is None:
            return "no controller recreates it"
        kind = str(controller.get("kind", ""))
        if kind in RECREATING_KINDS:
            return None
        if kind == "Job":
            job = self.jobs.get(f"{namespace}/{controller.get('name', '')}")
            if job is None:
                return f"its Job {controller.get('name', '')} was not read"
            limit = (job.get("spec") or {}).get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
            failed = (job.get("status") or {}).get("failed") or 0
            if not isinstance(limit, int) or not isinstance(failed, int):
                return f"its Job {controller.get('name', '')} is unreadable"
            if failed + 1 > limit:
                return f"its Job has no restarts left ({failed} failed, backoffLimit {limit})"
            return None
        if kind == "DaemonSet":
            return "a DaemonSet pod (recreated on the same node)"
        return f"its controller {kind} is not known to recreate it elsewhere"
