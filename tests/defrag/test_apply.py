"""The apply loop (``hami defrag --apply``, continuous consolidation) against a fake
Eviction API: one eviction per round and a new plan after it, the room held for the
pending pod and for the moved pod's replacement, PodDisruptionBudgets' 429 waited on
and never forced, the budgets per run and per hour, a failover that resumes without a
second eviction, and the tenant who tries to make consolidation move others' pods."""

from __future__ import annotations

from typing import Any

import pytest

from hami_core.defrag.apply import BLOCKED, DEFRAGMENTED, Applier, ApplyLimits
from hami_core.defrag.ledger import LedgerError, LedgerState, MemoryLedger
from hami_core.errors import InvalidInputError
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import manager
from tests.defrag.applyworld import Clock, Live
from tests.defrag.world import MIB, gpu_node, owner, pending, running, world

HALF = MIB // 2


@pytest.fixture(scope="module")
def mgr():
    return manager()


def halves(nodes: int = 2, **kw: Any) -> list[dict[str, Any]]:
    """``nodes`` nodes of 2 GPUs, each GPU half full with one pod of a ReplicaSet."""
    kw.setdefault("owned_by", owner())
    return [
        running(f"h-{n}-{g}", f"node-{n}", (g,), mem=HALF, cores=50, **kw)
        for n in range(nodes)
        for g in range(2)
    ]


