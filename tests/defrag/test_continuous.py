"""Continuous consolidation's queue: only pods that waited past the threshold are
helped, only by the leader; a pod bound or gone leaves the queue; a new leader resumes
the plan the old one left (its replacements nominated, nothing evicted twice)."""

from __future__ import annotations

import datetime as dt

import pytest

from hami_core.defrag.continuous import Consolidator
from hami_core.defrag.ledger import LedgerState, MemoryLedger
from tests.builders import manager
from tests.defrag.applyworld import Clock
from tests.defrag.test_apply import applier, halves, live, quarters
from tests.defrag.world import pending


@pytest.fixture(scope="module")
def mgr():
    return manager()


def born(pod, at: float):
    pod["metadata"]["creationTimestamp"] = dt.datetime.fromtimestamp(at, dt.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    return pod


def consolidator(mgr, lv, clock, *, ledger=None, leader=lambda: True, after_s=300.0):
    a = applier(mgr, lv, clock, ledger=ledger)
    a.is_leader = leader
    return Consolidator(
        a,
        read_pod=lv.cluster.get_pod,
        after_s=after_s,
        is_leader=leader,
        clock=clock,
        retry_s=60,
    )


def test_a_pod_is_helped_only_after_it_waited_and_only_by_the_leader(mgr):
    clock = Clock()
    big = born(pending("big"), clock.now - 100)
    lv = live(halves(), [big])
    leading = {"now": False}
    c = consolidator(mgr, lv, clock, leader=lambda: leading["now"])
    c.request(big)
    assert c.tick() is None  # not the leader
    leading["now"] = True
    assert c.tick() is None and lv.evictions.asked == []  # waited 100 s of 300
    clock.now += 250
    report = c.tick()
    assert report is not None and report.evicted == 1
    assert "default/big" in lv.nominated()


def test_a_bound_or_gone_pod_leaves_the_queue(mgr):
    clock = Clock()
    big = born(pending("big"), clock.now - 1000)
    lv = live(halves(), [big])
    c = consolidator(mgr, lv, clock)
    c.request(big)
    c.request(born(pending("ghost"), clock.now - 1000))  # never created
    lv.cluster.delete_pod("default", "big")
    assert c.tick() is None and c.queued() == 0


def test_a_pod_not_helped_is_retried_later_not_every_tick(mgr):
    clock = Clock()
    big = born(pending("big"), clock.now - 1000)
    lv = live(halves(owned_by=None), [big])  # bare pods: nothing can move
    c = consolidator(mgr, lv, clock)
    c.request(big)
    assert c.tick() is not None
    reads = lv.reads
    assert c.tick() is None and lv.reads == reads  # within the retry time
    clock.now += 61
    assert c.tick() is not None


def test_a_new_leader_resumes_the_plan_without_a_second_eviction(mgr):
    clock = Clock()
    pair = born(pending("pair", gpus=2), clock.now - 1000)
    lv = live(quarters(), [pair])
    lv.evictions.terminating = True
    ledger = MemoryLedger()
    leaders = {"a": True, "b": False}

    def fail_over(_key: str) -> None:
        if len(lv.evictions.evicted) == 1:  # A dies after its first eviction
            leaders["a"], leaders["b"] = False, True

    lv.evictions.on_evict = fail_over
    a = consolidator(mgr, lv, clock, ledger=ledger, leader=lambda: leaders["a"])
    b = consolidator(mgr, lv, clock, ledger=ledger, leader=lambda: leaders["b"])
    a.request(pair)
    assert a.tick().evicted == 1
    # B never saw the pod through its own filter yet: the ledger alone brings a round
    # that nominates A's replacement
    first = b.tick()
    assert first is not None and first.evicted == 0
    (record,) = LedgerState.from_json(ledger.text, where="t").plans.values()
    assert record.steps[0].replacement
    b.request(lv.pod("default/pair"))
    assert b.tick().evicted == 3
    assert len(lv.evictions.asked) == len(set(lv.evictions.asked)) == 4


def test_a_replica_whose_kube_scheduler_does_not_lead_acts_on_nothing(mgr):
    """The chart runs every replica's extender with --no-leader-elect --follow-lease: the
    one beside a kube-scheduler that does not hold the Lease neither evicts for pods it
    queued nor nominates the replacements the ledger lists (it did both when every
    extender counted as leader); once its kube-scheduler takes the Lease over, it
    resumes the plan without a second eviction."""
    from hami_core.cluster.lease import LeaseFollower
    from tests.cluster.test_lease_follower import lease

    clock = Clock()
    pair = born(pending("pair", gpus=2), clock.now - 1000)
    lv = live(quarters(), [pair])
    lv.evictions.terminating = True
    ledger = MemoryLedger()
    held = {"lease": lease("sched-a_1f2e", clock.now)}
    follower = {
        host: LeaseFollower(lambda: held["lease"], holder_prefix=f"{host}_", clock=clock)
        for host in ("sched-a", "sched-b")
    }
    a, b = (
        consolidator(mgr, lv, clock, ledger=ledger, leader=follower[h].is_leader)
        for h in ("sched-a", "sched-b")
    )

    def a_fails(_key: str) -> None:  # sched-a's kube-scheduler loses the Lease to b's
        if len(lv.evictions.evicted) == 1:
            held["lease"] = lease("sched-b_93cd", clock.now)
            follower["sched-a"].poll()

    lv.evictions.on_evict = a_fails
    for f in follower.values():
        f.poll()
    b.request(pair)  # b's filter saw it too (a request racing the takeover)
    assert b.tick() is None and lv.evictions.asked == [] and not ledger.text
    a.request(pair)
    assert a.tick().evicted == 1
    recorded = ledger.text
    nominated = lv.nominated()
    # b's Lease reading is older than the takeover: its kube-scheduler does not lead yet
    assert b.tick() is None
    assert ledger.text == recorded and lv.nominated() == nominated
    assert a.tick() is None  # a's kube-scheduler no longer leads: a's queue stays put
    follower["sched-b"].poll()
    report = b.tick()
    assert report is not None and report.evicted == 3
    assert len(lv.evictions.asked) == len(set(lv.evictions.asked)) == 4
