"""Gang groups (issue 27 item 3): all or nothing, reservations, expiry, failover, trust."""

import threading

import pytest

from hami_core.errors import ConflictError, InvalidInputError
from hami_core.facts.nodelock import release_node_lock
from hami_core.scheduling.gangs import GangOptions
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node, pod

NS = "team"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def two_gpu_node(name):
    return node(name, [gpu(f"{name}-0", index=0, split=1), gpu(f"{name}-1", index=1, split=1)])


def member(name, group="train", *, namespace=NS, minimum="4", gpus=2, label=True, **extra):
    p = pod(name, container(gpu=gpus), namespace=namespace, scheduler_name="hami-scheduler")
    meta = p["metadata"]
    if label:
        meta["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    else:
        meta.setdefault("annotations", {})["scheduling.k8s.io/group-name"] = group
    if minimum is not None:
        meta.setdefault("annotations", {})["hami.io/gang-min-member"] = minimum
    meta.setdefault("annotations", {}).update(extra)
    meta["creationTimestamp"] = f"2026-12-02T00:00:0{name[-1]}Z"
    return p


def env(nodes=3, **options):
    store = cluster(*(two_gpu_node(f"n{i}") for i in range(nodes)))
    woken = []
    clock = Clock()
    sched = Scheduler(store, manager(), gang=GangOptions(wake=woken.extend, **options))
    sched.gangs.monotonic = clock
    return store, sched, woken, clock


def add_members(store, n=4, **kw):
    return [store.add_pod(member(f"m{i}", **kw)) for i in range(n)]


def uid(p):
    return p["metadata"]["uid"]


def test_a_group_that_does_not_fit_holds_nothing_and_every_member_says_why():
    store, sched, woken, _ = env(nodes=3)  # room for 3 members of 2 GPUs
    members = add_members(store)
    for m in members:
        result = sched.filter(m)
        assert result.feasible == ()
        reasons = set(result.failed.values())
        assert len(reasons) == 1
        (reason,) = reasons
        assert reason.startswith("GroupDoesNotFit (group team/train: 3 of the 4 members")
        assert not sched.state.holds()
    for m in members:  # and no bind gets through without the group
        with pytest.raises(ConflictError, match="GroupDoesNotFit"):
            sched.bind(NS, m["metadata"]["name"], uid=uid(m), node="n0")
    assert all(
        not store.get_pod(NS, m["metadata"]["name"])["spec"].get("nodeName") for m in members
    )
    assert woken == []
    events = [e for e in store.events if e.reason == "GroupWaiting"]
    assert {e.name for e in events} == {"m0", "m1", "m2", "m3"}
    assert sched.gangs.waiting() == 1


def test_room_appears_then_the_whole_group_is_reserved_woken_and_bound():
    store, sched, woken, _ = env(nodes=3)
    members = add_members(store)
    assert sched.filter(members[0]).feasible == ()
    store.add_node(two_gpu_node("n3"))
    first = sched.filter(members[2])
    assert len(first.feasible) == 1
    holds = sched.state.holds()
    assert set(holds) == {uid(m) for m in members}
    assert len({h.node for h in holds.values()}) == 4  # 2 GPUs each: one member a node
    assert sorted(woken) == [(NS, "m0"), (NS, "m1"), (NS, "m3")]
    assert sched.gangs.waiting() == 0 and sched.gangs.placed_total == 1
    # an outsider cannot take the reserved room
    outsider = store.add_pod(pod("other", container(gpu=1), scheduler_name="hami-scheduler"))
    assert sched.filter(outsider).feasible == ()
    for m in members:
        reserved = holds[uid(m)].node
        answer = sched.filter(m)
        assert answer.feasible == (reserved,)
        assert answer.failed and all("GroupMemberReserved" in r for r in answer.failed.values())
        with pytest.raises(ConflictError, match="GroupMemberReserved"):
            wrong = next(n for n in ("n0", "n1", "n2", "n3") if n != reserved)
            sched.bind(NS, m["metadata"]["name"], uid=uid(m), node=wrong)
        assert sched.bind(NS, m["metadata"]["name"], uid=uid(m), node=reserved) is not None
    assert sched.state.holds() == {}
    assert {store.get_pod(NS, m["metadata"]["name"])["spec"]["nodeName"] for m in members} == {
        "n0",
        "n1",
        "n2",
        "n3",
    }


def test_reservations_expire_and_release_the_room():
    store, sched, _, clock = env(nodes=4, timeout_s=30)
    members = add_members(store)
    assert sched.filter(members[0]).feasible
    outsider = store.add_pod(pod("other", container(gpu=1), scheduler_name="hami-scheduler"))
    assert sched.filter(outsider).feasible == ()
    clock.now += 31
    assert sched.gangs.reserved() == {}
    assert sched.state.holds() == {}
    assert sched.filter(outsider).feasible


def test_members_reserved_on_one_node_do_not_fail_on_the_node_lock():
    """HAMi#1832: the second member's bind waits for the first's lock (released by the
    device plugin after Allocate) instead of failing."""
    store = cluster(two_gpu_node("n0"))
    sched = Scheduler(store, manager(), gang=GangOptions(wake=lambda _: None))
    a, b = (store.add_pod(member(f"m{i}", minimum="2", gpus=1)) for i in range(2))
    assert sched.filter(a).feasible == ("n0",)
    assert sched.bind(NS, "m0", uid=uid(a), node="n0") is not None
    # the device plugin allocates m0 a moment later and releases the lock
    timer = threading.Timer(0.3, lambda: release_node_lock(store, "n0", namespace=NS, pod="m0"))
    timer.start()
    try:
        assert sched.bind(NS, "m1", uid=uid(b), node="n0") is not None
    finally:
        timer.cancel()


def test_a_new_leader_places_the_rest_from_what_is_bound_without_double_booking():
    store, sched, _, _ = env(nodes=4)
    members = add_members(store)
    sched.filter(members[0])
    nodes = {u: h.node for u, h in sched.state.holds().items()}
    for m in members[:2]:
        sched.bind(NS, m["metadata"]["name"], uid=uid(m), node=nodes[uid(m)])
    # the leader dies; a new one has no reservation, sees two bound members
    successor = Scheduler(store, manager(), gang=GangOptions(wake=lambda _: None))
    rest = members[2:]
    taken = {nodes[uid(m)] for m in members[:2]}
    for m in rest:  # its binds arrive for the nodes the old leader chose
        assert successor.bind(NS, m["metadata"]["name"], uid=uid(m), node=nodes[uid(m)])
    placed = [store.get_pod(NS, m["metadata"]["name"])["spec"]["nodeName"] for m in members]
    assert len(set(placed)) == 4 and taken <= set(placed)
    # a bind for an already full node is refused, not double-booked
    extra = store.add_pod(member("m4"))
    with pytest.raises(ConflictError):
        successor.bind(NS, "m4", uid=uid(extra), node=placed[0])


def test_volcano_group_name_annotation_groups_as_the_label_does():
    store, sched, _, _ = env(nodes=3)
    members = add_members(store, label=False)
    assert "GroupDoesNotFit" in sched.filter(members[0]).failed["n0"]


# -- the tenant ------------------------------------------------------------------------


def test_a_pod_of_another_namespace_never_joins_or_fills_a_group():
    store, sched, _, _ = env(nodes=4)
    add_members(store, n=3)  # team: three of four members
    intruder = store.add_pod(member("m9", namespace="other"))
    # the intruder names team's group: it is in its own group other/train, of one member
    assert "waiting for 3 more" in sched.filter(intruder).failed["n0"]
    assert sched.state.holds() == {}
    team = store.list_pods(namespace=NS)[0]
    assert "waiting for 1 more" in sched.filter(team).failed["n0"]


@pytest.mark.parametrize("value", ["0", "-3", "many", "257", "1e9"])
def test_a_bad_minimum_is_refused_with_its_name(value):
    store, sched, _, _ = env(nodes=1)
    p = store.add_pod(member("m0", minimum=value))
    with pytest.raises(InvalidInputError, match="hami.io/gang-min-member"):
        sched.filter(p)


def test_a_group_without_a_minimum_says_how_to_state_one():
    store, sched, _, _ = env(nodes=1)
    p = store.add_pod(member("m0", minimum=None))
    assert "no minimum member count: set hami.io/gang-min-member" in sched.filter(p).failed["n0"]


def test_reserved_slices_count_against_the_namespace_quota():
    """A group cannot hold more than its namespace's quota allows, not even for a
    moment: the held slices are charged as bound ones are."""
    store, sched, _, _ = env(nodes=4)
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": NS},
            "spec": {"hard": {"limits.nvidia.com/gpu": "6"}},
        }
    )
    members = add_members(store)  # 4 x 2 GPUs = 8 > 6
    reason = sched.filter(members[0]).failed["n0"]
    assert reason.startswith("GroupDoesNotFit")
    assert sched.state.holds() == {}
    # and once placed (a quota raised), another pod of the namespace sees the holds
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": NS},
            "spec": {"hard": {"limits.nvidia.com/gpu": "9"}},
        }
    )
    assert sched.filter(members[0]).feasible
    other = store.add_pod(pod("x", container(gpu=2), namespace=NS, scheduler_name="hami-scheduler"))
    store.add_node(two_gpu_node("n9"))
    assert "ResourceQuotaNotFit" in sched.filter(other).failed["n9"]