def quarters() -> list[dict[str, Any]]:
    """node-0: four movable quarter pods, two per GPU; node-1: two halves that stay."""
    return [
        *[
            running(f"q-{g}-{i}", "node-0", (g,), mem=MIB // 4, cores=25, owned_by=owner())
            for g in range(2)
            for i in range(2)
        ],
        *[running(f"stay-{g}", "node-1", (g,), mem=HALF, cores=50) for g in range(2)],
    ]


def live(pods, targets, *, nodes: int = 2, budgets=None) -> Live:
    c = world([gpu_node(f"node-{n}") for n in range(nodes)], [*pods, *targets])
    return Live(c, budgets)


def applier(mgr, lv: Live, clock: Clock | None = None, ledger=None, **limits) -> Applier:
    clock = clock or Clock()
    limits.setdefault("replacement_wait_s", 0)
    return Applier(
        read=lv.read,
        manager=mgr,
        evictions=lv.evictions,
        events=lv.cluster,
        ledger=ledger if ledger is not None else MemoryLedger(),
        limits=ApplyLimits(**limits),
        clock=clock,
        sleep=clock.sleep,
    )


def events(lv: Live, reason: str) -> list[Any]:
    return [e for e in lv.cluster.events if e.reason == reason]


def test_one_move_holds_the_room_for_the_pod_and_for_the_replacement(mgr):
    # node-0: a movable half and a whole card held; node-1: two halves that stay
    pods = [
        running("mover", "node-0", (0,), mem=HALF, cores=50, owned_by=owner()),
        running("whole", "node-0", (1,), mem=MIB, cores=100),
        running("stay-0", "node-1", (0,), mem=HALF, cores=50),
        running("stay-1", "node-1", (1,), mem=HALF, cores=50),
    ]
    lv = live(pods, [pending("big")])
    ledger = MemoryLedger()
    report = applier(mgr, lv, ledger=ledger).run()
    assert report.evicted == 1 and lv.evictions.evicted == [report.steps[0].move.pod]
    move = report.steps[0].move
    nominated = lv.nominated()
    # the pending pod was nominated before the eviction, the replacement after it
    assert lv.evictions.nominations[0][0] == "default/big"
    room = nominated.pop("default/big")
    ((replacement, to),) = nominated.items()
    assert room == "node-0" and move.pod == "default/mover"
    assert replacement.startswith(move.pod + "~") and to == move.to_node == "node-1"
    (event,) = events(lv, DEFRAGMENTED)
    assert "Moved for default/big" in event.message and move.from_gpus[0] in event.message
    assert LedgerState.from_json(ledger.text, where="t").recent(Clock().now) == 1
    # the scheduler's own filter on the live cluster: both fit where they were nominated,
    # and a lower-priority newcomer does not get the big pod's room
    sched = Scheduler(lv.cluster, mgr)
    assert room in sched.filter(lv.pod("default/big")).feasible
    assert to in sched.filter(lv.pod(replacement)).feasible
    lv.cluster.add_pod(pending("thief", priority=-1))
    assert room not in sched.filter(lv.pod("default/thief")).feasible


def test_dry_run_is_the_default_of_the_cli_and_apply_is_a_separate_path(mgr):
    from hami_core.options import DefragOptions

    assert DefragOptions().apply is False  # the field exists and is off by default


def test_a_plan_of_two_moves_is_re_planned_after_each(mgr):
    # four pods on one node's 2 GPUs: two whole cards need room for 2x80 GiB at once
    pods = quarters()
    lv = live(pods, [pending("pair", gpus=2)], nodes=2)
    report = applier(mgr, lv).run()
    assert report.evicted == 4 and len(report.steps) == 4
    assert lv.reads >= 5  # one reading per round: a new plan after each eviction
    assert lv.nominated()["default/pair"] == "node-0"


def test_a_re_plan_uses_what_changed_meanwhile(mgr):
    pods = quarters()
    lv = live(pods, [pending("pair", gpus=2)], nodes=2)

    def others_leave(_key: str) -> None:  # after the first eviction, all but one finish
        left = [
            p
            for p in lv.cluster.list_pods()
            if p["metadata"]["name"][:2] == "q-" and p["spec"].get("nodeName") == "node-0"
        ]
        for p in left[1:]:
            lv.cluster.delete_pod("default", p["metadata"]["name"])
        lv.evictions.on_evict = None

    lv.evictions.on_evict = others_leave
    report = applier(mgr, lv).run()
    assert report.evicted == 2  # not the 4 of the first plan


def test_a_budget_refusal_is_waited_on_then_the_eviction_goes_through(mgr):
    lv = live(halves(), [pending("big")])
    clock = Clock()
    first = applier(mgr, live(halves(), [pending("big")])).run().steps[0].move.pod
    lv.evictions.refuse[first] = 2
    report = applier(mgr, lv, clock, budget_wait_s=10, budget_retry_s=2).run()
    assert report.evicted == 1 and clock.slept == [2, 2]
    assert lv.evictions.asked.count(first) == 3


def test_a_pdb_at_its_limit_stops_the_plan_and_nothing_is_forced(mgr):
    pods = halves(labels={"app": "web"})
    lv = live(pods, [pending("big")])
    for p in pods:
        lv.evictions.refuse[f"default/{p['metadata']['name']}"] = 10**6
    clock = Clock()
    ledger = MemoryLedger()
    report = applier(mgr, lv, clock, ledger=ledger, budget_wait_s=6, budget_retry_s=2).run()
    assert report.evicted == 0 and len(report.steps) == 1
    assert report.steps[0].result == "blocked-by-budget"
    assert sum(clock.slept) == 6  # waited the bound, no longer
    assert len(lv.cluster.list_pods()) == 5  # every pod still there
    (event,) = events(lv, BLOCKED)
    assert "PodDisruptionBudget refused" in event.message
    assert "default/big" not in lv.nominated()  # a nomination that freed nothing is withdrawn
    assert "default/big" in report.skipped
    # the ledger says so: no node held, no move made, why and when it stopped
    state = LedgerState.from_json(ledger.text, where="t")
    (record,) = state.plans.values()
    assert (record.pod, record.node, record.steps) == ("default/big", "", [])
    assert record.blocked == (
        f"a PodDisruptionBudget refused the eviction of {report.steps[0].move.pod} for 6 s"
    )
    assert record.blocked_at == clock.now and state.evictions == []
    # once the budget allows it, a later run goes on and the mark is cleared
    lv.evictions.refuse.clear()
    assert applier(mgr, lv, clock, ledger=ledger).run().evicted == 1
    (record,) = LedgerState.from_json(ledger.text, where="t").plans.values()
    assert (record.blocked, record.blocked_at, len(record.steps)) == ("", 0.0, 1)
    assert record.node == lv.nominated()["default/big"]


def test_a_budget_refusal_after_moves_keeps_the_room_and_marks_the_plan(mgr):
    """A plan stopped part-way: the moves made stay made, the pending pod keeps its
    nomination, and the ledger names the refusal beside the moves."""
    lv = live(quarters(), [pending("pair", gpus=2)], nodes=2)
    ledger = MemoryLedger()

    def refuse_the_rest(_key: str) -> None:
        for p in lv.cluster.list_pods():
            lv.evictions.refuse[f"default/{p['metadata']['name']}"] = 10**6

    lv.evictions.on_evict = refuse_the_rest
    report = applier(mgr, lv, ledger=ledger, budget_wait_s=4, budget_retry_s=2).run()
    assert report.evicted == 1 and report.steps[-1].result == "blocked-by-budget"
    (record,) = LedgerState.from_json(ledger.text, where="t").plans.values()
    assert record.node == "node-0" == lv.nominated()["default/pair"]
    assert len(record.steps) == 1 and "PodDisruptionBudget refused" in record.blocked


def test_the_planner_skips_pods_whose_pdb_status_allows_none(mgr):
    pods = halves(labels={"app": "web"})
    budget = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0},
    }
    lv = live(pods, [pending("big")], budgets=[budget])
    report = applier(mgr, lv).run()
    assert report.evicted == 0 and lv.evictions.asked == []


