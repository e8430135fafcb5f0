"""The pods a move leaves behind: the evicted pod's replacement, and the rooms held in the
planner's copy for the pods consolidation nominated (docs/consolidation.md).

A moved pod's controller creates its replacement as soon as the eviction marks the pod
terminating; consolidation nominates that replacement (``status.nominatedNodeName``) to
the node the plan found for it, so the scheduler's filter holds that room for it against
pods of its priority or lower (``hami_core.scheduling.held``) as it holds the room freed
for the pending pod. Which pod replaces which is read from the controller's uid (its
``ownerReferences`` entry with ``controller: true``), an API fact no pod's author sets
for another controller's pods.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from hami_core.cluster.memory import MemoryCluster
from hami_core.errors import HamiError

from .ledger import LedgerState, StepRecord
from .movable import OPT_OUT_KEY, OPT_OUT_VALUE, pod_key
from .planner import Planner, bound_pod

#: How far the API server's clock (creation times) may trail ours (the eviction's time).
CLOCK_SKEW_S = 5.0


def controller_uid(pod: Mapping[str, Any]) -> str:
    """The uid of ``pod``'s controlling owner ("" when none)."""
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            return str(owner.get("uid") or "")
    return ""


def uid_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def created_at(pod: Mapping[str, Any]) -> float | None:
    """``metadata.creationTimestamp`` as Unix seconds (None when unset or unreadable)."""
    text = (pod.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def open_steps(state: LedgerState) -> list[StepRecord]:
    """The moves whose replacement is not nominated yet."""
    return [s for p in state.plans.values() for s in p.steps if not s.replacement]


def match_replacements(
    state: LedgerState,
    pending: Iterable[Mapping[str, Any]],
    bound: Iterable[Mapping[str, Any]] = (),
) -> list[tuple[StepRecord, Mapping[str, Any]]]:
    """Pair each open step with a pod of the same namespace and controller that is not
    the evicted pod nor another step's replacement, oldest first: a pending one (returned
    for the caller to nominate), or one already bound and created since the eviction
    (nothing left to hold). The steps are updated (``replacement`` set)."""
    claimed = {s.replacement for p in state.plans.values() for s in p.steps} - {""}
    claimed |= set(state.plans)  # a pending pod being helped is nobody's replacement
    waiting = sorted(pending, key=lambda p: (created_at(p) or 0.0, pod_key(p)))
    placed = [p for p in bound if (p.get("spec") or {}).get("nodeName")]
    pairs = []
    for step in open_steps(state):
        namespace = step.pod.partition("/")[0]
        for pod in [*waiting, *placed]:
            uid = uid_of(pod)
            if (
                uid in claimed
                or uid == step.uid
                or pod_key(pod).partition("/")[0] != namespace
                or controller_uid(pod) != step.owner_uid
            ):
                continue
            if (pod.get("spec") or {}).get("nodeName"):
                if (created_at(pod) or 0.0) < step.at - CLOCK_SKEW_S:
                    continue  # a sibling that was there before the move
            else:
                pairs.append((step, pod))
            claimed.add(uid)
            step.replacement = uid
            break
    return pairs


def drop_leaving(cluster: MemoryCluster) -> None:
    """Remove the pods being deleted from the planner's copy: their room is on its way
    (an evicted pod stays until its kubelet confirms it gone), so a new plan never
    evicts again for room already being freed."""
    for pod in cluster.list_pods():
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            cluster.delete_pod(str(meta.get("namespace")), str(meta.get("name")))


def hold_nominated(
    planner: Planner,
    pending: Iterable[Mapping[str, Any]],
    nominated: Mapping[str, str | None],
    now: dt.datetime,
) -> set[str]:
    """Place in ``planner``'s copy each pending pod of ``nominated`` (uid -> its node, or
    None for the node the scheduler's filter ranks first) that fits there, marked so no
    plan moves it: the room the scheduler's filter holds for a pod consolidation
    nominated, or that a pending pod of higher priority takes next. Returns the uids
    held; a pod that does not fit (yet) is left out."""
    held: set[str] = set()
    cluster = planner.cluster
    assert isinstance(cluster, MemoryCluster)
    for pod in pending:
        uid = uid_of(pod)
        if uid not in nominated:
            continue
        node = nominated[uid]
        try:
            result = planner.scheduler.filter(pod, [node] if node else None)
        except HamiError:
            continue
        best = node if node else result.best()
        fit = result.fits.get(best) if best else None
        if fit is None or fit.allocation is None or best not in result.feasible:
            continue
        placed = bound_pod(pod, fit.allocation, planner.manager, now)
        placed["metadata"].setdefault("annotations", {})[OPT_OUT_KEY] = OPT_OUT_VALUE
        cluster.add_pod(placed)
        held.add(uid)
    return held


__all__ = [
    "controller_uid",
    "created_at",
    "drop_leaving",
    "hold_nominated",
    "match_replacements",
    "open_steps",
    "uid_of",
]
