"""Kubernetes' own rule for a pod with native sidecars, for every resource (issue 24 item 3).

KEP-753 (``restartPolicy: Always`` on an init container; kube-scheduler's
``resourcehelper.PodRequests``): a sidecar runs from its start for the pod's whole life,
so it adds to the app containers and to every init container started after it; a plain
init container still runs alone apart from the sidecars declared before it:

    pod = max(apps + all sidecars, max over init i of (init_i + sidecars declared before i))

Before, every init container after the first sidecar was charged as a permanent app
container. The same function gives device usage, the time-slice count, the namespace
quota (webhook and scheduler), the fit and ``hami simulate`` (devices, CPU, memory).
"""

from decimal import Decimal

import pytest

from hami_core.model import (
    Charge,
    ContainerDevice,
    device_charges,
    init_containers_finished,
    is_sidecar,
    vendor_charge,
)
from hami_core.protocol.pods import containers
from hami_core.simulate.kubechecks import pod_requests
from hami_core.simulate.report import build_report, whole_card_gpus
from tests.builders import container, gpu, node, pipeline, pod
from tests.simulate.helpers import run
from tests.unit.test_admission import review

ONE_GPU = node("node-1", [gpu("GPU-A", memory_mib=16384)])


def _sidecar(name="side", policy="Always", **res):
    c = container(name, **res)
    c["restartPolicy"] = policy
    return c


def _on_a(*mems):
    """One device-list entry per container, each on GPU-A with ``mem`` MiB (None: none)."""
    return tuple(
        ()
        if m is None
        else (ContainerDevice(uuid="GPU-A", vendor="NVIDIA", memory_mib=m, cores_pct=0),)
        for m in mems
    )


def _terminated(name):
    return {"name": name, "state": {"terminated": {"exitCode": 0}}}


def _running(name):
    return {"name": name, "state": {"running": {}}}


def test_only_restart_policy_always_makes_a_sidecar():
    """kubelet's ``IsRestartableInitContainer`` compares with ``Always`` exactly."""
    assert is_sidecar({"restartPolicy": "Always"})
    for bogus in ("always", "OnFailure", "Never", " Always", None, 1, ["Always"]):
        assert not is_sidecar({"restartPolicy": bogus})
    assert not is_sidecar("garbage")


def test_an_init_container_after_a_sidecar_runs_beside_it_not_beside_the_apps():
    p = pod(
        "p",
        container("app", gpu=1, gpumem=2000),
        init=[_sidecar(gpu=1, gpumem=8000), container("late", gpu=1, gpumem=10000)],
    )
    # wire order and kind: the init container after the sidecar is still an init container
    assert [(c["name"], init) for c, init, _ in containers(p)] == [
        ("side", False),
        ("late", True),
        ("app", False),
    ]
    devs = _on_a(8000, 10000, 2000)
    # max(late 10000 + side 8000, app 2000 + side 8000); two slices at once at most
    assert device_charges(p, devs) == {"GPU-A": Charge(18000, 0, 2)}
    assert vendor_charge(p, devs) == Charge(18000, 0, 2)
    # once "late" has terminated with exit code 0 the pod holds the sidecar and the app
    p["status"] = {"initContainerStatuses": [_running("side"), _terminated("late")]}
    assert init_containers_finished(p)
    assert device_charges(p, devs) == {"GPU-A": Charge(10000, 0, 2)}


def test_a_running_sidecar_status_does_not_hide_an_unfinished_init_container():
    p = pod("p", container("app"), init=[_sidecar(), container("late")])
    p["status"] = {"initContainerStatuses": [_terminated("side")]}
    assert not init_containers_finished(p)  # "late" has no status: still charged
    p["status"] = {"initContainerStatuses": [_running("side"), _running("late")]}
    assert not init_containers_finished(p)


def test_an_init_container_before_a_sidecar_runs_alone():
    p = pod(
        "p",
        container("app", gpu=1, gpumem=2000),
        init=[container("early", gpu=1, gpumem=14000), _sidecar(gpu=1, gpumem=2000)],
    )
    assert device_charges(p, _on_a(14000, 2000, 2000)) == {"GPU-A": Charge(14000, 0, 2)}


def test_several_sidecars_each_init_container_counts_those_before_it():
    p = pod(
        "p",
        container("app", gpu=1, gpumem=2000),
        init=[
            _sidecar("s1", gpu=1, gpumem=4000),
            container("i1", gpu=1, gpumem=6000),
            _sidecar("s2", gpu=1, gpumem=4000),
            container("i2", gpu=1, gpumem=6000),
        ],
    )
    # i1 + s1 = 10000; i2 + s1 + s2 = 14000; app + s1 + s2 = 10000; 3 slices at once
    assert device_charges(p, _on_a(4000, 6000, 4000, 6000, 2000)) == {"GPU-A": Charge(14000, 0, 3)}


