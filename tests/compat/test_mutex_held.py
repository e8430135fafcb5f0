"""A device a ``mutex`` pod holds takes no other pod until it leaves (issue 24 item 4).

HAMi#3038 (maintainers agreed): HAMi 2.10's ``mutex`` only kept the mutex pod off busy
devices; a later pod of any other policy could still join a device a mutex pod held.
Here the state is kept per device (``DeviceUsage.holders``: the policy each holder was
placed under, its annotation or the configured default) and the fit driver refuses such
a device to every pod, of every vendor, with ``ExclusiveDeviceAllocateConflict``.
"""

import pytest

from hami_core.model import (
    ContainerRequest,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
    PodRequest,
)
from hami_core.plugin import BackendManager
from hami_core.scheduling.fitting import fit_pod_nodes
from hami_core.simulate.report import build_report
from tests.builders import container, gpu, node, pipeline, pod
from tests.simulate.helpers import gpu_pod, run
from tests.skips import not_applicable

POLICY = "hami.io/gpu-scheduler-policy"
NEEDS_VENDOR_FACTS = {"AWSNeuron", "Ascend910C", "Enflame"}
MUTEX = {POLICY: "mutex"}


def _placed_on(p, name, namespace="default"):
    meta = p.cluster.get_pod(namespace, name)["metadata"]["annotations"]
    return meta["hami.io/vgpu-devices-allocated"].split(",", 1)[0]


def test_a_later_pod_of_any_policy_cannot_join_a_mutex_held_gpu():
    p = pipeline(node("node-1", [gpu("GPU-A", memory_mib=16384)]))
    assert p.submit(pod("m", container(gpu=1, gpumem=2000), annotations=MUTEX)).scheduled
    for policy in (None, "binpack", "spread", "topology-aware", "numa", "binpack,spread"):
        ann = {POLICY: policy} if policy else None
        out = p.submit(
            pod(
                f"later-{(policy or 'none').replace(',', '-')}",
                container(gpu=1, gpumem=1000),
                annotations=ann,
            )
        )
        assert not out.scheduled, policy
        assert "1/1 ExclusiveDeviceAllocateConflict" in out.filter.failed["node-1"], policy


def test_a_tenant_naming_the_mutex_gpu_by_uuid_is_refused():
    p = pipeline(node("node-1", [gpu("GPU-A", memory_mib=16384), gpu("GPU-B", memory_mib=16384)]))
    assert p.submit(pod("m", container(gpu=1, gpumem=2000), annotations=MUTEX)).scheduled
    held = _placed_on(p, "m")
    sneak = pod(
        "sneak",
        container(gpu=1, gpumem=1000),
        annotations={POLICY: "binpack", "nvidia.com/use-gpuuuid": held},
    )
    out = p.submit(sneak)
    assert not out.scheduled
    assert "ExclusiveDeviceAllocateConflict" in out.filter.failed["node-1"]


def test_binpack_goes_to_the_other_gpu_and_the_held_one_frees_when_the_mutex_pod_leaves():
    p = pipeline(node("node-1", [gpu("GPU-A", memory_mib=16384), gpu("GPU-B", memory_mib=16384)]))
    assert p.submit(pod("m", container(gpu=1, gpumem=2000), annotations=MUTEX)).scheduled
    held = _placed_on(p, "m")
    packed = pod("packed", container(gpu=1, gpumem=1000), annotations={POLICY: "binpack"})
    assert p.submit(packed).scheduled
    assert _placed_on(p, "packed") != held  # binpack alone would pick the used GPU
    # two GPUs asked while one is held: no fit
    assert not p.submit(pod("two", container(gpu=2, gpumem=1000))).scheduled
    p.cluster.delete_pod("default", "m")
    assert p.submit(pod("two-again", container(gpu=2, gpumem=1000))).scheduled


def test_a_finished_mutex_pod_holds_nothing():
    p = pipeline(node("node-1", [gpu("GPU-A", memory_mib=16384)]))
    assert p.submit(pod("m", container(gpu=1, gpumem=2000), annotations=MUTEX)).scheduled
    p.cluster.set_pod_phase("default", "m", "Succeeded")
    assert p.submit(pod("after", container(gpu=1, gpumem=1000))).scheduled


def test_a_mutex_pod_cannot_take_a_gpu_already_shared():
    p = pipeline(node("node-1", [gpu("GPU-A", memory_mib=16384)]))
    assert p.submit(pod("plain", container(gpu=1, gpumem=1000))).scheduled
    out = p.submit(pod("m", container(gpu=1, gpumem=1000), annotations=MUTEX))
    assert not out.scheduled
    assert "1/1 ExclusiveDeviceAllocateConflict" in out.filter.failed["node-1"]