def test_evictions_per_run_are_bounded(mgr):
    lv = live(halves(nodes=3), [pending("big-a"), pending("big-b")], nodes=3)
    report = applier(mgr, lv, max_evictions=1).run()
    assert report.evicted == 1 and len(lv.evictions.evicted) == 1
    assert list(report.skipped.values()) == ["needs 1 moves, the eviction budget allows 0"]


def test_evictions_per_hour_are_bounded_across_runs(mgr):
    clock = Clock()
    ledger = MemoryLedger()
    state = LedgerState(evictions=[clock.now - 10] * 3 + [clock.now - 4000] * 5)
    ledger.save(state)
    lv = live(halves(nodes=3), [pending("big-a"), pending("big-b")], nodes=3)
    report = applier(mgr, lv, clock, ledger=ledger, max_evictions_per_hour=4).run()
    assert report.evicted == 1  # 3 in the last hour; the older 5 no longer count
    saved = LedgerState.from_json(ledger.text, where="t")
    assert saved.recent(clock.now) == 4 and len(saved.evictions) == 4


def test_a_plan_longer_than_the_budget_is_not_started(mgr):
    pods = quarters()
    lv = live(pods, [pending("pair", gpus=2)], nodes=2)
    report = applier(mgr, lv, max_evictions=3).run()
    assert report.evicted == 0 and lv.evictions.asked == []
    assert lv.nominated() == {}


def test_a_new_leader_resumes_without_evicting_twice(mgr):
    pods = quarters()
    lv = live(pods, [pending("pair", gpus=2)], nodes=2)
    lv.evictions.terminating = True  # evicted pods stay until their kubelet says gone
    ledger, clock = MemoryLedger(), Clock()
    leading = {"a": True}
    a = applier(mgr, lv, clock, ledger=ledger)
    a.is_leader = lambda: leading["a"]

    def fail_over(_key: str) -> None:  # the old leader dies right after its 2nd eviction
        if len(lv.evictions.evicted) == 2:
            leading["a"] = False

    lv.evictions.on_evict = fail_over
    first = a.run()
    assert first.evicted == 2 and first.stopped == "not the leader"
    b = applier(mgr, lv, clock, ledger=ledger)
    second = b.run()
    assert second.evicted == 2
    assert len(lv.evictions.evicted) == len(set(lv.evictions.evicted)) == 4
    assert lv.evictions.asked == lv.evictions.evicted  # nothing asked twice
    saved = LedgerState.from_json(ledger.text, where="t")
    (record,) = saved.plans.values()
    assert len(record.steps) == 4 and all(s.replacement for s in record.steps)
    assert saved.recent(clock.now) == 4
    # and a third leader finds nothing left to do
    third = applier(mgr, lv, clock, ledger=ledger).run()
    assert third.evicted == 0 and len(lv.evictions.asked) == 4


