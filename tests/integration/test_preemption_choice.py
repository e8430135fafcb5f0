"""Slice-aware preemption's choice (issue 27 item 1) and the room it keeps (item 2).

``choose_victims`` over a ``Scheduler`` on an embedded cluster: lower priority only, the
fewest victims, then the lowest priorities, then the fewest PDB violations; never a
victim whose eviction frees nothing the preemptor needs; quota still holds. A property
test compares it with a brute force over every subset of every node.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.scheduling.preemption import choose_victims
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, gpu, manager, node

from .preemption_builders import holder, wanting

MANAGER = manager()


def _sched(*nodes):
    store = cluster(*nodes)
    return store, Scheduler(store, MANAGER)


def _choose(sched, p, *, budgets=lambda ns: ()):
    return choose_victims(
        sched.state, sched.engine, sched.cycle(p), sched.state.node_names(), budgets=budgets
    )


def _two_nodes():
    return (
        node(
            "a",
            [gpu("GPU-a0", index=0, memory_mib=16000), gpu("GPU-a1", index=1, memory_mib=16000)],
        ),
        node(
            "b",
            [gpu("GPU-b0", index=0, memory_mib=16000), gpu("GPU-b1", index=1, memory_mib=16000)],
        ),
    )


def test_the_fewest_victims_that_free_what_the_pod_needs():
    store, sched = _sched(*_two_nodes())
    for h in (
        holder("b0-1", "b", [("GPU-b0", 8000)]),
        holder("b0-2", "b", [("GPU-b0", 8000)]),
        holder("b1-1", "b", [("GPU-b1", 6000)]),
        holder("b1-2", "b", [("GPU-b1", 6000)]),
        holder("a0-1", "a", [("GPU-a0", 6000)]),
        holder("a0-2", "a", [("GPU-a0", 6000)]),
        holder("a0-3", "a", [("GPU-a0", 4000)]),
        holder("a1-1", "a", [("GPU-a1", 5000)]),
        holder("a1-2", "a", [("GPU-a1", 5000)]),
        holder("a1-3", "a", [("GPU-a1", 5000)]),
    ):
        store.add_pod(h)
    p = wanting("big", mib=12000, priority=100)
    assert not sched.filter(p).feasible
    choice = _choose(sched, p)
    assert choice.candidate is not None and choice.exact
    # one victim frees 8000 on b0 (16000 - 8000 = 8000 < 12000): two are needed anywhere;
    # on a0 evicting the two 6000s leaves 4000 used: 12000 free.
    victims = sorted(v.ref for v in choice.candidate.victims)
    assert len(victims) == 2
    assert choice.candidate.allocation is not None


def test_only_lower_priorities_are_victims_and_none_when_they_do_not_suffice():
    store, sched = _sched(node("a", [gpu("GPU-a0", memory_mib=16000)]))
    store.add_pod(holder("same", "a", [("GPU-a0", 10000)], priority=100))
    store.add_pod(holder("low", "a", [("GPU-a0", 6000)], priority=0))
    choice = _choose(sched, wanting("p", mib=12000, priority=100))
    assert choice.candidate is None  # evicting "low" leaves 6000 free: not enough
    assert "priority < 100" in choice.reason


def test_the_lowest_priorities_win_a_tie_on_count():
    store, sched = _sched(*_two_nodes())
    store.add_pod(holder("a0", "a", [("GPU-a0", 16000)], priority=50))
    store.add_pod(holder("a1", "a", [("GPU-a1", 16000)], priority=60))
    store.add_pod(holder("b0", "b", [("GPU-b0", 16000)], priority=10))
    store.add_pod(holder("b1", "b", [("GPU-b1", 16000)], priority=70))
    choice = _choose(sched, wanting("p", mib=10000, priority=100))
    assert [v.ref for v in choice.candidate.victims] == ["low/b0"]


def test_pod_disruption_budgets_break_a_tie_on_priorities():
    store, sched = _sched(*_two_nodes())
    store.add_pod(holder("a0", "a", [("GPU-a0", 16000)], labels={"app": "kept"}))
    store.add_pod(holder("a1", "a", [("GPU-a1", 16000)], labels={"app": "kept"}))
    store.add_pod(holder("b0", "b", [("GPU-b0", 16000)], labels={"app": "free"}))
    store.add_pod(holder("b1", "b", [("GPU-b1", 16000)], labels={"app": "kept"}))
    pdb = {
        "metadata": {"name": "kept", "namespace": "low"},
        "spec": {"selector": {"matchLabels": {"app": "kept"}}},
        "status": {"disruptionsAllowed": 0},
    }
    choice = _choose(sched, wanting("p", mib=10000, priority=100), budgets=lambda ns: [pdb])
    assert [v.ref for v in choice.candidate.victims] == ["low/b0"]
    assert choice.candidate.pdb_violations == 0


def test_quota_must_still_hold_with_the_victims_gone():
    store, sched = _sched(*_two_nodes())
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}},
        }
    )
    # the namespace uses 16000 of 20000 on b0 (low priority); other namespaces fill a
    store.add_pod(holder("mine", "b", [("GPU-b0", 16000)], namespace="team"))
    store.add_pod(holder("a0", "a", [("GPU-a0", 16000)], namespace="other"))
    store.add_pod(holder("a1", "a", [("GPU-a1", 16000)], namespace="other"))
    p = wanting("p", mib=10000, priority=100, namespace="team")
    assert not sched.filter(p).feasible  # b1 is free, but 16000 + 10000 > 20000
    choice = _choose(sched, p)
    # evicting an "other" pod frees a GPU but not the quota: only "team/mine" helps
    assert [v.ref for v in choice.candidate.victims] == ["team/mine"]


def test_a_tenant_cannot_raise_its_priority_with_an_annotation():
    store, sched = _sched(node("a", [gpu("GPU-a0", memory_mib=16000)]))
    store.add_pod(holder("victim", "a", [("GPU-a0", 16000)], priority=10, namespace="other"))
    forged = wanting(
        "p",
        mib=8000,
        priority=0,
        namespace="tenant",
        annotations={"scheduling.k8s.io/priority": "1000000", "hami.io/priority": "1000000"},
    )
    forged["metadata"]["labels"] = {"priority": "1000000"}
    assert _choose(sched, forged).candidate is None  # spec.priority (0) is all that counts


def test_a_leaving_pod_of_equal_priority_is_no_room_to_take():
    # HAMi #1368's case through preemption: a terminating pod still holds its GPU, and
    # a pod of the same priority is not nominated to it
    store, sched = _sched(node("a", [gpu("GPU-a0", memory_mib=16000)]))
    leaving = holder("leaving", "a", [("GPU-a0", 16000)], priority=100)
    leaving["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    store.add_pod(leaving)
    assert _choose(sched, wanting("p", mib=8000, priority=100)).candidate is None


def test_pods_already_leaving_are_not_chosen_again():
    store, sched = _sched(node("a", [gpu("GPU-a0", memory_mib=16000)]))
    leaving = holder("leaving", "a", [("GPU-a0", 16000)])
    leaving["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    store.add_pod(leaving)
    choice = _choose(sched, wanting("p", mib=8000, priority=100))
    assert choice.candidate is not None and choice.candidate.victims == ()


def test_nominated_pods_of_equal_or_higher_priority_hold_their_room():
    store, sched = _sched(node("a", [gpu("GPU-a0", memory_mib=16000)]))
    store.add_pod(wanting("nominee", mib=12000, priority=100, nominated="a"))
    lower = wanting("lower", mib=8000, priority=50)
    equal = wanting("equal", mib=8000, priority=100)
    higher = wanting("higher", mib=8000, priority=200)
    assert "a" not in sched.filter(lower).feasible  # 16000 - 12000 held = 4000 free
    assert "a" not in sched.filter(equal).feasible
    assert "a" in sched.filter(higher).feasible  # a lower nominee holds nothing for it
    assert "a" in sched.filter(store.get_pod("high", "nominee")).feasible  # itself
    # small enough for what is left: fits beside the held room
    assert "a" in sched.filter(wanting("small", mib=4000, priority=0)).feasible
    # the nomination ends (bound elsewhere, or gone): the room is free again
    store.delete_pod("high", "nominee")
    assert "a" in sched.filter(lower).feasible


def _brute_fewest(sched, p):
    """The fewest lower-priority holders whose removal lets ``p`` fit, over every subset
    of every node (the preemptor's quota aside: these clusters have none)."""
    cycle = sched.cycle(p)
    best = None
    with sched.state.lock:
        for name in sched.state.node_names():
            node_ = sched.state.node(name)
            holders = [(obj, held) for obj, held, _ in sched.state.holders(node_)]
            low = [h for h in holders if h[0]["spec"]["priority"] < p["spec"]["priority"]]
            high = [h for o, h in holders if o["spec"]["priority"] >= p["spec"]["priority"]]
            for size in range(len(low) + 1):
                if best is not None and size >= best:
                    break
                for combo in itertools.combinations(range(len(low)), size):
                    stay = [h for i, (_, h) in enumerate(low) if i not in combo]
                    from hami_core.facts.usage import usage_from_holdings

                    usage = usage_from_holdings(node_.info, [*high, *stay])
                    if sched.engine.fit_one(cycle, node_, usage)[0].allocation is not None:
                        best = size
                        break
    return best


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # node
            st.integers(0, 1),  # gpu
            st.sampled_from([2000, 4000, 6000, 8000]),
            st.sampled_from([0, 10, 50, 100]),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from([6000, 10000, 14000]),
    st.integers(1, 2),
)
def test_the_choice_is_a_smallest_set_of_lower_priority_victims_each_needed(pods, mib, count):
    nodes = [
        node(f"n{i}", [gpu(f"GPU-n{i}-{g}", index=g, memory_mib=16000, split=4) for g in range(2)])
        for i in range(3)
    ]
    store, sched = _sched(*nodes)
    used: dict[str, int] = {}
    for k, (n, g, m, prio) in enumerate(pods):
        uuid = f"GPU-n{n}-{g}"
        if used.get(uuid, 0) + m > 16000:
            continue
        used[uuid] = used.get(uuid, 0) + m
        store.add_pod(holder(f"h{k}", f"n{n}", [(uuid, m)], priority=prio))
    p = wanting("p", gpus=count, mib=mib, priority=50)
    choice = _choose(sched, p)
    fewest = _brute_fewest(sched, p)
    if fewest is None:
        assert choice.candidate is None
        return
    assert choice.candidate is not None and choice.exact
    victims = choice.candidate.victims
    assert len(victims) == fewest  # victims / the fewest that suffice = 1.0
    assert all(v.priority < 50 for v in victims)
    # no useless victim: keeping any one of them back, the pod no longer fits there
    cycle = sched.cycle(p)
    from hami_core.facts.usage import usage_from_holdings

    with sched.state.lock:
        node_ = sched.state.node(choice.candidate.node)
        holders = sched.state.holders(node_)
        for spared in victims:
            gone = {v.ref for v in victims} - {spared.ref}
            stay = [h for o, h, _ in holders if f"low/{o['metadata']['name']}" not in gone]
            usage = usage_from_holdings(node_.info, stay)
            assert sched.engine.fit_one(cycle, node_, usage)[0].allocation is None