def test_a_configured_default_mutex_holds_for_pods_that_name_no_policy():
    p = pipeline(
        node("node-1", [gpu("GPU-A", memory_mib=16384)]),
        config={"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "mutex"}},
    )
    assert p.submit(pod("first", container(gpu=1, gpumem=1000))).scheduled
    out = p.submit(pod("second", container(gpu=1, gpumem=1000), annotations={POLICY: "binpack"}))
    assert not out.scheduled


def test_a_placed_pod_cannot_change_its_policy_to_lock_a_shared_gpu():
    """A tenant sharing a GPU writes ``mutex`` after placement to keep every later pod
    off the GPU: the policy a placed pod holds its devices under is fixed."""
    placed = pod("p", container(gpu=1, gpumem=1000), annotations={POLICY: "binpack"})
    placed["spec"]["nodeName"] = "node-1"
    placed["metadata"]["annotations"]["hami.io/vgpu-node"] = "node-1"
    locked = {
        **placed,
        "metadata": {
            **placed["metadata"],
            "annotations": {**placed["metadata"]["annotations"], POLICY: "mutex"},
        },
    }
    from hami_core.webhook.admission import Admission
    from tests.builders import manager

    admission = Admission(manager())
    denied = admission.review_update(placed, locked, user="tenant")
    assert not denied.allowed and POLICY in denied.message
    dropped = {
        **placed,
        "metadata": {**placed["metadata"], "annotations": {"hami.io/vgpu-node": "node-1"}},
    }
    assert not admission.review_update(placed, dropped, user="tenant").allowed
    # before placement the author may still change it
    pending = pod("q", container(gpu=1, gpumem=1000), annotations={POLICY: "binpack"})
    changed = {**pending, "metadata": {**pending["metadata"], "annotations": {POLICY: "mutex"}}}
    assert admission.review_update(pending, changed, user="tenant").allowed


def test_simulate_keeps_a_later_pod_off_a_mutex_held_gpu():
    from tests.compat.test_whatif import _node

    first = gpu_pod("first", annotations=MUTEX, gpu=1, gpumem=1000)
    later = gpu_pod("later", gpu=1, gpumem=1000)
    report = build_report(run([_node("n1")], [first, later]))["pods"]
    assert [r["status"] for r in report] == ["placed", "unschedulable"]


def _vendors():
    m = BackendManager.from_entry_points(disabled=[])
    return m, sorted({t.vendor for t in m.device_types()})


@pytest.mark.parametrize("vendor", _vendors()[1])
def test_every_vendor_refuses_a_mutex_held_device(vendor):
    """Through the fit driver every backend goes through: the same device, free, takes
    the request (else the vendor needs facts this generic device lacks and is skipped);
    held by a mutex pod, it does not, whatever the vendor's own fit says."""
    m, _ = _vendors()
    dev = DeviceInfo(
        uuid="dev-0",
        vendor=vendor,
        model=vendor,
        index=0,
        split_count=10,
        memory_mib=16384,
        cores_pct=100,
    )
    info = NodeInfo(name="n", devices=(dev,))
    req = PodRequest(
        namespace="d",
        name="p",
        uid="u",
        containers=(
            ContainerRequest(
                name="c",
                init=False,
                devices=(DeviceRequest(vendor=vendor, count=1, memory_mib=64, cores_pct=10),),
            ),
        ),
    )
    plain = {"metadata": {"name": "p", "namespace": "d", "annotations": {}}}

    def fit(usage):
        (got,) = fit_pod_nodes(
            plain, req, [(info, {dev.uuid: usage})], m, policy=DevicePolicy.BINPACK
        )
        return got

    free = fit(DeviceUsage(device=dev))
    if not free.fits:
        # vendors whose fit needs facts a generic device lacks (core counts, a profile
        # table, a chip template); the driver's check is the same code for them
        assert vendor in NEEDS_VENDOR_FACTS, free.reason
        not_applicable(
            f"{vendor}: a generic device does not take a generic request ({free.reason})"
        )
    shared = fit(DeviceUsage(device=dev, used_count=1, used_memory_mib=64, holders=({},)))
    assert shared.fits  # another pod's share alone does not refuse it
    held = fit(DeviceUsage(device=dev, used_count=1, used_memory_mib=64, holders=(MUTEX,)))
    assert not held.fits
    assert held.reason == "1/1 ExclusiveDeviceAllocateConflict"
