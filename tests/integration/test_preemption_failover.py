"""Preemption across a leader failover (issue 27, "what happens on leader failover").

Two schedulers over one cluster, as two replicas of ``hami scheduler``: each has its own
caches (its own ``Scheduler`` over the shared store) and its own ``Preemptor``, and a
lease says which one leads. Evictions are graceful, as the API server's: an evicted pod
is marked terminating and holds its slices until kubelet ends it (``finish``). The old
leader dies (or is deposed) part-way; the new one must evict no pod twice and no pod
more than needed, keep the nomination, and never let a lower-priority pod take the room.
"""

from __future__ import annotations

import pytest

from hami_core.cluster.eviction import MemoryEvictions
from hami_core.errors import HamiError
from hami_core.scheduling.preemptor import Preemptor
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, gpu, manager, node

from .preemption_builders import holder, wanting

MANAGER = manager()


class Killed(Exception):
    """The leader's process dies here: nothing after this point runs."""


class GracefulEvictions(MemoryEvictions):
    """The Eviction API as the API server serves it: an accepted eviction marks the pod
    terminating (its slices held until kubelet ends it); every call is logged."""

    def __init__(self, store, log, *, die_after=None, on_evict=None):
        super().__init__(store)
        self.log = log
        self.die_after = die_after
        self.on_evict = on_evict

    def evict(self, namespace, name, *, uid):
        if self.die_after is not None and len(self.log) >= self.die_after:
            raise Killed(f"leader died before evicting {namespace}/{name}")
        pod = self._check(namespace, name, uid)
        self.log.append(f"{namespace}/{name}")
        pod["metadata"]["deletionTimestamp"] = "2026-12-02T06:00:00Z"
        self.store.add_pod(pod)
        if self.on_evict is not None:
            self.on_evict()
        return True


def finish(store):
    """kubelet ends every terminating pod."""
    for pod in store.list_pods():
        if pod["metadata"].get("deletionTimestamp"):
            store.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])


def _cluster():
    """GPU a0: two priority-0 pods of 8000 MiB; every other GPU held by priority 1000.
    A pod of priority 100 asking 16000 MiB needs both a0 pods evicted, nothing else."""
    store = cluster(
        node(
            "a",
            [gpu("GPU-a0", index=0, memory_mib=16000), gpu("GPU-a1", index=1, memory_mib=16000)],
        ),
        node("b", [gpu("GPU-b0", index=0, memory_mib=16000)]),
    )
    store.add_pod(holder("a0-1", "a", [("GPU-a0", 8000)]))
    store.add_pod(holder("a0-2", "a", [("GPU-a0", 8000)]))
    store.add_pod(holder("a1", "a", [("GPU-a1", 16000)], priority=1000, namespace="other"))
    store.add_pod(holder("b0", "b", [("GPU-b0", 16000)], priority=1000, namespace="other"))
    return store


def _replica(store, log, lease, me, **evictions):
    """One ``hami scheduler`` replica: its own caches and preemptor; leads while
    ``lease["holder"] == me``."""
    sched = Scheduler(store, MANAGER)
    writes = GracefulEvictions(store, log, **evictions)
    preemptor = Preemptor.over(sched, writes, is_leader=lambda: lease["holder"] == me, settle_s=0)
    return sched, preemptor


def _room_is_held_and_the_preemptor_binds(store, sched):
    # a lower-priority pod asking the room is refused on a, by filter and by bind ...
    thief = store.add_pod(wanting("thief", mib=8000, priority=50))
    assert "a" not in sched.filter(thief).feasible
    with pytest.raises(HamiError):
        sched.bind("high", "thief", uid="uid-high-thief", node="a")
    # ... and the preemptor takes it
    assert sched.filter(store.get_pod("high", "big")).feasible == ("a",)
    assert sched.bind("high", "big", uid="uid-high-big", node="a") is not None


