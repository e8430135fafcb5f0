"""A pod's priority, whether it may preempt, its nominated node, and its disruption
budgets: the Kubernetes fields preemption reads, and nothing a pod's author may write
freely.

- Priority is ``spec.priority`` only. kube-apiserver's ``Priority`` admission plugin
  (on by default) writes it from ``spec.priorityClassName`` and refuses a pod that states
  its own number (``plugin/pkg/admission/priority``: "the integer value of priority must
  not be provided in pod spec"), so the number comes from a ``PriorityClass``, an
  administrator's object. No annotation or label of the pod counts (PROTOCOL.md §6).
- ``spec.preemptionPolicy: Never`` forbids preempting (Kubernetes ``PreemptNever``).
- ``status.nominatedNodeName`` is written by a scheduler (kube-scheduler, or hami's
  preemption), never by the pod's author through ``pods`` (a status subresource).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Kubernetes' value for ``spec.preemptionPolicy`` that forbids preempting.
PREEMPT_NEVER = "Never"


def pod_priority(pod: Mapping[str, Any]) -> int:
    """``spec.priority`` (an int32 set by admission from the pod's PriorityClass), 0 when
    absent or not an integer (kube-scheduler's ``podutil.GetPodPriority``: 0 without one)."""
    value = (pod.get("spec") or {}).get("priority")
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value


def may_preempt(pod: Mapping[str, Any]) -> bool:
    """False when ``spec.preemptionPolicy`` is ``Never``."""
    return (pod.get("spec") or {}).get("preemptionPolicy") != PREEMPT_NEVER


def outranks_default(pod: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler's own preemption would act for ``pod`` when no node fits: it
    may preempt and its priority is above the default 0 (kube-scheduler dry-runs only
    nodes holding pods of lower priority). The extender then answers its nodes as
    unresolvable (PROTOCOL.md §5): kube-scheduler's dry run cannot free slices, and
    kube-scheduler 1.20.2 panics when two such nodes tie with zero victims
    (``pickOneNodeForPreemption``, ``default_preemption.go``: ``victims.Pods[0]``)."""
    return may_preempt(pod) and pod_priority(pod) > 0


def nominated_node(pod: Mapping[str, Any]) -> str:
    """``status.nominatedNodeName`` of a pod not bound yet (no ``spec.nodeName``), not
    finished and not being deleted; "" otherwise: only such a pod holds room on a node it
    waits for (kube-scheduler's nominator keeps the same pods)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    if spec.get("nodeName") or meta.get("deletionTimestamp"):
        return ""
    if status.get("phase") in ("Succeeded", "Failed"):
        return ""
    name = status.get("nominatedNodeName")
    return name if isinstance(name, str) else ""


#: The keys that make a pod a member of a gang group (scheduler-plugins' label,
#: Volcano's annotation): preemption does not act for one member alone.
GROUP_KEYS = ("scheduling.x-k8s.io/pod-group", "scheduling.k8s.io/group-name")


def group_member(pod: Mapping[str, Any]) -> bool:
    """Whether the pod names a gang group (``GROUP_KEYS``, as a label or annotation):
    victims chosen for one member could free room for some members and not the rest, so
    hami preempts for no member (docs/preemption-and-gangs.md)."""
    meta = pod.get("metadata") or {}
    named = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
    return any(named.get(k) for k in GROUP_KEYS)


def terminating(pod: Mapping[str, Any]) -> bool:
    """The pod is being deleted (``metadata.deletionTimestamp`` set): its devices are on
    their way back; preemption does not choose it again."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


__all__ = [
    "GROUP_KEYS",
    "PREEMPT_NEVER",
    "group_member",
    "may_preempt",
    "nominated_node",
    "outranks_default",
    "pod_priority",
    "terminating",
]