def test_a_node_whose_fit_raises_is_left_out_not_the_whole_choice(monkeypatch):
    store, sched = _sched(*_two_nodes())
    for n in ("a", "b"):
        for g in (0, 1):
            store.add_pod(holder(f"{n}{g}", n, [(f"GPU-{n}{g}", 16000)]))
    fit_one = sched.engine.fit_one

    def broken(cycle, node, usage):
        if node.name == "a":
            raise ValueError("a backend's garbage")
        return fit_one(cycle, node, usage)

    monkeypatch.setattr(sched.engine, "fit_one", broken)
    choice = _choose(sched, wanting("p", mib=10000, priority=100))
    assert choice.candidate is not None and choice.candidate.node == "b"


def test_a_new_pod_shape_bounds_only_the_nodes_that_can_win():
    # 120 full nodes, each with one priority-0 victim freeing a whole GPU: the first by
    # name wins (kube-scheduler's order), so a pod of a shape never seen before must not
    # compute every node's bound first (the figure's p99 was those first computations)
    nodes = [
        node(f"n{i:03}", [gpu(f"GPU-{i}-{g}", index=g, memory_mib=16000) for g in range(2)])
        for i in range(120)
    ]
    store, sched = _sched(*nodes)
    for i in range(120):
        for g in range(2):
            store.add_pod(holder(f"h{i}-{g}", f"n{i:03}", [(f"GPU-{i}-{g}", 16000)]))
    for mib, priority in ((12000, 100), (9000, 60), (15000, 100)):  # new shapes each time
        choice = _choose(sched, wanting(f"p{mib}", mib=mib, priority=priority))
        assert choice.candidate is not None and choice.candidate.node == "n000"
        assert len(choice.candidate.victims) == 1
        assert choice.bounds <= 3, f"{choice.bounds} node bounds computed for one decision"
        again = _choose(sched, wanting(f"q{mib}", mib=mib, priority=priority))  # same shape
        assert again.bounds == 0 and again.candidate is not None
        assert (again.candidate.node, again.candidate.victims) == ("n000", choice.candidate.victims)