@pytest.mark.parametrize("died_after", [0, 1, 2])
def test_a_new_leader_evicts_only_what_is_still_needed_and_keeps_the_room(died_after):
    # the old leader nominated the pod, evicted ``died_after`` of its 2 victims and died
    store, log, lease = _cluster(), [], {"holder": "old"}
    _, old = _replica(store, log, lease, "old", die_after=died_after)
    sched, new = _replica(store, log, lease, "new")
    big = store.add_pod(wanting("big", mib=16000, priority=100))
    if died_after < 2:
        with pytest.raises(Killed):
            old.preempt_now(big, ["a", "b"])
    else:
        assert old.preempt_now(big, ["a", "b"]).result == "preempted"
    assert store.get_pod("high", "big")["status"]["nominatedNodeName"] == "a"
    lease["holder"] = "new"  # the lease expires; the other replica takes it
    # kube-scheduler retries the pod (a deleted or updated pod wakes it) before the
    # terminating victims are gone: the new leader finishes the old one's work
    outcome = new.preempt_now(store.get_pod("high", "big"), ["a", "b"])
    assert outcome.node in ("a", "")
    assert log == ["low/a0-1", "low/a0-2"]  # each victim once, nobody else
    if died_after == 2:  # the room is on its way already: nothing more to do
        assert outcome.result == "waiting" and not outcome.evicted
    assert store.get_pod("high", "big")["status"]["nominatedNodeName"] == "a"
    # tried again while the victims terminate: nothing more
    again = new.preempt_now(store.get_pod("high", "big"), ["a", "b"])
    assert again.result == "waiting" and log == ["low/a0-1", "low/a0-2"]
    finish(store)
    _room_is_held_and_the_preemptor_binds(store, sched)
    assert log == ["low/a0-1", "low/a0-2"]


def test_a_new_leader_does_not_take_the_room_a_partial_eviction_freed():
    # the old leader evicted one victim and died; that victim is gone before the new
    # leader's attempt: the 8000 MiB it freed is no lower pod's meanwhile
    store, log, lease = _cluster(), [], {"holder": "old"}
    _, old = _replica(store, log, lease, "old", die_after=1)
    sched, new = _replica(store, log, lease, "new")
    big = store.add_pod(wanting("big", mib=16000, priority=100))
    with pytest.raises(Killed):
        old.preempt_now(big, ["a", "b"])
    finish(store)
    lease["holder"] = "new"
    outcome = new.preempt_now(store.get_pod("high", "big"), ["a", "b"])
    assert outcome.result == "preempted" and outcome.node == "a"
    assert log == ["low/a0-1", "low/a0-2"]
    finish(store)
    _room_is_held_and_the_preemptor_binds(store, sched)


def test_a_deposed_leader_stops_evicting_and_the_new_one_does_not_repeat_it():
    # the old leader's lease is taken while it evicts (a long pause, a partition): it
    # asks again before each write and stops; the new leader evicts only the rest
    store, log, lease = _cluster(), [], {"holder": "old"}

    def deposed():
        lease["holder"] = "new"

    _, old = _replica(store, log, lease, "old", on_evict=deposed)
    sched, new = _replica(store, log, lease, "new")
    big = store.add_pod(wanting("big", mib=16000, priority=100))
    outcome = old.preempt_now(big, ["a", "b"])
    assert outcome.result == "not-eligible" and "leader" in outcome.message
    assert log == ["low/a0-1"]  # it stopped at its lease
    assert new.preempt_now(store.get_pod("high", "big"), ["a", "b"]).result == "preempted"
    assert log == ["low/a0-1", "low/a0-2"]
    finish(store)
    _room_is_held_and_the_preemptor_binds(store, sched)


def test_a_follower_never_writes_even_when_asked():
    # kube-scheduler may send the filter to any replica; only the lease holder writes
    store, log, lease = _cluster(), [], {"holder": "old"}
    _, old = _replica(store, log, lease, "old")
    _, follower = _replica(store, log, lease, "new")
    big = store.add_pod(wanting("big", mib=16000, priority=100))
    assert follower.preempt_now(big, ["a", "b"]).result == "not-eligible"
    assert log == [] and not store.get_pod("high", "big")["status"].get("nominatedNodeName")
    assert old.preempt_now(big, ["a", "b"]).result == "preempted"
    assert log == ["low/a0-1", "low/a0-2"]
