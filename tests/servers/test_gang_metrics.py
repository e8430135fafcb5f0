"""Gang metrics (issue 27 item 5): groups waiting, members reserved, groups placed."""

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hami_core.scheduling.gangs import GangOptions
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.metrics import SchedulerMetrics
from tests.builders import cluster, container, gpu, manager, node, pod


def value(metrics, name):
    for fam in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in fam.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} missing")


def member(name):
    p = pod(name, container(gpu=1), namespace="team", scheduler_name="hami-scheduler")
    p["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train"}
    p["metadata"]["annotations"] = {"hami.io/gang-min-member": "2"}
    return p


def test_groups_waiting_then_placed():
    store = cluster(node("n0", [gpu("GPU-0", split=1)]))
    sched = Scheduler(store, manager(), gang=GangOptions(wake=lambda _: None))
    metrics = SchedulerMetrics(sched)
    a, b = store.add_pod(member("a")), store.add_pod(member("b"))
    assert not sched.filter(a).feasible  # two members, one GPU
    assert value(metrics, "hami_scheduler_gang_groups_waiting") == 1
    assert value(metrics, "hami_scheduler_gang_groups_refused_total") == 1
    assert value(metrics, "hami_scheduler_gang_groups_placed_total") == 0
    store.add_node(node("n1", [gpu("GPU-1", split=1)]))
    assert sched.filter(b).feasible
    assert value(metrics, "hami_scheduler_gang_groups_waiting") == 0
    assert value(metrics, "hami_scheduler_gang_groups_placed_total") == 1
    assert value(metrics, "hami_scheduler_gang_members_reserved") == 2
