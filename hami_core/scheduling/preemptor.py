"""PostFilter for slices: preemption carried out, off the filter's hot path.

When the extender's filter finds no node for a pod asking managed devices, the leader
hands the pod to ``Preemptor.request`` (a dict by pod uid: a pod asked for again while
waiting is queued once, with the latest nodes). A worker thread then, for each pod:

1. waits ``settle_s`` from the request (kube-scheduler writes its own failure, with its
   zero-victim nomination, right after the filter answers: ours must land after it) and
   re-reads the pod live; a pod gone, bound, not ours to judge or with
   ``preemptionPolicy: Never`` is left alone;
2. leaves a pod alone while lower-priority pods on its nominated node are still being
   deleted and their room is enough (kube-scheduler's ``PodEligibleToPreemptOthers``;
   not enough: a leader died part-way, the rest is chosen now), and one that fits now;
3. chooses victims (``preemption.choose_victims``) over the nodes kube-scheduler's own
   filters passed;
4. nominates the pod to the chosen node (``status.nominatedNodeName``, as kube-scheduler
   does), so the room is held (``held``) before anything is evicted, then evicts each
   victim (``cluster.eviction.evict_victim``: the Eviction API), those a
   PodDisruptionBudget covers first, recording ``Preempted`` on each victim (naming the
   preemptor, its priority and the slices it needs) and ``Preempting`` on the
   preemptor; a budget's refusal (429) stops there (``PreemptionBlocked``; a nomination
   that freed nothing is withdrawn).

``preempt_now`` runs steps 2-4 at once (``hami simulate``, tests); ``choose`` runs only
step 3 (the ``preemptVerb`` answer). Only the leader acts (``is_leader``, asked again
before the nomination and before each eviction: a deposed leader stops part-way).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from hami_core.cluster.base import ClusterStore
from hami_core.cluster.eviction import Evicted, Evictions, evict_victim, pdb_violations
from hami_core.errors import HamiError
from hami_core.facts.priority import (
    group_member,
    may_preempt,
    nominated_node,
    pod_priority,
    terminating,
)
from hami_core.protocol.pods import pod_ref

from .bind import EventSink
from .cycle import PodCycle
from .filtering import FilterEngine
from .preemption import Choice, choose_victims, describe_candidate

if TYPE_CHECKING:
    from .scheduler import Scheduler

log = logging.getLogger(__name__)

#: How long after the filter's answer the worker acts (see the module docstring).
SETTLE_S = 1.0

#: ``(outcome, victims evicted)`` after each attempt, for the metrics.
Observer = Callable[[str, int], None]


@attrs.frozen(kw_only=True)
class Outcome:
    """One preemption attempt.

    Attributes:
        result: ``preempted``, ``nominated`` (room being freed already), ``no-candidate``,
            ``blocked-by-budget``, ``waiting`` (victims still leaving), ``fits``,
            ``not-eligible``, ``error``.
        message: what happened, for logs and ``--explain``.
        node: the nominated node, "" when none.
        evicted: pod ref -> how its eviction ended.
    """

    result: str
    message: str
    node: str = ""
    evicted: Mapping[str, Evicted] = attrs.field(factory=dict)


def wanted(cycle: PodCycle) -> str:
    """The slices a pod asks, for events: ``1 x NVIDIA 12000 MiB``, per device request."""
    parts = []
    for c in cycle.request.containers:
        for d in c.devices:
            size = f"{d.memory_mib} MiB" if d.memory_mib else f"{d.memory_pct}% memory"
            cores = f", {d.cores_pct}% cores" if d.cores_pct else ""
            parts.append(f"{d.count} x {d.vendor} {size}{cores}")
    return "; ".join(parts) or "no device"


class Preemptor:
    """Slice-aware preemption for one scheduler (module docstring)."""

    def __init__(
        self,
        *,
        store: ClusterStore,
        engine: FilterEngine,
        cycle_of: Callable[[Mapping[str, Any]], PodCycle],
        fits: Callable[[Mapping[str, Any], Sequence[str]], bool],
        evictions: Evictions,
        events: EventSink,
        selector: Mapping[str, str] | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        settle_s: float = SETTLE_S,
    ) -> None:
        """Args:
        store: reads the pod live before acting.
        engine / cycle_of: the scheduler's filter engine and PreFilter.
        fits: ``(pod, nodes) -> bool``: whether the pod fits one of them now.
        evictions: the writes (``cluster.eviction``).
        events: where ``Preempted`` / ``Preempting`` events go.
        selector: ``--node-label-selector``.
        is_leader: only the leader writes.
        settle_s: the worker's delay after a request.
        """
        self.store = store
        self.engine = engine
        self.cycle_of = cycle_of
        self.fits = fits
        self.evictions = evictions
        self.events = events
        self.selector = dict(selector or {})
        self.is_leader = is_leader
        self.settle_s = settle_s
        self.observer: Observer | None = None
        self._lock = threading.Condition()
        self._queue: dict[str, tuple[Mapping[str, Any], list[str], float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def over(
        cls,
        scheduler: Scheduler,
        evictions: Evictions,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        settle_s: float = SETTLE_S,
    ) -> Preemptor:
        """A preemptor over ``scheduler``'s engine, PreFilter, filter, events and node
        selector (the same code as its filter), writing through ``evictions``."""
        return cls(
            store=scheduler.store,
            engine=scheduler.engine,
            cycle_of=scheduler.cycle,
            fits=lambda pod, names: bool(scheduler.filter(pod, names).feasible),
            evictions=evictions,
            events=scheduler.events,
            selector=scheduler.node_selector,
            is_leader=is_leader,
            settle_s=settle_s,
        )

    # -- the queue -------------------------------------------------------------------

    def request(self, pod: Mapping[str, Any], names: Sequence[str]) -> None:
        """Queue ``pod`` (the filter found no node among ``names``); cheap, never raises."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid or not may_preempt(pod):
            return
        with self._lock:
            self._queue[uid] = (pod, list(names), time.monotonic() + self.settle_s)
            self._lock.notify()

    def start(self) -> Preemptor:
        """Start the worker thread."""
        self._thread = threading.Thread(target=self._run, name="preemptor", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, timeout_s: float = 2.0) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def pending(self) -> int:
        """Pods queued."""
        with self._lock:
            return len(self._queue)

    def _next(self) -> tuple[Mapping[str, Any], list[str]] | None:
        with self._lock:
            while not self._stop.is_set():
                now = time.monotonic()
                due = [(at, uid) for uid, (_, _, at) in self._queue.items()]
                if due:
                    at, uid = min(due)
                    if at <= now:
                        pod, names, _ = self._queue.pop(uid)
                        return pod, names
                    self._lock.wait(at - now)
                else:
                    self._lock.wait(1.0)
        return None

    def _run(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            pod, names = item
            meta = pod.get("metadata") or {}
            try:
                current = self.store.read_pod_live(
                    str(meta.get("namespace")), str(meta.get("name"))
                )
            except HamiError:
                continue  # gone
            if (current.get("metadata") or {}).get("uid") != meta.get("uid"):
                continue
            try:
                outcome = self.preempt_now(current, names)
            except Exception as exc:  # the worker outlives any one pod
                log.warning("preemption for %s failed: %s", pod_ref(pod), exc)
                self._observe("error", 0)
                continue
            if outcome.result in ("preempted", "nominated"):
                log.info("preemption for %s: %s", pod_ref(pod), outcome.message)

    # -- one attempt -----------------------------------------------------------------

    def choose(self, pod: Mapping[str, Any], names: Sequence[str]) -> Choice:
        """The victims ``pod`` would need over ``names`` (no write).

        Raises:
            InvalidInputError: the pod's requests or policy annotations are invalid.
        """
        return self._choose(self.cycle_of(pod), names)

    def _choose(self, cycle: PodCycle, names: Sequence[str]) -> Choice:
        return choose_victims(
            self.engine.state,
            self.engine,
            cycle,
            names,
            selector=self.selector,
            budgets=self._budgets,
        )

    def _budgets(self, namespaces: frozenset[str]) -> list[Mapping[str, Any]]:
        return [b for ns in sorted(namespaces) for b in self.evictions.budgets(ns)]

    def preempt_now(self, pod: Mapping[str, Any], names: Sequence[str]) -> Outcome:
        """Steps 2-4 of the module docstring for ``pod`` as it is now.

        Raises:
            InvalidInputError: the pod's requests or policy annotations are invalid.
            HamiError: a write failed (what was done before it stays done).
        """
        outcome = self._attempt(pod, names)
        self._observe(outcome.result, len(outcome.evicted))
        return outcome

    def _attempt(self, pod: Mapping[str, Any], names: Sequence[str]) -> Outcome:
        spec = pod.get("spec") or {}
        if spec.get("nodeName") or not may_preempt(pod) or terminating(pod):
            return Outcome(result="not-eligible", message="bound, leaving, or may not preempt")
        if group_member(pod):
            return Outcome(result="not-eligible", message="a gang member: no preemption for groups")
        cycle = self.cycle_of(pod)
        if not cycle.request.wants_devices:
            return Outcome(result="not-eligible", message="asks no managed device")
        if self._victims_leaving(pod) and self._room_coming(pod, cycle):
            return Outcome(result="waiting", message="victims on its nominated node still leaving")
        if self.fits(pod, names):
            return Outcome(result="fits", message="fits without preemption now")
        choice = self._choose(cycle, names)
        candidate = choice.candidate
        if candidate is None:
            return Outcome(result="no-candidate", message=choice.reason)
        if not self.is_leader():
            return Outcome(result="not-eligible", message="not the leader")
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        self.evictions.nominate(namespace, name, candidate.node)  # the room held first
        needs = wanted(cycle)
        text = describe_candidate(candidate)
        evicted: dict[str, Evicted] = {}
        # Budget-covered victims first: a refusal then stops before the others are gone.
        budgets = self._budgets(frozenset(v.namespace for v in candidate.victims))
        order = sorted(
            candidate.victims, key=lambda v: not pdb_violations([v.pod], budgets, spare=True)
        )
        for victim in order:
            if not self.is_leader():  # deposed meanwhile: the new leader carries on
                message = (
                    f"not the leader any more: {len(evicted)} of {len(order)} victims "
                    f"evicted ({text})"
                )
                return Outcome(
                    result="not-eligible", message=message, node=candidate.node, evicted=evicted
                )
            how = evict_victim(self.evictions, victim.pod)
            evicted[victim.ref] = how
            if how is Evicted.BLOCKED_BY_BUDGET:
                if not any(e is Evicted.EVICTED for e in evicted.values()):
                    self.evictions.nominate(namespace, name, "")  # nothing freed: hold nothing
                message = (
                    f"a PodDisruptionBudget refused the eviction of {victim.ref}; "
                    f"{len(evicted) - 1} of {len(order)} victims evicted ({text})"
                )
                self._event(pod, "Warning", "PreemptionBlocked", message)
                return Outcome(
                    result="blocked-by-budget",
                    message=message,
                    node=candidate.node,
                    evicted=evicted,
                )
            if how is Evicted.EVICTED:
                self._event(
                    victim.pod,
                    "Normal",
                    "Preempted",
                    f"Preempted by {pod_ref(pod)} (priority {pod_priority(pod)}) on node "
                    f"{candidate.node}: it needs {needs}",
                )
        if candidate.victims:
            self._event(pod, "Normal", "Preempting", f"for {needs}: {text}")
        result = "preempted" if candidate.victims else "nominated"
        return Outcome(result=result, message=text, node=candidate.node, evicted=evicted)

    def _victims_leaving(self, pod: Mapping[str, Any]) -> bool:
        """kube-scheduler's rule: a pod nominated to a node where a lower-priority pod is
        being deleted does not preempt again (that room is on its way)."""
        node = nominated_node(pod) or str((pod.get("status") or {}).get("nominatedNodeName") or "")
        if not node:
            return False
        mine = pod_priority(pod)
        state = self.engine.state
        with state.lock:
            cached = state.node(node)
            if cached is None:
                return False
            return any(
                obj is not None and terminating(obj) and pod_priority(obj) < mine
                for obj, _, _ in state.holders(cached)
            )

    def _room_coming(self, pod: Mapping[str, Any], cycle: PodCycle) -> bool:
        """Whether the pod fits its nominated node once the lower-priority pods leaving
        it are gone (``choose_victims`` counts them gone: no victim left to choose). Not
        so when a leader died, or was deposed, part-way through the evictions: then the
        rest are chosen and evicted now rather than waiting for room that never comes."""
        node = nominated_node(pod) or str((pod.get("status") or {}).get("nominatedNodeName") or "")
        choice = self._choose(cycle, [node])
        return choice.candidate is not None and not choice.candidate.victims

    def _event(self, obj: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        try:
            self.events.record_event(dict(obj), type=kind, reason=reason, message=message)
        except Exception as exc:
            log.warning("cannot record %s event: %s", reason, exc)

    def _observe(self, result: str, victims: int) -> None:
        if self.observer is not None:
            self.observer(result, victims)


__all__ = ["SETTLE_S", "Observer", "Outcome", "Preemptor", "wanted"]
