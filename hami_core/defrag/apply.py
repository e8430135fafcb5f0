"""Carrying a plan out: ``hami defrag --apply`` and continuous consolidation
(docs/consolidation.md).

One step at a time, each round reading the cluster again:

1. the replacements of pods moved earlier (any run, any leader: the ``ledger``) are
   nominated to the node the plan found for them (``replacements``);
2. the planner plans for the target pods on a copy of the cluster in which pods being
   deleted are gone (their room is on its way) and the pods consolidation nominated hold
   their room where they still fit (so a round never undoes the previous one);
3. the first move of the first target whose plan fits the eviction budgets (per run and
   per hour) is made: the target is nominated to its planned node first, so its room is
   held (``hami_core.scheduling.held``) before anything leaves, then the pod is evicted
   through the Eviction API (``cluster.eviction.evict_victim``), the ledger records it
   and a ``Defragmented`` event on the pod says why;
4. a PodDisruptionBudget's refusal (429) is retried every ``budget_retry_s`` for
   ``budget_wait_s``, then the target's plan stops (``DefragmentBlocked`` on the target;
   a nomination that freed nothing is withdrawn). Nothing is ever deleted or forced.

The run ends when no target needs a move, a budget is spent, or leadership is lost (asked
before every write). Then it waits up to ``replacement_wait_s`` for the moved pods'
replacements to appear, to nominate them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import attrs

from hami_core.cluster.eviction import Evicted, Evictions, evict_victim
from hami_core.errors import ConflictError, InvalidInputError
from hami_core.facts.priority import group_member
from hami_core.plugin import BackendManager
from hami_core.scheduling.bind import EventSink

from .ledger import BLOCKED_HOLD_S, Ledger, LedgerState, PlanRecord, StepRecord
from .movable import MovePolicy, pod_key, pod_priority
from .planner import Move, Outcome, Plan, Planner
from .replacements import (
    controller_uid,
    drop_leaving,
    hold_nominated,
    match_replacements,
    open_steps,
    uid_of,
)
from .sources import DefragInput

log = logging.getLogger(__name__)

#: How many times a ledger write lost to another writer is tried again.
SAVE_TRIES = 5

#: The event on a moved pod (PROTOCOL.md §5) and on a target whose plan a budget stopped.
DEFRAGMENTED = "Defragmented"
BLOCKED = "DefragmentBlocked"


@attrs.frozen(kw_only=True)
class ApplyLimits:
    """The bounds of carrying plans out (settings: ``hami defrag --apply`` and
    ``hami scheduler --consolidation``).

    Attributes:
        max_evictions: evictions in one run at most.
        max_evictions_per_hour: evictions in any hour at most (every run and leader,
            counted in the ledger).
        budget_wait_s: how long a PodDisruptionBudget's refusal is waited on.
        budget_retry_s: how often the refused eviction is asked again meanwhile.
        replacement_wait_s: how long the run waits for moved pods' replacements.
    """

    max_evictions: int = 8
    max_evictions_per_hour: int = 20
    budget_wait_s: float = 30.0
    budget_retry_s: float = 2.0
    replacement_wait_s: float = 30.0

    def __attrs_post_init__(self) -> None:
        for name in ("max_evictions", "max_evictions_per_hour"):
            if getattr(self, name) < 0:
                raise InvalidInputError(f"{name} must be 0 or more")
        for name in ("budget_wait_s", "budget_retry_s", "replacement_wait_s"):
            if getattr(self, name) < 0:
                raise InvalidInputError(f"{name} must be 0 or more seconds")


@attrs.frozen(kw_only=True)
class Step:
    """One eviction asked: the move, how it ended (``Evicted``'s value)."""

    move: Move
    result: str


@attrs.frozen(kw_only=True)
class ApplyReport:
    """What one run did: its steps in order and why it stopped."""

    steps: tuple[Step, ...]
    stopped: str
    skipped: Mapping[str, str] = attrs.field(factory=dict)  # target -> why not helped

    @property
    def evicted(self) -> int:
        return sum(1 for s in self.steps if s.result == Evicted.EVICTED.value)


class Applier:
    """Carries plans out (the module docstring)."""

    def __init__(
        self,
        *,
        read: Callable[[], DefragInput],
        manager: BackendManager,
        evictions: Evictions,
        events: EventSink,
        ledger: Ledger,
        limits: ApplyLimits,
        protected_namespaces: Collection[str] = ("kube-system",),
        planner_options: Mapping[str, Any] | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Args:
        read: the cluster now (``sources.from_api`` or a test's world), called each round.
        evictions: the Eviction API and nominations (``cluster.eviction``).
        events: where ``Defragmented`` / ``DefragmentBlocked`` go.
        ledger: the record shared by every run and leader (``ledger``).
        planner_options: ``Planner``'s keyword options (policies, bounds).
        is_leader: asked before every write; False ends the run.
        clock / sleep: wall time (Unix seconds) and waiting, for tests.
        """
        self.read = read
        self.manager = manager
        self.evictions = evictions
        self.events = events
        self.ledger = ledger
        self.limits = limits
        self.protected = tuple(protected_namespaces)
        self.planner_options = dict(planner_options or {})
        self.is_leader = is_leader
        self.clock = clock
        self.sleep = sleep

    # -- a run -----------------------------------------------------------------------

    def run(self, pods: Collection[str] | None = None) -> ApplyReport:
        """Help the pending pods named ``pods`` (``namespace/name``; None: every pending
        pod of the scheduler when the run starts) as the module docstring says.

        Raises:
            LedgerError: the ledger is unreadable (nothing is evicted).
            HamiError: the cluster cannot be read or a write failed; what was done
                before stays done and recorded.
        """
        steps: list[Step] = []
        skipped: dict[str, str] = {}
        read = self.read()
        targets = {
            uid_of(p): pod_key(p) for p in read.pending if pods is None or pod_key(p) in pods
        }
        for name in sorted(set(pods or ()) - set(targets.values())):
            skipped[name] = "not a pending pod of the scheduler"
        stopped = ""
        for _ in range(4 * self.limits.max_evictions + 8):  # each round evicts or drops one
            if not self.is_leader():
                stopped = "not the leader"
                break
            state = self.ledger.load()
            state.prune(self.clock(), {uid_of(p) for p in read.pending})
            self._give_back_stale_rooms(state)
            self._nominate_replacements(state, read)
            stopped = self._round(read, state, targets, steps, skipped)
            if stopped:
                break
            read = self.read()
        else:
            stopped = "too many rounds"
        self._await_replacements(read)
        return ApplyReport(steps=tuple(steps), stopped=stopped, skipped=skipped)

    def _round(
        self,
        read: DefragInput,
        state: LedgerState,
        targets: dict[str, str],
        steps: list[Step],
        skipped: dict[str, str],
    ) -> str:
        """Plan and make one move; returns why the run stops, "" to go on."""
        pending = {uid_of(p): p for p in read.pending}
        for uid in [u for u in targets if u not in pending]:
            del targets[uid]  # bound or gone
        for uid, pod in pending.items():
            if uid in targets and group_member(pod):
                skipped[targets.pop(uid)] = "a gang member: groups are not consolidated for"
            elif uid in targets and not _ours(state, uid) and _nominated(pod):
                skipped[targets.pop(uid)] = "preemption holds room for it"
        if not targets:
            return "no target needs a move"
        plan, originals = self._plan(read, state, [pending[u] for u in targets])
        for unplaced in (o for o in plan.outcomes if not o.placed):
            skipped[unplaced.pod] = unplaced.reason
            targets.pop(next(u for u, k in targets.items() if k == unplaced.pod), None)
        outcome = next((o for o in plan.outcomes if o.moves), None)
        if outcome is None:
            return "no target needs a move"
        done = sum(1 for s in steps if s.result == Evicted.EVICTED.value)
        left = min(
            self.limits.max_evictions - done,
            self.limits.max_evictions_per_hour - state.recent(self.clock()),
        )
        target = next(p for p in read.pending if pod_key(p) == outcome.pod)
        if len(outcome.moves) > left:
            skipped[targets.pop(uid_of(target))] = (
                f"needs {len(outcome.moves)} moves, the eviction budget allows {max(left, 0)}"
            )
            return "" if targets and left > 0 else "eviction budget spent"
        move = outcome.moves[0]
        victim = originals[move.pod]
        if not self.is_leader():  # asked again right before the writes
            return "not the leader"
        to_move = [uid_of(originals[m.pod]) for m in outcome.moves]
        record = self._nominate_target(state, target, outcome, to_move)
        how = self._evict(victim)
        steps.append(Step(move=move, result=how.value))
        if how is Evicted.BLOCKED_BY_BUDGET:
            self._blocked(state, target, record, move)
            del targets[uid_of(target)]
            skipped[outcome.pod] = f"a PodDisruptionBudget refused the eviction of {move.pod}"
            return ""
        if how is Evicted.EVICTED:
            self._record(state, uid_of(target), victim, move)
            self._event(
                victim,
                "Normal",
                DEFRAGMENTED,
                f"Moved for {outcome.pod} (pending, priority {pod_priority(target)}), which "
                f"needs its room on node {outcome.node} ({', '.join(outcome.gpus)}): leaves "
                f"{move.from_node} ({', '.join(move.from_gpus)}), its replacement planned "
                f"on {move.to_node} ({', '.join(move.to_gpus)})",
            )
        return ""

    def _plan(
        self, read: DefragInput, state: LedgerState, targets: Sequence[Mapping[str, Any]]
    ) -> tuple[Plan, dict[str, Mapping[str, Any]]]:
        """The plan for the targets not held, on the copy (module docstring, step 2); and
        the running pods by key as read (the planner changes the copy)."""
        drop_leaving(read.cluster)
        originals: dict[str, Mapping[str, Any]] = {pod_key(p): p for p in read.cluster.list_pods()}
        policy = MovePolicy.build(
            protected_namespaces=self.protected,
            namespace_labels=read.namespace_labels,
            budgets=read.budgets,
            jobs=read.jobs,
        )
        planner = Planner(read.cluster, self.manager, policy, **self.planner_options)
        nominated: dict[str, str | None] = {u: p.node for u, p in state.plans.items() if p.node}
        nominated.update(
            {s.replacement: s.to_node for p in state.plans.values() for s in p.steps if s.nominated}
        )
        held = hold_nominated(planner, read.pending, nominated, planner.clock())
        # pending pods above the targets that are not helped: where they fit now, their
        # room is theirs (a plan never makes a pending pod of higher priority worse off)
        lowest = min((pod_priority(p) for p in targets), default=0)
        wanted = {uid_of(p) for p in targets}
        above = sorted(
            (
                p
                for p in read.pending
                if uid_of(p) not in wanted and uid_of(p) not in held and pod_priority(p) > lowest
            ),
            key=lambda p: -pod_priority(p),
        )
        held |= hold_nominated(planner, above, dict.fromkeys(map(uid_of, above)), planner.clock())
        plan = planner.plan([p for p in targets if uid_of(p) not in held])
        return plan, originals

    # -- the writes ------------------------------------------------------------------

    def _nominate_target(
        self,
        state: LedgerState,
        target: Mapping[str, Any],
        outcome: Outcome,
        to_move: Sequence[str],
    ) -> PlanRecord:
        """Nominate the target to its planned node (its room held) before any eviction,
        recorded first, with the pods its plan moves (``to_move``, uids), so a new leader
        knows the nomination is consolidation's and the filter holds the room as if
        those pods were gone; a plan a budget stopped earlier is going on again (its
        ``blocked`` cleared)."""
        uid = uid_of(target)
        record = state.plans.get(uid) or PlanRecord(pod=outcome.pod, node="")
        node = str(outcome.node)
        renominate = record.node != node
        if renominate or record.blocked or record.to_move != list(to_move):

            def change(s: LedgerState) -> None:
                r = s.plans.setdefault(uid, record)
                r.node, r.blocked, r.blocked_at, r.to_move = node, "", 0.0, list(to_move)

            change(state)
            self._save(state, change)
            record = state.plans[uid]
        if renominate:
            namespace, _, name = outcome.pod.partition("/")
            self.evictions.nominate(namespace, name, record.node)
        return record

    def _give_back_stale_rooms(self, state: LedgerState) -> None:
        """Plans a budget stopped part-way whose last eviction is more than
        ``BLOCKED_HOLD_S`` old give their room back: nomination withdrawn, nothing held
        (``to_move`` emptied; ``blocked`` kept, so the record says why). Counted from the
        last eviction, not from the stop, so rounds that try the refused eviction again
        in vain do not hold the room on. A later round may plan for the pod afresh,
        within the eviction budgets."""
        now = self.clock()
        stale = [
            uid
            for uid, r in state.plans.items()
            if r.node and r.blocked and r.steps and now - r.steps[-1].at >= BLOCKED_HOLD_S
        ]
        if not stale:
            return
        pods = [state.plans[uid].pod for uid in stale]

        def change(s: LedgerState) -> None:
            for uid in stale:
                if (r := s.plans.get(uid)) is not None:
                    r.node, r.to_move = "", []

        change(state)
        self._save(state, change)
        for key in pods:
            log.info(
                "pod %s: its plan stopped, its last move over %g s ago: room given back",
                key,
                BLOCKED_HOLD_S,
            )
            namespace, _, name = key.partition("/")
            self.evictions.nominate(namespace, name, "")

    def _evict(self, victim: Mapping[str, Any]) -> Evicted:
        """Evict; a budget's refusal is asked again until ``budget_wait_s`` passes."""
        how = evict_victim(self.evictions, victim)
        deadline = self.clock() + self.limits.budget_wait_s
        while how is Evicted.BLOCKED_BY_BUDGET and self.clock() < deadline:
            self.sleep(self.limits.budget_retry_s)
            if not self.is_leader():
                break
            how = evict_victim(self.evictions, victim)
        return how

    def _blocked(
        self, state: LedgerState, target: Mapping[str, Any], record: PlanRecord, move: Move
    ) -> None:
        """The target's plan stops: say so, on the pod and in the ledger (``blocked``);
        withdraw a nomination that freed nothing."""
        why = (
            f"a PodDisruptionBudget refused the eviction of {move.pod} for "
            f"{self.limits.budget_wait_s:g} s"
        )
        self._event(
            target,
            "Warning",
            BLOCKED,
            f"{why}; the plan for this pod stops ({len(record.steps)} moves made)",
        )
        uid, now = uid_of(target), self.clock()
        withdraw = not record.steps

        def change(s: LedgerState) -> None:
            r = s.plans.setdefault(uid, record)
            r.blocked, r.blocked_at = why, now
            if not r.steps:  # nothing freed: nothing to hold
                r.node, r.to_move = "", []

        change(state)
        self._save(state, change)
        if withdraw:
            namespace, _, name = pod_key(target).partition("/")
            self.evictions.nominate(namespace, name, "")

    def _record(
        self, state: LedgerState, target_uid: str, victim: Mapping[str, Any], move: Move
    ) -> None:
        now = self.clock()
        step = StepRecord(
            pod=move.pod,
            uid=uid_of(victim),
            owner_uid=controller_uid(victim),
            to_node=move.to_node,
            at=now,
        )

        def change(s: LedgerState) -> None:
            s.evictions.append(now)
            r = s.plans.setdefault(target_uid, PlanRecord(pod=move.for_pod, node=""))
            r.steps.append(step)
            r.to_move = [u for u in r.to_move if u != step.uid]

        change(state)
        self._save(state, change)

    def _save(self, state: LedgerState, change: Callable[[LedgerState], Any]) -> None:
        """Write ``state`` (``change`` already applied to it); if another writer came
        first, read theirs, apply ``change`` to it and write that (``SAVE_TRIES`` times;
        then the ``ConflictError`` is raised)."""
        for attempt in range(SAVE_TRIES):
            try:
                self.ledger.save(state)
                return
            except ConflictError:
                if attempt == SAVE_TRIES - 1:
                    raise
                fresh = self.ledger.load()
                change(fresh)
                state.evictions, state.plans, state.version = (
                    fresh.evictions,
                    fresh.plans,
                    fresh.version,
                )

    def _nominate_replacements(self, state: LedgerState, read: DefragInput) -> None:
        """Nominate each moved pod's replacement now seen to the node its plan found,
        then record it. Not where a pending pod consolidation helps is nominated: the
        filter fits held pods of equal priority on a node in turn, by its own GPU
        choice, and the replacement's could take the helped pod's GPUs; there the
        replacement is placed by the filter after the helped pod's room."""
        still_open = open_steps(state)
        pairs = match_replacements(state, read.pending, read.cluster.list_pods())
        # a replacement found already bound is recorded too (nothing to nominate), or
        # every later round and the wait for replacements would look for it again
        if not any(s.replacement for s in still_open) or not self.is_leader():
            return
        helped = {p.node for p in state.plans.values() if p.node}
        for step, pod in pairs:
            if step.to_node in helped:
                continue
            namespace, _, name = pod_key(pod).partition("/")
            self.evictions.nominate(namespace, name, step.to_node)
            step.nominated = True
            log.info("nominated %s, replacing %s, to %s", pod_key(pod), step.pod, step.to_node)
        try:
            self.ledger.save(state)
        except ConflictError:  # another writer first: the next round matches them again
            log.info("the ledger changed meanwhile; replacements are matched again next round")

    def _await_replacements(self, read: DefragInput) -> None:
        """Nominate the replacements still unseen, waiting up to ``replacement_wait_s``."""
        deadline = self.clock() + self.limits.replacement_wait_s
        while self.is_leader():
            state = self.ledger.load()
            if not open_steps(state):
                return
            self._nominate_replacements(state, read)
            if not open_steps(state) or self.clock() >= deadline:
                return
            self.sleep(min(1.0, self.limits.replacement_wait_s))
            read = self.read()

    def _event(self, obj: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        try:
            self.events.record_event(dict(obj), type=kind, reason=reason, message=message)
        except Exception as exc:  # an event is information; the move is done
            log.warning("cannot record %s event: %s", reason, exc)


def _ours(state: LedgerState, uid: str) -> bool:
    """Whether the pending pod's nomination is consolidation's (its plan names a node)."""
    record = state.plans.get(uid)
    return bool(record and record.node)


def _nominated(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("status") or {}).get("nominatedNodeName"))


__all__ = ["BLOCKED", "DEFRAGMENTED", "Applier", "ApplyLimits", "ApplyReport", "Step"]
