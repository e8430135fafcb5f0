"""Preemption carried out (issue 27 items 1, 2, 5): nomination first, then the Eviction
API, events naming the preemptor and its slices, PodDisruptionBudgets honoured, the room
held until the preemptor binds, the queue deduplicated; and ``/preempt`` answering the
same choice."""

from __future__ import annotations

import time

import pytest

from hami_core.cluster.eviction import Evicted, MemoryEvictions
from hami_core.errors import HamiError
from hami_core.scheduling.preemptor import Preemptor
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.extender import create_extender_app
from tests.builders import cluster, gpu, manager, node

from .preemption_builders import holder, wanting

MANAGER = manager()


def _setup():
    store = cluster(
        node(
            "a",
            [gpu("GPU-a0", index=0, memory_mib=16000), gpu("GPU-a1", index=1, memory_mib=16000)],
        ),
        node("b", [gpu("GPU-b0", index=0, memory_mib=16000)]),
    )
    for h in (
        holder("a0-1", "a", [("GPU-a0", 8000)], labels={"app": "web"}),
        holder("a0-2", "a", [("GPU-a0", 8000)], labels={"app": "web"}),
        holder("a1", "a", [("GPU-a1", 16000)], priority=5, labels={"app": "web"}),
        holder("b0", "b", [("GPU-b0", 16000)], priority=1000, namespace="other"),
    ):
        store.add_pod(h)
    sched = Scheduler(store, MANAGER)
    evictions = MemoryEvictions(store)
    return store, sched, evictions, Preemptor.over(sched, evictions, settle_s=0)


def test_victims_are_evicted_the_preemptor_nominated_and_events_name_both():
    store, sched, _, preemptor = _setup()
    p = store.add_pod(wanting("big", mib=12000, priority=100))
    assert not sched.filter(p).feasible
    outcome = preemptor.preempt_now(p, ["a", "b"])
    assert outcome.result == "preempted" and outcome.node == "a"
    assert outcome.evicted == {"low/a1": Evicted.EVICTED}  # one 16000 pod, not two 8000s
    assert store.get_pod("high", "big")["status"]["nominatedNodeName"] == "a"
    names = {p["metadata"]["name"] for p in store.list_pods()}
    assert "a1" not in names and {"a0-1", "a0-2", "b0"} <= names
    (event,) = [e for e in store.events if e.reason == "Preempted"]
    assert event.name == "a1"
    assert "high/big (priority 100)" in event.message and "1 x NVIDIA 12000 MiB" in event.message
    assert any(e.reason == "Preempting" and e.name == "big" for e in store.events)
    # the room is held: a lower-priority pod asking the same does not get node a ...
    assert "a" not in sched.filter(store.add_pod(wanting("thief", mib=12000, priority=50))).feasible
    # ... and the preemptor does (its own nomination is not held against it)
    assert sched.filter(store.get_pod("high", "big")).feasible == ("a",)


def test_a_second_attempt_evicts_nothing_more():
    store, _sched, _, preemptor = _setup()
    p = store.add_pod(wanting("big", mib=12000, priority=100))
    preemptor.preempt_now(p, ["a", "b"])
    again = preemptor.preempt_now(store.get_pod("high", "big"), ["a", "b"])
    assert again.result == "fits" and not again.evicted
    assert len(store.list_pods()) == 4  # three holders and the preemptor


def test_a_pod_disruption_budget_refusal_stops_the_eviction():
    store, _sched, evictions, preemptor = _setup()
    evictions.add_budget(
        {
            "metadata": {"name": "web", "namespace": "low"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0},
        }
    )
    p = store.add_pod(wanting("big", mib=12000, priority=100))
    outcome = preemptor.preempt_now(p, ["a", "b"])
    assert outcome.result == "blocked-by-budget"
    assert len(store.list_pods()) == 5  # nobody evicted
    assert not store.get_pod("high", "big")["status"].get("nominatedNodeName")
    assert any(e.reason == "PreemptionBlocked" for e in store.events)


def test_preemption_policy_never_and_lower_priority_only():
    store, _sched, _, preemptor = _setup()
    never = wanting("never", mib=12000, priority=100)
    never["spec"]["preemptionPolicy"] = "Never"
    assert preemptor.preempt_now(store.add_pod(never), ["a", "b"]).result == "not-eligible"
    # priority 4 may evict the two priority-0 pods of GPU a0 but not a1 (5) or b0 (1000)
    low = store.add_pod(wanting("low", mib=12000, priority=4, namespace="x"))
    outcome = preemptor.preempt_now(low, ["a", "b"])
    assert sorted(outcome.evicted) == ["low/a0-1", "low/a0-2"]
    assert len(store.list_pods()) == 4


def test_no_preemption_for_a_gang_member():
    store, _sched, _, preemptor = _setup()
    member = wanting("m", mib=12000, priority=100)
    member["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train"}
    outcome = preemptor.preempt_now(store.add_pod(member), ["a", "b"])
    assert outcome.result == "not-eligible" and "gang" in outcome.message
    assert len(store.list_pods()) == 5


def test_a_tenant_cannot_evict_another_namespace_with_annotations_or_labels():
    store, _sched, _, preemptor = _setup()
    forged = wanting(
        "forged",
        mib=16000,
        priority=0,
        namespace="tenant",
        annotations={"hami.io/priority": "1000000", "scheduling.k8s.io/priority": "1"},
    )
    forged["metadata"]["labels"] = {"scheduling.k8s.io/priority": "1000000"}
    outcome = preemptor.preempt_now(store.add_pod(forged), ["a", "b"])
    assert outcome.result == "no-candidate" and not outcome.evicted
    assert len(store.list_pods()) == 5