def test_fit_places_an_init_container_beside_the_sidecars_before_it_only():
    """16384 MiB GPU: side 6000 + late 10000 = 16000 run at once and fit (before, late was
    an app container and 22000 did not); side 8000 + late 10000 = 18000 must not fit."""
    p = pipeline(ONE_GPU)
    fits = pod(
        "fits",
        container("app", gpu=1, gpumem=6000),
        init=[_sidecar(gpu=1, gpumem=6000), container("late", gpu=1, gpumem=10000)],
    )
    assert p.submit(fits).scheduled
    sched = p.scheduler
    usage = sched.node_usage(sched.node_info(p.cluster.get_node("node-1")))["GPU-A"]
    assert (usage.used_memory_mib, usage.used_count) == (16000, 2)


def test_a_tenant_cannot_run_an_init_container_beside_a_sidecar_uncharged():
    p = pipeline(ONE_GPU)
    abuser = pod(
        "abuser",
        container("app", gpu=1, gpumem=1000),
        init=[_sidecar(gpu=1, gpumem=8000), container("late", gpu=1, gpumem=10000)],
    )
    assert not p.submit(abuser).scheduled


def test_a_bogus_restart_policy_on_an_init_container_is_denied():
    """A value kubelet would not honour (it compares with ``Always``) is refused with its
    name, so the charge can never be read differently from how kubelet runs the pod."""
    abuser = pod(
        "abuser",
        container("app", gpu=1, gpumem=1000),
        init=[
            container("big", gpu=1, gpumem=14000),
            _sidecar(gpu=1, gpumem=8000, policy="always"),
        ],
    )
    denied = review(abuser)
    assert not denied.allowed
    assert "initContainers[1]" in denied.message and "'always'" in denied.message


def test_a_big_init_container_before_a_sidecar_is_never_undercharged():
    """A tenant declares the big init container before the sidecar, hoping it is forgotten
    once the sidecar starts: while the pod may still run it, it holds the peak."""
    p = pipeline(ONE_GPU)
    first = pod(
        "first",
        container("app", gpu=1, gpumem=1000),
        init=[container("big", gpu=1, gpumem=14000), _sidecar(gpu=1, gpumem=1000)],
    )
    assert p.submit(first).scheduled
    second = pod("second", container("app", gpu=1, gpumem=4000))
    assert not p.submit(second).scheduled  # 14000 + 4000 > 16384


def test_the_namespace_quota_uses_the_same_rule():
    p = pipeline(ONE_GPU)
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "17000"}},
        }
    )
    over = pod(
        "over",
        container("app", gpu=1, gpumem=1000),
        init=[_sidecar(gpu=1, gpumem=8000), container("late", gpu=1, gpumem=10000)],
        namespace="team",
    )
    denied = review(over, store=p.cluster)
    assert not denied.allowed and "this pod 18000" in denied.message
    under = pod(
        "under",
        container("app", gpu=1, gpumem=1000),
        init=[_sidecar(gpu=1, gpumem=6000), container("late", gpu=1, gpumem=10000)],
        namespace="team",
    )
    assert review(under, store=p.cluster).allowed  # 16000, was charged 17000 as apps


@pytest.mark.parametrize(
    ("inits", "apps", "want"),
    [
        ([("s", "2", True), ("i", "3", False)], ["1"], Decimal(5)),
        ([("i", "3", False), ("s", "2", True)], ["1"], Decimal(3)),
        ([("s1", "1", True), ("i1", "3", False), ("s2", "1", True), ("i2", "3", False)], ["1"], 5),
    ],
)
def test_simulate_cpu_follows_the_same_rule(inits, apps, want):
    def cpu(name, value, side=False):
        c = {"name": name, "resources": {"requests": {"cpu": value, "memory": value + "Gi"}}}
        if side:
            c["restartPolicy"] = "Always"
        return c

    p = {
        "spec": {
            "initContainers": [cpu(n, v, s) for n, v, s in inits],
            "containers": [cpu(f"a{i}", v) for i, v in enumerate(apps)],
        }
    }
    got = pod_requests(p)
    assert got["cpu"] == want and got["memory"] == want * 2**30


def test_simulate_whole_card_count_uses_the_same_rule():
    from hami_core.model import ContainerRequest, DeviceRequest, PodRequest

    def c(name, n, init):
        return ContainerRequest(
            name=name, init=init, devices=(DeviceRequest(vendor="NVIDIA", count=n, memory_pct=100),)
        )

    # side (app-like) 1, late init 2 beside it, app 1: max(1 + 2, 1 + 1) = 3 GPUs
    req = PodRequest(
        namespace="d", name="p", uid="", containers=(c("side", 1, False), c("late", 2, True))
    )
    req = PodRequest(
        namespace="d", name="p", uid="", containers=(*req.containers, c("a", 1, False))
    )
    assert whole_card_gpus(req) == 3


def test_simulate_places_a_pod_whose_init_container_follows_a_sidecar():
    """30000 (side) + 10000 (late) = 40000 fits a 40000 MiB GPU; before, late was charged
    beside the app as well and the pod was reported unschedulable."""
    from tests.compat.test_whatif import _node
    from tests.simulate.helpers import gpu_pod

    ok = gpu_pod("ok", gpu=1, gpumem=10000)
    ok["spec"]["initContainers"] = [
        _sidecar(gpu=1, gpumem=30000),
        container("late", gpu=1, gpumem=10000),
    ]
    report = build_report(run([_node("n1")], [ok]))["pods"][0]
    assert report["status"] == "placed", report
