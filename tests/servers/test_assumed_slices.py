"""Slices assumed between ``/filter``'s answer and the pod's bind (``--filter-answer
best``): kube-scheduler filters the next pod while the previous pod's bind is in flight,
so the next pod must not be answered room the previous one was just given."""

from __future__ import annotations

from hami_core.scheduling.assumed import WHY, AssumedSlices
from hami_core.scheduling.scheduler import Scheduler
from hami_core.scheduling.state import Hold
from hami_core.servers.extender import create_extender_app
from tests.builders import cluster, container, gpu, manager, node, pod


def _gpu_pod(c, name: str, gpumem: int = 10000):
    p = pod(name, container(gpu=1, gpumem=gpumem), scheduler_name="hami-scheduler")
    p["metadata"]["uid"] = f"uid-{name}"
    return c.add_pod(p)


def _one_node():
    c = cluster(node("n1", [gpu("GPU-1")]))  # 16384 MiB
    sched = Scheduler(c, manager())
    return c, sched


def _filter(client, p):
    return client.post("/filter", json={"Pod": p, "NodeNames": ["n1"]}).get_json()


def test_the_next_pod_is_not_answered_the_room_the_previous_one_was_given():
    c, sched = _one_node()
    client = create_extender_app(sched, filter_answer="best").test_client()
    a, b = _gpu_pod(c, "a"), _gpu_pod(c, "b")
    assert _filter(client, a)["NodeNames"] == ["n1"]
    answer = _filter(client, b)  # a's bind still in flight
    assert answer["NodeNames"] == []
    assert answer["FailedNodes"]["n1"].endswith("CardInsufficientMemory")
    # a's own bind re-fits without its hold, and once bound its allocation counts once
    assert sched.bind("default", "a", uid="uid-a", node="n1") is not None
    assert sched.state.holds() == {}
    assert _filter(client, b)["NodeNames"] == []
    assert _filter(client, _gpu_pod(c, "small", gpumem=6000))["NodeNames"] == ["n1"]


def test_every_node_answered_alike_when_all_answers_are_given():
    c, sched = _one_node()
    client = create_extender_app(sched, filter_answer="all").test_client()
    assert _filter(client, _gpu_pod(c, "a"))["NodeNames"] == ["n1"]
    assert sched.state.holds() == {}  # kube-scheduler chooses: nothing is assumed


def test_a_placement_whose_bind_never_comes_is_let_go_after_the_ttl():
    c, sched = _one_node()
    now = [0.0]
    assumed = AssumedSlices(
        sched.state, sched.manager, sched.gangs.reader, ttl_s=10.0, clock=lambda: now[0]
    )
    a, b = _gpu_pod(c, "a"), _gpu_pod(c, "b")
    assert assumed.assume(a, sched.filter(a, ["n1"]).fits["n1"].allocation)
    assert sched.filter(b, ["n1"]).feasible == ()
    now[0] = 10.5
    assert assumed.expire() == 1 and len(assumed) == 0
    assert sched.filter(b, ["n1"]).feasible == ("n1",)


def test_a_tenant_re_filtered_again_and_again_holds_one_placement():
    """A pod's author cannot pile up held slices (other tenants' room) by being filtered
    many times: each answer replaces the pod's hold."""
    c, sched = _one_node()
    client = create_extender_app(sched, filter_answer="best").test_client()
    greedy = _gpu_pod(c, "greedy", gpumem=4000)
    for _ in range(5):
        assert _filter(client, greedy)["NodeNames"] == ["n1"]
    assert list(sched.state.holds()) == ["uid-greedy"]
    assert _filter(client, _gpu_pod(c, "other", gpumem=12000))["NodeNames"] == ["n1"]


def test_a_gang_reservation_is_never_replaced():
    c, sched = _one_node()
    assumed = AssumedSlices(sched.state, sched.manager, sched.gangs.reader)
    member = _gpu_pod(c, "member")
    allocation = sched.filter(member, ["n1"]).fits["n1"].allocation
    gang = Hold(
        uid="uid-member",
        namespace="default",
        name="member",
        node="n1",
        holdings=_holdings(sched, member, allocation),
        why="gang default/train",
    )
    sched.state.hold(gang)
    assert not assumed.assume(member, allocation)
    assert sched.state.holds()["uid-member"].why == "gang default/train" != WHY


def _holdings(sched, pod_, allocation):
    from hami_core.scheduling.gangs import held_pod

    bound = held_pod(pod_, allocation, sched.manager)
    return sched.gangs.reader.holdings(bound, sched.state.node("n1").info)
