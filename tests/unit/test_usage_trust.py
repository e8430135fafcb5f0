"""Usage counts only pods bound to the node by our scheduler (issue #12 item 2).

A tenant's forged or rewritten allocation annotations must not make a GPU look full
(denial of service) nor make its own share disappear from the accounting.
"""

import logging

from hami_core.facts.nodes import read_node
from hami_core.facts.usage import bound_here, node_usage, pod_holdings
from hami_core.protocol.config import DEFAULT_SCHEDULER_NAME
from hami_core.scheduling.scheduler import utcnow
from tests.builders import container, gpu, manager, node, pipeline, pod

ALLOC = "hami.io/vgpu-devices-allocated"
TWO = node("node-1", [gpu("GPU-A"), gpu("GPU-B", index=1)])


def _info():
    return read_node(TWO, manager().device_types(), now=utcnow())


def _bound(
    name, *containers, annotations=None, scheduler=DEFAULT_SCHEDULER_NAME, node_name="node-1"
):
    p = pod(name, *containers, annotations=annotations)
    p["metadata"]["uid"] = f"uid-{name}"
    p["spec"]["schedulerName"] = scheduler
    if node_name:
        p["spec"]["nodeName"] = node_name
    p["status"] = {"phase": "Running"}
    return p


def _usage(*pods):
    broken: list[str] = []
    usage = node_usage(
        _info(),
        pods,
        manager().device_types(),
        scheduler_name=DEFAULT_SCHEDULER_NAME,
        broken=broken,
    )
    return usage, broken


def test_a_pod_bound_by_our_scheduler_counts():
    p = _bound("ok", container(gpu=1, gpumem=3000), annotations={ALLOC: "GPU-A,NVIDIA,3000,0:;"})
    usage, broken = _usage(p)
    assert (usage["GPU-A"].used_memory_mib, usage["GPU-A"].used_count) == (3000, 1)
    assert usage["GPU-B"].used_memory_mib == 0 and broken == []


def test_forged_allocation_of_another_schedulers_pod_is_ignored():
    forged = _bound(
        "forged",
        container(gpu=1, gpumem=16384),
        annotations={ALLOC: "GPU-A,NVIDIA,16384,100:;"},
        scheduler="default-scheduler",
    )
    usage, _ = _usage(forged)
    assert usage["GPU-A"].used_memory_mib == 0 and usage["GPU-A"].used_count == 0


def test_forged_allocation_on_a_non_gpu_pod_is_ignored():
    # Bound by our scheduler (any pod may name it), but asks for no GPU resource.
    squatter = _bound("squatter", container(), annotations={ALLOC: "GPU-A,NVIDIA,16384,100:;"})
    usage, broken = _usage(squatter)
    assert usage["GPU-A"].used_memory_mib == 0 and broken == []


def test_a_pod_bound_elsewhere_holds_nothing_here():
    other = _bound(
        "other", container(gpu=1), annotations={ALLOC: "GPU-A,NVIDIA,100,0:;"}, node_name="node-2"
    )
    usage, _ = _usage(other)
    assert usage["GPU-A"].used_memory_mib == 0


def test_bind_in_flight_counts_on_the_annotated_node():
    p = _bound(
        "inflight",
        container(gpu=1, gpumem=2000),
        annotations={ALLOC: "GPU-B,NVIDIA,2000,0:;", "hami.io/vgpu-node": "node-1"},
        node_name=None,
    )
    assert bound_here(p, "node-1", scheduler_name=DEFAULT_SCHEDULER_NAME)
    assert not bound_here(p, "node-2", scheduler_name=DEFAULT_SCHEDULER_NAME)
    assert _usage(p)[0]["GPU-B"].used_memory_mib == 2000


def test_finished_pod_holds_nothing():
    p = _bound("done", container(gpu=1), annotations={ALLOC: "GPU-A,NVIDIA,100,0:;"})
    p["status"]["phase"] = "Succeeded"
    assert _usage(p)[0]["GPU-A"].used_memory_mib == 0


def test_rewritten_allocation_holds_the_named_device_whole_and_is_logged():
    garbage = _bound("rw", container(gpu=1, gpumem=1000), annotations={ALLOC: "GPU-B,NVIDIA,x"})
    usage, broken = _usage(garbage)
    b = usage["GPU-B"]
    assert b.used_count == 10 and b.free_memory_mib == 0 and b.free_cores_pct == 0
    assert usage["GPU-A"].used_memory_mib == 0  # only the device it names
    assert len(broken) == 1 and "default/rw" in broken[0] and "GPU-B" in broken[0]


