"""Quota counts only pods our scheduler placed (issue #12 item 2; PROTOCOL.md §6-8).

The same rule as device usage (``usage.pod_holdings``): a pod of another scheduler, or a
pod that asks for no device of the vendor, that carries a forged ``-allocated`` list
neither consumes nor frees its namespace's quota; a pod we placed whose list is missing or
unreadable keeps the quota closed while it lives. Checked through every reader: the
webhook's admission, the scheduler's filter (incremental state and from scratch) and the
from-scratch function itself.
"""

import pytest

from hami_core.facts.quota import (
    MEMORY,
    UNREADABLE_CHARGE,
    QuotaCharge,
    namespace_usage,
    pod_quota_charge,
)
from hami_core.model import Charge
from hami_core.protocol.config import DEFAULT_SCHEDULER_NAME
from hami_core.scheduling.scheduler import Scheduler
from hami_core.webhook import Admission
from tests.builders import cluster, container, gpu, manager, node, pod

ALLOC = "hami.io/vgpu-devices-allocated"
NS = "team"
TYPES = manager().device_types()


def _placed(name, *containers, alloc, scheduler=DEFAULT_SCHEDULER_NAME, node_name="n1", **kw):
    p = pod(name, *containers, namespace=NS, annotations={ALLOC: alloc} if alloc else None, **kw)
    p["metadata"]["uid"] = f"uid-{name}"
    p["spec"]["schedulerName"] = scheduler
    if node_name:
        p["spec"]["nodeName"] = node_name
    p["status"] = {"phase": "Running"}
    return p


def _usage(*pods):
    return namespace_usage(pods, TYPES, scheduler_name=DEFAULT_SCHEDULER_NAME)


def test_a_pod_we_placed_is_charged():
    p = _placed("ok", container(gpu=1, gpumem=6000), alloc="GPU-1,NVIDIA,6000,20:;")
    assert _usage(p) == QuotaCharge({"NVIDIA": Charge(memory_mib=6000, cores_pct=20, count=1)})


def test_bind_in_flight_is_charged():
    p = _placed(
        "flight", container(gpu=1, gpumem=6000), alloc="GPU-1,NVIDIA,6000,0:;", node_name=""
    )
    assert _usage(p) == QuotaCharge()  # no placement of ours visible yet
    p["metadata"]["annotations"]["hami.io/vgpu-node"] = "n1"
    assert _usage(p).of("NVIDIA", MEMORY) == 6000


@pytest.mark.parametrize(
    "forged",
    [
        # another scheduler's pod (its own nodeName preset) with a valid-looking list
        _placed(
            "other",
            container(gpu=1, gpumem=9000),
            alloc="GPU-1,NVIDIA,9000,0:;",
            scheduler="default-scheduler",
        ),
        # ... with an unreadable list: must not fill the quota either
        _placed("other-garbage", container(gpu=1), alloc="garbage", scheduler="my-scheduler"),
        # a pod never placed (no nodeName, no hami.io/vgpu-node)
        _placed(
            "pending", container(gpu=1, gpumem=9000), alloc="GPU-1,NVIDIA,9000,0:;", node_name=""
        ),
        # a pod of ours that asks for no GPU
        _placed("no-gpu", container(), alloc="GPU-1,NVIDIA,9000,100:;"),
        _placed("no-gpu-garbage", container(), alloc="garbage"),
    ],
    ids=lambda p: p["metadata"]["name"],
)
def test_a_forged_allocation_consumes_no_quota(forged):
    assert _usage(forged) == QuotaCharge()


def test_unknown_requests_count_what_is_carried():
    # requested_vendors=None (a quantity that cannot be parsed): fail closed on what it carries
    p = _placed("odd", container(), alloc="GPU-1,NVIDIA,9000,100:;")
    got = pod_quota_charge(p, TYPES, scheduler_name=DEFAULT_SCHEDULER_NAME, requested_vendors=None)
    assert got.of("NVIDIA", MEMORY) == 9000


@pytest.mark.parametrize("alloc", ["garbage", None], ids=["rewritten", "deleted"])
def test_a_pod_we_placed_never_frees_quota_by_rewriting_its_allocation(alloc):
    p = _placed("mine", container(gpu=1, gpumem=6000), alloc=alloc)
    assert _usage(p).of("NVIDIA", MEMORY) == UNREADABLE_CHARGE


def _quota(store, hard="10000"):
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": NS},
            "spec": {"hard": {"limits.nvidia.com/gpumem": hard}},
        }
    )


def test_webhook_quota_ignores_another_schedulers_forged_pod():
    store = cluster(node("n1", [gpu("GPU-1")]))
    _quota(store)
    store.add_pod(
        _placed(
            "squat",
            container(gpu=1, gpumem=10000),
            alloc="GPU-1,NVIDIA,10000,0:;",
            scheduler="default-scheduler",
        )
    )
    out = Admission(manager(), store).review(
        pod("new", container(gpu=1, gpumem=4000), namespace=NS)
    )
    assert out.allowed, out.message
    # the same pod placed by us is charged
    store.add_pod(_placed("real", container(gpu=1, gpumem=8000), alloc="GPU-1,NVIDIA,8000,0:;"))
    out = Admission(manager(), store).review(
        pod("new", container(gpu=1, gpumem=4000), namespace=NS)
    )
    assert not out.allowed and "used 8000, this pod 4000" in out.message


def test_filter_quota_ignores_forged_pods_and_agrees_with_the_from_scratch_sum():
    store = cluster(node("n1", [gpu("GPU-1", memory_mib=40000)]))
    _quota(store, hard="12000")
    sched = Scheduler(store, manager())
    forged = [
        _placed(
            "other",
            container(gpu=1, gpumem=12000),
            alloc="GPU-1,NVIDIA,12000,0:;",
            scheduler="default-scheduler",
        ),
        _placed("nogpu", container(), alloc="GPU-1,NVIDIA,12000,0:;"),
        _placed("garbage-other", container(gpu=1), alloc="x", scheduler="default-scheduler"),
    ]
    for p in forged:
        store.add_pod(p)
    real = _placed("real", container(gpu=1, gpumem=5000), alloc="GPU-1,NVIDIA,5000,0:;")
    store.add_pod(real)
    assert (
        sched.state.namespace_usage(NS)
        == QuotaCharge({"NVIDIA": Charge(memory_mib=5000, cores_pct=0, count=1)})
        == _usage(*forged, real)
    )
    fits = pod("fits", container(gpu=1, gpumem=7000), namespace=NS)
    fits["spec"]["schedulerName"] = DEFAULT_SCHEDULER_NAME
    over = pod("over", container(gpu=1, gpumem=7001), namespace=NS)
    over["spec"]["schedulerName"] = DEFAULT_SCHEDULER_NAME
    assert sched.filter(fits, ["n1"]).feasible == ("n1",)
    result = sched.filter(over, ["n1"])
    assert result.feasible == () and "ResourceQuotaNotFit" in result.failed["n1"]
