"""Property (issue 27 figure): members bound of a group that never fits as a whole = 0.

Random clusters and random streams of kube-scheduler's calls: members of several groups
and lone pods arrive interleaved; each pod is filtered and, when a node is answered,
bound there (as kube-scheduler does), and some binds go to arbitrary nodes (a stale or
hostile caller). A group whose minimum asks more GPUs than the whole cluster has never
fits: none of its members may ever be bound. Every group that does get a member bound
ends with at least its minimum bound or still reserved (never a partial group left
holding GPUs), and nothing stays held for a pod that is bound or gone.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.errors import HamiError
from hami_core.facts.nodelock import release_node_lock
from hami_core.scheduling.gangs import GangOptions
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node, pod

NS = "team"


def gpu_node(name, count):
    return node(name, [gpu(f"{name}-{i}", index=i, split=1) for i in range(count)])


@st.composite
def scenarios(draw):
    gpus_per_node = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    total = sum(gpus_per_node)
    groups = []
    for g in range(draw(st.integers(1, 3))):
        per_member = draw(st.integers(1, 2))
        minimum = draw(st.integers(1, 5))
        members = draw(st.integers(minimum, minimum + 1))
        groups.append((f"g{g}", per_member, minimum, members))
    lone = draw(st.integers(0, 3))
    arrivals = [(name, i) for name, _, _, n in groups for i in range(n)]
    arrivals += [("lone", i) for i in range(lone)]
    order = draw(st.permutations(arrivals))
    stray = draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
    return gpus_per_node, total, groups, order, stray


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_a_group_that_never_fits_gets_no_member_bound(scenario):
    gpus_per_node, total, groups, order, stray = scenario
    store = cluster(*(gpu_node(f"n{i}", c) for i, c in enumerate(gpus_per_node)))
    sched = Scheduler(store, manager(), gang=GangOptions(wake=lambda _: None))
    spec = {name: (per, minimum) for name, per, minimum, _ in groups}
    names = [f"n{i}" for i in range(len(gpus_per_node))]
    created = []
    for step, (group, i) in enumerate(order):
        name = f"{group}-{i}"
        per = spec[group][0] if group in spec else 1
        p = pod(name, container(gpu=per), namespace=NS, scheduler_name="hami-scheduler")
        if group in spec:
            p["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
            p["metadata"]["annotations"] = {"hami.io/gang-min-member": str(spec[group][1])}
        p["metadata"]["creationTimestamp"] = f"2026-12-02T00:{step // 60:02d}:{step % 60:02d}Z"
        created.append(store.add_pod(p))
        # kube-scheduler retries every pending pod after each arrival
        for q in created:
            live = store.get_pod(NS, q["metadata"]["name"])
            if live["spec"].get("nodeName"):
                continue
            best = sched.filter(live).best()
            target = names[step % len(names)] if stray[step] else best
            if target is None:
                continue
            try:
                sched.bind(NS, q["metadata"]["name"], uid=q["metadata"]["uid"], node=target)
            except HamiError:  # refused (no reservation there, no room): nothing bound
                continue
            # the device plugin allocates it and releases the node lock
            release_node_lock(store, target, namespace=NS, pod=q["metadata"]["name"])
    bound: dict[str, int] = {}
    for q in store.list_pods(namespace=NS):
        group = q["metadata"]["name"].rsplit("-", 1)[0]
        if q["spec"].get("nodeName"):
            bound[group] = bound.get(group, 0) + 1
    reserved = sched.gangs.reserved()
    for name, per, minimum, _ in groups:
        if per * minimum > total:  # never fits as a whole
            assert bound.get(name, 0) == 0, (name, bound)
        elif bound.get(name, 0):
            held = sum(1 for r in reserved.values() if r.group.name == name)
            assert bound[name] + held >= minimum, (name, bound, held)
    holds = sched.state.holds()
    for q in store.list_pods(namespace=NS):
        if q["spec"].get("nodeName"):
            assert q["metadata"]["uid"] not in holds