def test_a_member_asked_on_other_nodes_than_its_reserved_one_moves_there():
    """kube-scheduler 1.20 passes a window of the nodes (percentageOfNodesToScore,
    rotating): a woken member's window may miss its reserved node. Its reservation moves
    into the window when it fits there, the group staying whole; else it stays put."""
    store, sched, _, _ = env(nodes=6)
    members = add_members(store)
    sched.filter(members[0], ["n0", "n1", "n2", "n3"])
    holds = sched.state.holds()
    m1 = members[1]
    was = holds[uid(m1)].node
    window = ["n4", "n5"]
    answer = sched.filter(m1, window)
    assert len(answer.feasible) == 1 and answer.feasible[0] in window
    holds = sched.state.holds()
    assert holds[uid(m1)].node == answer.feasible[0] and len(holds) == 4
    assert sched.gangs.reserved()[uid(m1)].node == answer.feasible[0]
    assert sched.bind(NS, "m1", uid=uid(m1), node=answer.feasible[0]) is not None
    # a window where it cannot fit: the reservation stays where it was
    m2 = members[2]
    where = holds[uid(m2)].node
    taken = [holds[uid(members[0])].node, holds[uid(members[3])].node]
    answer = sched.filter(m2, taken)
    assert answer.feasible == ()
    assert all("GroupMemberReserved" in r for r in answer.failed.values())
    assert sched.state.holds()[uid(m2)].node == where != was


