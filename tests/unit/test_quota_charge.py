"""Quota decided once (issue 25 item 2): one charge type and one function computing a
pod's charge, for the webhook (from the requests), the filter (from the allocation fitted)
and the pods that hold quota (from their ``-allocated`` lists).

The tenant who writes a sidecar beside an init container cannot be charged less at
admission than at fit: both go through ``quota.pod_charge``.
"""

import pytest

from hami_core.facts import quota
from hami_core.facts.quota import (
    CORES,
    COUNT,
    MEMORY,
    NO_CHARGE,
    QuotaCharge,
    QuotaLimit,
    QuotaView,
    allocation_charge,
    pod_charge,
)
from hami_core.model import Charge, ContainerDevice
from hami_core.protocol.config import DEFAULT_SCHEDULER_NAME
from hami_core.scheduling.scheduler import Scheduler
from hami_core.webhook import Admission
from tests.builders import cluster, container, gpu, manager, node, pod

NS = "team"


def test_a_charge_is_one_value_per_vendor_and_zero_vendors_drop_out():
    a = QuotaCharge({"NVIDIA": Charge(6000, 20, 1), "MLU": Charge()})
    assert a.by_vendor == {"NVIDIA": Charge(6000, 20, 1)}
    assert (a.of("NVIDIA", MEMORY), a.of("NVIDIA", CORES), a.of("NVIDIA", COUNT)) == (6000, 20, 1)
    assert a.of("MLU", MEMORY) == 0
    b = QuotaCharge({"NVIDIA": Charge(1000, 0, 1), "MLU": Charge(256, 0, 1)})
    both = a.plus(b)
    assert both == QuotaCharge({"NVIDIA": Charge(7000, 20, 2), "MLU": Charge(256, 0, 1)})
    assert both.minus(b) == a and both.minus(b).minus(a) == NO_CHARGE
    assert not NO_CHARGE and a


def test_the_view_names_the_quota_and_the_amounts():
    limit = QuotaLimit(
        quota="q", key="limits.nvidia.com/gpumem", vendor="NVIDIA", measure=MEMORY, hard=10000
    )
    view = QuotaView((limit,), QuotaCharge({"NVIDIA": Charge(8000, 0, 1)}))
    assert view.violation(QuotaCharge({"NVIDIA": Charge(2000, 0, 1)})) is None
    assert (
        view.violation(QuotaCharge({"NVIDIA": Charge(2001, 0, 1)}))
        == "quota q: limits.nvidia.com/gpumem 10000, used 8000, this pod 2001"
    )
    assert view.violation(QuotaCharge({"MLU": Charge(99999, 0, 9)})) is None  # not limited
    assert not QuotaView() and view


def _sidecar(name, **res):
    c = container(name, **res)
    c["restartPolicy"] = "Always"
    return c


def _tenant_pod():
    """A sidecar (4000 MiB) runs beside the init container (6000) and later beside the
    app (3000): the pod holds max(4000 + 6000, 4000 + 3000) = 10000 MiB."""
    p = pod(
        "p",
        container("app", gpu=1, gpumem=3000),
        init=[_sidecar("side", gpu=1, gpumem=4000), container("init", gpu=1, gpumem=6000)],
        namespace=NS,
    )
    p["metadata"]["uid"] = "uid-p"
    p["spec"]["schedulerName"] = DEFAULT_SCHEDULER_NAME
    return p


def test_the_allocation_charge_is_the_init_container_rule():
    def one(mib):
        return (ContainerDevice(uuid="GPU-1", vendor="NVIDIA", memory_mib=mib, cores_pct=10),)

    devices = {"NVIDIA": (one(4000), one(6000), one(3000))}
    got = allocation_charge(_tenant_pod(), devices, manager().device_type)
    assert got == QuotaCharge({"NVIDIA": Charge(10000, 20, 2)})
    # the same rule from per-container charges, as the webhook gives them
    assert got == pod_charge(
        [
            (False, {"NVIDIA": Charge(4000, 10, 1)}),
            (True, {"NVIDIA": Charge(6000, 10, 1)}),
            (False, {"NVIDIA": Charge(3000, 10, 1)}),
        ]
    )


@pytest.mark.parametrize(("hard", "admitted"), [(10000, True), (9999, False)])
def test_the_webhook_and_the_filter_charge_the_tenant_alike(hard, admitted):
    store = cluster(node("n1", [gpu("GPU-1", memory_mib=40000), gpu("GPU-2", memory_mib=40000)]))
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": NS},
            "spec": {"hard": {"limits.nvidia.com/gpumem": str(hard)}},
        }
    )
    p = _tenant_pod()
    out = Admission(manager(), store).review(p)
    assert out.allowed is admitted, out.message
    result = Scheduler(store, manager()).filter(p, ["n1"])
    assert (result.feasible == ("n1",)) is admitted, result.failed
    if not admitted:
        assert "this pod 10000" in out.message and "this pod 10000" in result.failed["n1"]


def test_fitting_knows_no_quota():
    """The fit driver places devices; quota is the filter's stage (the dead
    ``fit_pod(quota_limits=...)`` path is gone, and with it ``fitting -> quota``)."""
    from hami_core.scheduling import fitting

    assert not [
        n for n, v in vars(fitting).items() if getattr(v, "__module__", "") == quota.__name__
    ]
    assert not hasattr(quota, "charge_of")