def test_a_pod_preemption_nominated_is_left_to_preemption(mgr):
    lv = live(halves(), [pending("big")])
    lv.evictions.memory.nominate("default", "big", "node-1")
    report = applier(mgr, lv).run()
    assert report.evicted == 0 and report.skipped == {"default/big": "preemption holds room for it"}


def test_an_abusive_tenant_cannot_make_consolidation_move_others(mgr):
    """The tenant's pending pod states a high priority in annotations and labels, and
    names a plan of its own; the other namespaces' pods are of higher priority, opted out,
    or in a protected namespace: nothing moves."""
    tenant = pending(
        "greedy",
        namespace="tenant",
        annotations={
            "hami.io/priority": "1000000",
            "scheduling.k8s.io/priority": "1000000",
            "hami.io/defrag": "always",
            "hami.io/defrag-plan": '{"steps": [{"pod": "team-b/h-0-0", "to_node": "node-1"}]}',
        },
    )
    tenant["metadata"]["labels"] = {"priority": "1000000"}
    others = [
        *[
            running(
                f"hi-{g}",
                "node-0",
                (g,),
                mem=HALF,
                cores=50,
                namespace="team-b",
                priority=10,
                owned_by=owner(),
            )
            for g in range(2)
        ],
        running(
            "opted-0",
            "node-1",
            (0,),
            mem=HALF,
            cores=50,
            namespace="team-c",
            owned_by=owner(),
            annotations={"hami.io/defrag": "never"},
        ),
        running(
            "sys-1", "node-1", (1,), mem=HALF, cores=50, namespace="kube-system", owned_by=owner()
        ),
    ]
    lv = live(others, [tenant])
    report = applier(mgr, lv).run()
    assert report.evicted == 0 and lv.evictions.asked == [] and lv.evictions.nominations == []
    # the same cluster with a movable pod of its own priority: only that pod moves
    lv2 = live(
        [
            *others[:3],
            running(
                "own-1", "node-1", (1,), mem=HALF, cores=50, namespace="team-d", owned_by=owner()
            ),
        ],
        [tenant],
    )
    assert applier(mgr, lv2).run().evicted == 1
    assert lv2.evictions.evicted == ["team-d/own-1"]


def test_an_unreadable_ledger_stops_before_any_eviction(mgr):
    lv = live(halves(), [pending("big")])
    ledger = MemoryLedger()
    ledger.text = "{not json"
    with pytest.raises(LedgerError, match="not a consolidation ledger"):
        applier(mgr, lv, ledger=ledger).run()
    assert lv.evictions.asked == []


def test_limits_are_validated():
    with pytest.raises(InvalidInputError, match="max_evictions"):
        ApplyLimits(max_evictions=-1)
    with pytest.raises(InvalidInputError, match="budget_wait_s"):
        ApplyLimits(budget_wait_s=-1)


def test_a_gang_member_is_not_consolidated_for(mgr):
    member = pending("member", annotations={"scheduling.k8s.io/group-name": "job"})
    lv = live(halves(), [member])
    report = applier(mgr, lv).run()
    assert report.evicted == 0 and lv.evictions.asked == []
    assert report.skipped == {"default/member": "a gang member: groups are not consolidated for"}


def test_leadership_lost_before_the_writes_writes_nothing(mgr):
    lv = live(halves(), [pending("big")])
    asked = iter([True, False])  # the round starts as leader, loses it before writing
    a = applier(mgr, lv)
    a.is_leader = lambda: next(asked, False)
    report = a.run()
    assert report.stopped == "not the leader" and lv.evictions.nominations == []
    assert lv.evictions.asked == []


def test_a_ledger_write_lost_to_another_writer_is_not_fatal(mgr):
    """Two writers (a CLI run and a leader) race on the ledger: the loser reads it again
    and goes on; nothing is evicted twice."""
    from hami_core.errors import ConflictError

    class Racy(MemoryLedger):
        lose = 2

        def save(self, state):
            if self.lose and self.text:
                self.lose -= 1
                raise ConflictError("the ledger changed since it was read")
            super().save(state)

    pods = quarters()
    lv = live(pods, [pending("pair", gpus=2)], nodes=2)
    report = applier(mgr, lv, ledger=Racy()).run()
    assert report.evicted == 4 and len(set(lv.evictions.asked)) == len(lv.evictions.asked)