def test_deleted_allocation_holds_every_device_of_the_vendor():
    gone = _bound("gone", container(gpu=1, gpumem=1000))
    usage, broken = _usage(gone)
    assert all(u.free_memory_mib == 0 and u.used_count == 10 for u in usage.values())
    assert "missing" in broken[0]


def test_holdings_of_one_pod_is_the_single_rule():
    p = _bound(
        "two",
        container("a", gpu=1, gpumem=1000, gpucores=10),
        container("b", gpu=1, gpumem=500, gpucores=5),
        annotations={ALLOC: "GPU-A,NVIDIA,1000,10:;GPU-A,NVIDIA,500,5:;"},
    )
    held = pod_holdings(
        p,
        _info(),
        manager().device_types(),
        scheduler_name=DEFAULT_SCHEDULER_NAME,
        requested_vendors={"NVIDIA"},
    )
    assert held.problem is None
    a = held.charges["GPU-A"]
    assert (a.memory_mib, a.cores_pct, a.count) == (1500, 15, 2) and held.whole == frozenset()


def test_unknown_requests_count_what_is_carried():
    p = _bound("bad", container(gpu="x"), annotations={ALLOC: "GPU-A,NVIDIA,700,0:;"})
    held = pod_holdings(
        p,
        _info(),
        manager().device_types(),
        scheduler_name=DEFAULT_SCHEDULER_NAME,
        requested_vendors=None,
    )
    assert held.charges["GPU-A"].memory_mib == 700


def test_renamed_resources_still_count():
    cfg = {"nvidia": {"resourceCountName": "example.com/vgpu"}}
    p = pod("renamed", {"name": "c", "resources": {"limits": {"example.com/vgpu": "1"}}})
    p["metadata"]["uid"] = "u1"
    p["spec"].update(schedulerName=DEFAULT_SCHEDULER_NAME, nodeName="node-1")
    p["metadata"]["annotations"] = {ALLOC: "GPU-A,NVIDIA,4000,0:;"}
    pl = pipeline(TWO, config=cfg)
    pl.cluster.add_pod(p)
    sched = pl.scheduler
    usage = sched.node_usage(sched.node_info(pl.cluster.get_node("node-1")))
    assert usage["GPU-A"].used_memory_mib == 4000


def test_scheduler_logs_a_broken_pod_once(caplog):
    pl = pipeline(TWO)
    pl.cluster.add_pod(_bound("rw", container(gpu=1), annotations={ALLOC: "GPU-A,NVIDIA,x"}))
    sched = pl.scheduler
    info = sched.node_info(pl.cluster.get_node("node-1"))
    with caplog.at_level(logging.WARNING, logger="hami_core.scheduling.scheduler"):
        for _ in range(3):
            assert sched.node_usage(info)["GPU-A"].free_memory_mib == 0
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "failing closed" in caplog.records[0].getMessage()
    # A forged, full-looking GPU never stops a legitimate pod on the other one.
    out = pl.submit(pod("next", container(gpu=1, gpumem=1000)))
    assert out.node == "node-1" and out.allocation.devices["NVIDIA"][0][0].uuid == "GPU-B"


def test_an_unreadable_allocation_keeps_its_namespaces_quota_closed():
    """Rewriting one's own ``-allocated`` must not free quota for more pods."""
    from hami_core.webhook import Admission
    from tests.builders import cluster

    store = cluster()
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "10000"}},
        }
    )
    broken = pod("old", container(gpu=1, gpumem=6000), namespace="team")
    broken["metadata"]["annotations"] = {ALLOC: "GPU-A,NVIDIA,garbage"}
    broken["spec"].update(schedulerName=DEFAULT_SCHEDULER_NAME, nodeName="node-1")
    store.add_pod(broken)
    out = Admission(manager(), store).review(
        pod("new", container(gpu=1, gpumem=10), namespace="team")
    )
    assert not out.allowed and out.reason == "ResourceQuotaNotFit"
    assert "used unknown (a pod's allocation is unreadable)" in out.message
    store.set_pod_phase("team", "old", "Succeeded")  # once it ends, the quota opens again
    assert (
        Admission(manager(), store)
        .review(pod("new", container(gpu=1, gpumem=10), namespace="team"))
        .allowed
    )
