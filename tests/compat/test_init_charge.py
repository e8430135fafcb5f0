"""Finished init containers are no longer charged (issue item 1, PROTOCOL.md §1).

HAMi 2.10 shrinks a pod to its app containers once every init container terminated with
exit code 0: device usage, time-slice count and namespace quota alike.
"""

import pytest

from hami_core.model import (
    Charge,
    ContainerDevice,
    collapse,
    device_charges,
    init_containers_finished,
    vendor_charge,
)
from tests.builders import container, gpu, node, pipeline, pod
from tests.unit.test_admission import review

ONE_GPU = node("node-1", [gpu("GPU-A")])


def _dev(uuid, mem, cores, vendor="NVIDIA"):
    return ContainerDevice(uuid=uuid, vendor=vendor, memory_mib=mem, cores_pct=cores)


def _terminated(name, code=0):
    return {"name": name, "state": {"terminated": {"exitCode": code}}}


def _init_pod(*, statuses=None, inits=("init",)):
    p = pod("p", container("app"), init=[container(n) for n in inits])
    if statuses is not None:
        p["status"] = {"phase": "Running", "initContainerStatuses": statuses}
    return p


def test_hami_shrink_values_init_20000_10_app_10000_5():
    """HAMi ``pkg/scheduler/scheduler_test.go::Test_onUpdatePod_InitContainerShrink``:
    init 20000 MiB / 10 cores, app 10000 / 5 on GPU0: 20000 / 10 while the init container
    may run, 10000 / 5 once it terminated with exit code 0."""
    devices = (((_dev("GPU0", 20000, 10)),), ((_dev("GPU0", 10000, 5)),))
    before = _init_pod()
    after = _init_pod(statuses=[_terminated("init")])
    assert device_charges(before, devices) == {"GPU0": Charge(20000, 10, 1)}
    assert device_charges(after, devices) == {"GPU0": Charge(10000, 5, 1)}
    assert vendor_charge(after, devices) == Charge(10000, 5, 1)


def test_hami_peak_not_sum_and_slots():
    """HAMi ``pkg/device/initContainer_test.go``: ``MultipleInitContainersPeak`` (the peak
    of the init containers), ``AppLargerThanInit`` (apps win when larger) and
    ``MultiAppSameGPUSlots`` (two app containers on one GPU take two slots)."""
    p = _init_pod(inits=("i1", "i2"))
    devices = (
        (_dev("GPU0", 3000, 10),),
        (_dev("GPU0", 5000, 5),),
        (_dev("GPU0", 2000, 20),),
        (_dev("GPU0", 2000, 20),),
    )
    assert device_charges(p, devices) == {"GPU0": Charge(5000, 40, 2)}
    done = _init_pod(inits=("i1", "i2"), statuses=[_terminated("i1"), _terminated("i2")])
    assert device_charges(done, devices) == {"GPU0": Charge(4000, 40, 2)}


def test_a_device_only_an_init_container_held_is_freed():
    p = _init_pod(statuses=[_terminated("init")])
    devices = ((_dev("GPU-I", 8000, 30),), (_dev("GPU-A", 1000, 0),))
    assert device_charges(p, devices) == {"GPU-A": Charge(1000, 0, 1)}
    assert collapse([(True, {"x": Charge(1, 1, 1)})], init_finished=True) == {}


@pytest.mark.parametrize(
    ("statuses", "inits"),
    [
        (None, ("init",)),  # no status yet
        ([], ("init",)),
        ([_terminated("init", 1)], ("init",)),  # failed, being restarted
        ([{"name": "init", "state": {"running": {}}}], ("init",)),
        ([{"name": "init", "state": {"terminated": {"exitCode": "0"}}}], ("init",)),
        ([_terminated("a")], ("a", "b")),  # only one of two reported
        ([_terminated("other")], ("init",)),  # a status for a container not in the spec
        (["garbage"], ("init",)),
        ([_terminated("a"), _terminated("b", 137)], ("a", "b")),
    ],
)
def test_init_containers_not_finished(statuses, inits):
    """Anything short of every spec'd init container terminated with exit code 0 keeps the
    peak (the conservative answer; a wrong "finished" would overbook a GPU)."""
    assert not init_containers_finished(_init_pod(statuses=statuses, inits=inits))


def test_no_init_containers_is_not_a_finished_state():
    p = pod("p", container("app"))
    p["status"] = {"initContainerStatuses": []}
    assert not init_containers_finished(p)


def _submit_init_pod(p, *, init_mem=10000, app_mem=4000, namespace="default"):
    out = p.submit(
        pod(
            "big-init",
            container("app", gpu=1, gpumem=app_mem),
            init=[container("init", gpu=1, gpumem=init_mem)],
            namespace=namespace,
        )
    )
    assert out.scheduled
    return out


def _usage(p):
    sched = p.scheduler
    return sched.node_usage(sched.node_info(p.cluster.get_node("node-1")))["GPU-A"]


def test_usage_and_time_slices_drop_once_init_finished():
    p = pipeline(ONE_GPU)
    _submit_init_pod(p)
    assert (_usage(p).used_memory_mib, _usage(p).used_count) == (10000, 1)
    assert not p.submit(pod("q", container(gpu=1, gpumem=8000))).scheduled
    p.cluster.set_pod_status(
        "default", "big-init", {"phase": "Running", "initContainerStatuses": [_terminated("init")]}
    )
    assert (_usage(p).used_memory_mib, _usage(p).used_count) == (4000, 1)
    assert p.submit(pod("q2", container(gpu=1, gpumem=8000))).scheduled


def test_time_slice_of_an_init_only_device_is_released():
    """An init container on the GPU and an app without devices: once the init container
    is done the pod holds no slice at all (split count 1 makes the slice visible)."""
    p = pipeline(node("node-1", [gpu("GPU-A", split=1)]))
    assert p.submit(
        pod("i", container("app"), init=[container("init", gpu=1, gpumem=1000)])
    ).scheduled
    assert _usage(p).used_count == 1
    assert not p.submit(pod("q", container(gpu=1, gpumem=1000))).scheduled
    p.cluster.set_pod_status("default", "i", {"initContainerStatuses": [_terminated("init")]})
    assert _usage(p).used_count == 0
    assert p.submit(pod("q2", container(gpu=1, gpumem=1000))).scheduled


def test_quota_drops_to_the_apps_once_init_finished():
    """A pod that fits the namespace quota once the other pod's init container finished
    is admitted by the webhook and placed by the scheduler (quota 12000 MiB)."""
    p = pipeline(ONE_GPU)
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "12000"}},
        }
    )
    _submit_init_pod(p, namespace="team")
    second = pod("second", container(gpu=1, gpumem=6000), namespace="team")
    denied = review(second, store=p.cluster)
    assert not denied.allowed and "used 10000, this pod 6000" in denied.message
    assert not p.submit(second).scheduled
    p.cluster.set_pod_status("team", "big-init", {"initContainerStatuses": [_terminated("init")]})
    assert review(second, store=p.cluster).allowed
    assert p.submit(pod("second2", container(gpu=1, gpumem=6000), namespace="team")).scheduled


def test_a_failed_init_container_keeps_the_charge():
    p = pipeline(ONE_GPU)
    _submit_init_pod(p)
    p.cluster.set_pod_status(
        "default", "big-init", {"initContainerStatuses": [_terminated("init", 2)]}
    )
    assert _usage(p).used_memory_mib == 10000