def test_negative_priorities_never_hide_the_node_that_wins_the_tie():
    # PriorityClass values may be negative. Node a: one victim of priority -3 opens its
    # first GPU (a single sharer slot), its second is free: rank (1, -3, -3, a). Node b:
    # one victim holding both GPUs: (1, -3, -3, b). a wins on the name; a per-device
    # bound that took a's free GPU's sum (0) as the node's once hid it behind b.
    store, sched = _sched(
        node("a", [gpu("GPU-a0", index=0, memory_mib=16000, split=1), gpu("GPU-a1", index=1)]),
        node("b", [gpu("GPU-b0", index=0, memory_mib=16000), gpu("GPU-b1", index=1)]),
    )
    store.add_pod(holder("a0", "a", [("GPU-a0", 1000)], priority=-3))
    store.add_pod(holder("b01", "b", [("GPU-b0", 16000), ("GPU-b1", 16000)], priority=-3))
    choice = _choose(sched, wanting("p", gpus=2, mib=8000, priority=0))
    assert choice.candidate is not None
    assert (choice.candidate.node, [v.ref for v in choice.candidate.victims]) == ("a", ["low/a0"])


def _brute_best_rank(sched, p):
    """kube-scheduler's best ``(victims, highest priority, sum, node)`` over every subset
    of lower-priority holders of every node (no PDBs here); None when none fits."""
    from hami_core.facts.priority import terminating
    from hami_core.facts.usage import usage_from_holdings

    cycle = sched.cycle(p)
    mine = p["spec"]["priority"]
    best = None
    with sched.state.lock:
        for name in sched.state.node_names():
            node_ = sched.state.node(name)
            holders = [(obj, held) for obj, held, _ in sched.state.holders(node_)]
            low = [
                (o, h) for o, h in holders if o["spec"]["priority"] < mine and not terminating(o)
            ]
            stays = [h for o, h in holders if o["spec"]["priority"] >= mine]
            for size in range(len(low) + 1):
                for combo in itertools.combinations(range(len(low)), size):
                    stay = [h for i, (_, h) in enumerate(low) if i not in combo]
                    usage = usage_from_holdings(node_.info, [*stays, *stay])
                    if sched.engine.fit_one(cycle, node_, usage)[0].allocation is None:
                        continue
                    prios = [low[i][0]["spec"]["priority"] for i in combo]
                    rank = (size, max(prios, default=-(2**31) - 1), sum(prios), name)
                    if best is None or rank < best:
                        best = rank
    return best


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # node
            st.sampled_from([(0,), (1,), (2,), (0, 1), (1, 2), (0, 1, 2)]),  # its GPUs
            st.sampled_from([2000, 4000, 6000, 8000]),
            st.sampled_from([-5, 0, 10, 50, 100]),
            st.booleans(),  # leaving (deletionTimestamp set)
        ),
        min_size=1,
        max_size=14,
    ),
    st.sampled_from([6000, 10000, 14000]),
    st.integers(1, 3),
)
def test_the_choice_is_kube_schedulers_best_candidate_over_every_subset(pods, mib, count):
    # the pruning (bounds before the exact search) never skips the node that wins:
    # the whole rank, ties on priorities and names included, equals a brute force's
    nodes = [
        node(f"n{i}", [gpu(f"GPU-n{i}-{g}", index=g, memory_mib=16000, split=3) for g in range(3)])
        for i in range(4)
    ]
    store, sched = _sched(*nodes)
    used: dict[str, list[int]] = {}
    for k, (n, gpus, m, prio, leaving) in enumerate(pods):
        uuids = [f"GPU-n{n}-{g}" for g in gpus]
        if any(used.get(u, [0, 0])[0] + m > 16000 or used.get(u, [0, 0])[1] >= 3 for u in uuids):
            continue
        for u in uuids:
            used.setdefault(u, [0, 0])
            used[u][0] += m
            used[u][1] += 1
        obj = holder(f"h{k}", f"n{n}", [(u, m) for u in uuids], priority=prio)
        if leaving:
            obj["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
        store.add_pod(obj)
    p = wanting("p", gpus=count, mib=mib, priority=50)
    choice = _choose(sched, p)
    best = _brute_best_rank(sched, p)
    if best is None:
        assert choice.candidate is None
        return
    assert choice.candidate is not None and choice.exact
    c = choice.candidate
    assert (*c.rank()[:3], c.node) == best