def test_moves_never_take_the_room_of_a_higher_pending_pod_that_fits_now(mgr):
    """A pending pod of higher priority that is not helped (it fits now, kube-scheduler
    will place it) keeps its room: the plan for a lower pod is made with it placed."""
    pods = [
        running("m0", "node-0", (0,), mem=HALF, cores=50, owned_by=owner()),
        running("m1", "node-0", (1,), mem=HALF, cores=50, owned_by=owner()),
        running("b0", "node-1", (0,), mem=MIB, cores=100),
        running("b1", "node-1", (1,), mem=MIB, cores=100),
    ]
    lv = live(pods, [pending("low", priority=0)])
    assert applier(mgr, lv).run().evicted == 1  # alone, it is helped
    lv = live(pods, [pending("low", priority=0), pending("high", mem=HALF, cores=50, priority=10)])
    report = applier(mgr, lv).run(["default/low"])
    assert report.evicted == 0 and lv.evictions.asked == []


def _two_moves_the_second_refused(annotations: dict[str, str]) -> Live:
    """One node whose pending pod "big" needs a fill-a and a fill-b pod moved (every pod
    carrying ``annotations``); a budget refuses every fill-b eviction, for good."""
    a, b = (6 * MIB // 16, 30), (2 * MIB // 16, 20)
    pods = [
        running(f"{app}-{i}", "node-0", (g,), mem=m, cores=c, owned_by=owner(name=app),
                labels={"app": app}, annotations=annotations)
        for app, (m, c), layout in (("fill-a", a, (0, 1)), ("fill-b", b, (1, 0)))
        for i, g in enumerate(layout)
    ]  # fmt: skip
    lv = live(pods, [pending("big")], nodes=1)
    lv.evictions.terminating = True
    for p in pods:
        if p["metadata"]["labels"]["app"] == "fill-b":
            lv.evictions.refuse[f"default/{p['metadata']['name']}"] = 10**9
    return lv


def test_a_plan_stopped_part_way_keeps_the_room_it_freed(mgr):
    """docs/consolidation.md: a plan that stops where it is keeps the pending pod's
    nomination and room. Here the second move is refused by a budget after the first;
    the first move's replacement (spread, as its template says: it prefers the GPU just
    emptied) is then filtered by a scheduler whose consolidation reads the same ledger.
    Seen failing first: the filter held the pending pod's room only where it fits with
    the leaving pods gone, and the pod still to move was not leaving."""
    from hami_core.defrag.ledger import RememberingLedger

    spread = {"hami.io/gpu-scheduler-policy": "spread"}
    lv = _two_moves_the_second_refused(spread)
    ledger = RememberingLedger(MemoryLedger())
    report = applier(mgr, lv, ledger=ledger, budget_wait_s=2).run()
    assert [s.result for s in report.steps] == ["evicted", "blocked-by-budget"]
    freed, still = report.steps[0].move.from_gpus, report.steps[1].move.pod
    assert lv.nominated()["default/big"] == "node-0"
    (record,) = ledger.load().plans.values()
    assert record.to_move == [lv.pod(still)["metadata"]["uid"]] and record.blocked
    for p in lv.cluster.list_pods():  # kubelet: the evicted pod is gone
        if p["metadata"].get("deletionTimestamp"):
            lv.cluster.delete_pod("default", p["metadata"]["name"])
    (replacement,) = [p for p in lv.cluster.list_pods() if "~" in p["metadata"]["name"]]
    replacement["metadata"]["annotations"].update(spread)  # its template's annotation
    lv.cluster.add_pod(replacement)
    scheduler = Scheduler(lv.cluster, mgr)
    assert scheduler.engine.held is not None
    scheduler.engine.held.leaving = ledger.leaving  # as hami scheduler --consolidation
    fit = scheduler.filter(replacement).fits["node-0"]
    assert fit.allocation is not None
    taken = {d.uuid for ds in fit.allocation.devices.values() for c in ds for d in c}
    assert not taken & set(freed)
    # the room is the pending pod's alone: a pod of its priority that would fit only
    # there is kept off it too; the pending pod itself fits once the last move is made
    other = pending("other", mem=10 * MIB // 16, cores=30)
    lv.cluster.add_pod(other)
    assert not scheduler.filter(other).feasible
    scheduler.engine.held.leaving = lambda _pod: ()  # (without the ledger it would fit)
    assert scheduler.filter(other).feasible == ("node-0",)
    scheduler.engine.held.leaving = ledger.leaving
    assert not scheduler.filter(lv.pod("default/big")).feasible


def test_a_stopped_plan_gives_its_room_back_after_the_hold(mgr):
    """A plan a budget stopped part-way keeps the room it freed for BLOCKED_HOLD_S, then
    gives it back (found by trying it as a tenant: the pending pod's own tenant pins its
    budget at 0 after the first move, and the room freed from another tenant's pod was
    held for it for good, keeping every pod of its priority off it)."""
    from hami_core.defrag.ledger import BLOCKED_HOLD_S, RememberingLedger

    lv = _two_moves_the_second_refused({})
    clock = Clock()
    ledger = RememberingLedger(MemoryLedger())
    report = applier(mgr, lv, clock=clock, ledger=ledger, budget_wait_s=2).run()
    assert [s.result for s in report.steps] == ["evicted", "blocked-by-budget"]
    for p in lv.cluster.list_pods():  # kubelet: the evicted pod is gone
        if p["metadata"].get("deletionTimestamp"):
            lv.cluster.delete_pod("default", p["metadata"]["name"])
    scheduler = Scheduler(lv.cluster, mgr)
    assert scheduler.engine.held is not None
    scheduler.engine.held.leaving = ledger.leaving
    other = pending("other", mem=10 * MIB // 16, cores=30)
    lv.cluster.add_pod(other)
    # within the hold: a later round keeps the room (the budget may still relax)
    clock.sleep(BLOCKED_HOLD_S / 2)
    applier(mgr, lv, clock=clock, ledger=ledger, budget_wait_s=2).run()
    assert lv.nominated()["default/big"] == "node-0"
    assert not scheduler.filter(other).feasible
    # past it: the nomination is withdrawn, nothing is held, the record says why
    clock.sleep(BLOCKED_HOLD_S)
    applier(mgr, lv, clock=clock, ledger=ledger, budget_wait_s=2).run()
    assert lv.nominated().get("default/big", "") == ""
    (record,) = ledger.load().plans.values()
    assert record.node == "" and record.to_move == [] and record.blocked
    assert scheduler.filter(other).feasible == ("node-0",)


def test_a_replacement_found_bound_is_recorded_so_no_later_round_looks_again(mgr):
    """kube-scheduler may bind a moved pod's replacement before the next round sees it
    pending: the ledger records it all the same (it did only for pending ones, so each
    leader's worker ran a round every 5 s for REPLACEMENT_KEEP_S looking for it)."""
    pods = [
        running("mover", "node-0", (0,), mem=HALF, cores=50, owned_by=owner()),
        running("whole", "node-0", (1,), mem=MIB, cores=100),
        running("stay-0", "node-1", (0,), mem=HALF, cores=50),
        running("stay-1", "node-1", (1,), mem=HALF, cores=50),
    ]
    lv = live(pods, [pending("big")])

    def placed_at_once(_key: str) -> None:  # the scheduler was quicker than the round
        for p in lv.cluster.list_pods():
            if "~" in p["metadata"]["name"]:
                p["spec"]["nodeName"] = "node-1"
                lv.cluster.add_pod(p)

    lv.evictions.on_evict = placed_at_once
    ledger = MemoryLedger()
    assert applier(mgr, lv, ledger=ledger).run().evicted == 1
    (replacement,) = [p for p in lv.cluster.list_pods() if "~" in p["metadata"]["name"]]
    (record,) = LedgerState.from_json(ledger.text, where="t").plans.values()
    (step,) = record.steps
    assert step.replacement == replacement["metadata"]["uid"] and step.nominated is False