def test_a_group_gone_stops_counting_as_waiting():
    store, sched, _, clock = env(nodes=3)
    members = add_members(store)
    sched.filter(members[0])
    assert sched.gangs.waiting() == 1
    for m in members:
        store.delete_pod(NS, m["metadata"]["name"])
    clock.now += 121  # no member refused again since: none is left waiting
    assert sched.gangs.waiting() == 0


def test_the_podgroup_minmember_and_timeout_are_read_when_its_crd_answers():
    """scheduler-plugins' PodGroup: minMember without the annotation; its
    scheduleTimeoutSeconds shortens the reservation, never lengthens it."""
    from hami_core.cluster.podgroups import PodGroupSpec

    groups = {(NS, "train"): PodGroupSpec(min_member=4, timeout_s=10.0)}
    store = cluster(*(two_gpu_node(f"n{i}") for i in range(4)))
    clock = Clock()
    sched = Scheduler(
        store,
        manager(),
        gang=GangOptions(wake=lambda _: None, pod_groups=lambda ns, n: groups.get((ns, n))),
    )
    sched.gangs.monotonic = clock
    members = add_members(store, n=3, minimum=None)
    assert "waiting for 1 more" in sched.filter(members[0]).failed["n0"]
    members.append(store.add_pod(member("m3", minimum=None)))
    assert sched.filter(members[3]).feasible
    assert len(sched.state.holds()) == 4
    clock.now += 11
    assert sched.gangs.reserved() == {} and sched.state.holds() == {}
    groups[(NS, "train")] = PodGroupSpec(min_member=9999)
    assert "PodGroup minMember 9999 is over 256" in sched.filter(members[0]).failed["n0"]


def test_the_podgroup_reader_reads_both_crds_and_tells_absence():
    from hami_core.cluster.podgroups import PodGroupReader

    class Missing(Exception):
        status = 404

    class Api:
        def __init__(self):
            self.calls = []

        def get_namespaced_custom_object(self, group, version, namespace, plural, name):
            self.calls.append(group)
            if group == "scheduling.volcano.sh" and name == "vc":
                return {"spec": {"minMember": 3, "scheduleTimeoutSeconds": "soon"}}
            raise Missing()

    api = Api()
    read = PodGroupReader(api, ttl_s=10.0, clock=lambda: 0.0)
    spec = read("team", "vc")
    assert spec.min_member == 3 and spec.timeout_s is None  # a bad field is left out
    assert read("team", "none") is None
    calls = len(api.calls)
    assert read("team", "none") is None and len(api.calls) == calls  # answered from memory