def test_the_queue_holds_a_pod_once_and_the_worker_acts_after_settling():
    store, _sched, _, preemptor = _setup()
    preemptor.settle_s = 0.05
    p = store.add_pod(wanting("big", mib=12000, priority=100))
    preemptor.request(p, ["a"])
    preemptor.request(p, ["a", "b"])
    assert preemptor.pending() == 1
    seen = []
    preemptor.observer = lambda result, victims: seen.append((result, victims))
    preemptor.start()
    try:
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        preemptor.stop()
    assert seen == [("preempted", 1)]


def test_the_filter_hands_an_unschedulable_pod_over_and_preempt_verb_answers_alike():
    store, sched, _, preemptor = _setup()
    asked = []
    preemptor.request = lambda pod, names: asked.append(names)  # type: ignore[method-assign]
    p = store.add_pod(wanting("big", mib=12000, priority=100))
    app = create_extender_app(sched, preemptor=preemptor)
    client = app.test_client()
    answer = client.post("/filter", json={"Pod": p, "NodeNames": ["a", "b"]}).get_json()
    assert answer["NodeNames"] == [] and asked == [["a", "b"]]
    # kube-scheduler's own PostFilter must not run (1.20.2 panics on two zero-victim
    # candidates): a pod above priority 0 that fits nowhere gets an Error, which skips it
    assert set(answer["FailedNodes"]) == {"a", "b"}
    assert answer["Error"].startswith("0/2 nodes fit for high/big (")
    assert "hami's preemption" in answer["Error"]
    plain = store.add_pod(wanting("plain", mib=12000, priority=0))
    answer = client.post("/filter", json={"Pod": plain, "NodeNames": ["a", "b"]}).get_json()
    assert set(answer["FailedNodes"]) == {"a", "b"} and answer["Error"] == ""
    asked.clear()
    follower = create_extender_app(sched, preemptor=preemptor, is_leader=lambda: False)
    follower.test_client().post("/filter", json={"Pod": p, "NodeNames": ["a", "b"]})
    assert asked == []  # a follower hands nothing over
    body = {
        "Pod": p,
        "NodeNameToMetaVictims": {
            "a": {"Pods": [{"UID": "kube-victim"}], "NumPDBViolations": 0},
            "b": {"Pods": [], "NumPDBViolations": 0},
        },
    }
    result = client.post("/preempt", json=body).get_json()
    assert result["NodeNameToMetaVictims"] == {
        "a": {"Pods": [{"UID": "kube-victim"}, {"UID": "uid-low-a1"}], "NumPDBViolations": 0}
    }
    bad = client.post("/preempt", json={"Pod": p, "NodeNameToMetaVictims": []}).get_json()
    assert "must be an object" in bad["Error"]
    assert len(store.list_pods()) == 6  # the verb writes nothing


def test_a_follower_writes_nothing_and_a_lower_pods_bind_is_refused_on_held_room():
    store, sched, evictions, _ = _setup()
    follower = Preemptor.over(sched, evictions, is_leader=lambda: False, settle_s=0)
    p = store.add_pod(wanting("big", mib=12000, priority=100))
    outcome = follower.preempt_now(p, ["a", "b"])
    assert outcome.result == "not-eligible" and outcome.message == "not the leader"
    assert len(store.list_pods()) == 5 and not store.get_pod("high", "big")["status"].get(
        "nominatedNodeName"
    )
    Preemptor.over(sched, evictions, settle_s=0).preempt_now(p, ["a", "b"])
    # kube-scheduler might still send a lower pod's bind to the freed GPU: the bind's
    # re-fit goes through the same filter, which holds the room for the nominee
    store.add_pod(wanting("lower", mib=12000, priority=50))
    with pytest.raises(HamiError):
        sched.bind("high", "lower", uid="uid-high-lower", node="a")
    assert not store.get_pod("high", "lower")["spec"].get("nodeName")
    assert sched.bind("high", "big", uid="uid-high-big", node="a") is not None


def test_the_room_being_freed_is_held_while_its_pods_terminate():
    """A nominated pod's room is held while the pods leaving it terminate: a pod of no
    higher priority that would fit beside a leaving pod goes to the other GPU, not into
    the room being freed (kube-scheduler's nominated pods hold CPU and memory the same
    way: added to the node's usage whatever is still terminating)."""
    store = cluster(node("a", [gpu("GPU-a0", memory_mib=16000), gpu("GPU-a1", memory_mib=16000)]))
    sched = Scheduler(store, manager())
    leaving = holder("leaving", "a", [("GPU-a0", 8000)])
    leaving["metadata"]["deletionTimestamp"] = "2026-12-02T06:00:00Z"
    store.add_pod(leaving)
    store.add_pod(holder("stays", "a", [("GPU-a1", 8000)]))
    store.add_pod(wanting("whole", mib=16000, priority=0, nominated="a"))
    newcomer = store.add_pod(wanting("half", mib=8000, priority=0, namespace="low"))
    fit = sched.filter(newcomer, ["a"]).fits["a"]
    assert fit.allocation is not None
    assert {d.uuid for d in fit.allocation.all_devices()} == {"GPU-a1"}
    # the nominated pod itself still waits for the leaving pod to be gone
    assert not sched.filter(store.get_pod("high", "whole"), ["a"]).feasible
    store.delete_pod("low", "leaving")
    assert sched.filter(store.get_pod("high", "whole"), ["a"]).feasible == ("a",)
