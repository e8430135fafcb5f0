"""MetaX sGPU online / offline mixing and the per-pod topology-aware override.

Expected values from HAMi 2.10 ``pkg/device/metax/sdevice_test.go``: ``TestCheckAppClass``,
``TestPrioritizeOnlineDevices``, ``TestScoreOnlineDevices``, ``TestNeedScore``
(``topologyAwareEnable``). The kinds of pods on a GPU come from
``DeviceUsage.holders``, which the core fills from live pods our scheduler bound."""

import json
import math

import pytest
from hami_metax import fit

from hami_core.model import (
    ContainerDevice,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
    NodePolicy,
    ReasonCode,
)

from ..support import node, pipeline, pod

APP = "metax-tech.com/sgpu-app-class"
ON = {APP: "online"}
OFF = {APP: "offline"}
NONE: dict[str, str] = {}


def sdev(uuid, index=0):
    return DeviceInfo(
        uuid=uuid,
        vendor="Metax-SGPU",
        model="MXC500",
        index=index,
        split_count=16,
        memory_mib=65536,
        cores_pct=100,
    )


def used(uuid, holders, index=0):
    return DeviceUsage(
        device=sdev(uuid, index),
        used_count=len(holders),
        used_memory_mib=1024 * len(holders),
        holders=tuple(holders),
    )


@pytest.mark.parametrize(
    ("name", "req", "holders", "want"),
    [
        ("idle device fit", "online", [], True),
        ("normal task unfit online device", "", [ON], False),
        ("normal task unfit offline device", "", [OFF], False),
        ("normal task fit normal device", "", [NONE], True),
        ("online task unfit normal device", "online", [NONE], False),
        ("online task fit online/offline device", "online", [ON, OFF], True),
        ("offline task unfit online device", "offline", [ON, OFF], False),
    ],
)
def test_check_app_class_as_hami(name, req, holders, want):
    assert fit.app_class_fits(req, used("GPU-123", holders)) is want


PRIORITIZE = [
    (
        "prioritize idle device",
        [[], [ON], [ON, ON], [ON, OFF], [ON, ON, OFF], [OFF], [OFF, OFF]],
        "GPU-1",
    ),
    ("prioritize onlyOnline device", [[ON], [ON, ON], [ON, ON, ON, OFF], [OFF, OFF]], "GPU-1"),
    (
        "prioritize online&offline device",
        [[ON, ON, ON], [ON, OFF], [ON, ON, OFF], [OFF], [OFF, OFF]],
        "GPU-2",
    ),
    ("prioritize onlyOffline device", [[OFF], [OFF, OFF]], "GPU-1"),
]


@pytest.mark.parametrize(("name", "devices", "want"), PRIORITIZE)
def test_prioritize_online_devices_as_hami(name, devices, want):
    usage = [used(f"GPU-{i + 1}", h, index=i) for i, h in enumerate(devices)]
    (chosen,) = fit.choose_online(usage, 1, DevicePolicy.BINPACK)
    assert chosen.device.uuid == want
    # the same choice through the whole fit of an online pod (one sGPU, small memory)
    request = DeviceRequest(vendor="Metax-SGPU", count=1, memory_mib=1024, cores_pct=0)
    info = NodeInfo(name="n", devices=tuple(u.device for u in usage))
    out = fit.fit(request, info, usage, {"metadata": {"annotations": ON}}, DevicePolicy.BINPACK)
    assert [d.uuid for d in out.devices] == [want]


@pytest.mark.parametrize(
    ("holders", "want"),
    [([], 0), ([ON, ON], -40), ([OFF, OFF], -200), ([OFF, OFF, ON, ON], -44)],
)
def test_score_online_devices_as_hami(holders, want):
    usage = [used("GPU-123", holders)]
    taken = (ContainerDevice(uuid="GPU-123", vendor="Metax-SGPU", memory_mib=1, cores_pct=0),)
    assert fit.online_score(usage, taken) == want
    # as 0..100, in HAMi's order: idle 100, then -40, -44, -200
    got = fit.score(
        "Metax-SGPU",
        usage,
        taken,
        NodePolicy.SPREAD,
        pod={"metadata": {"annotations": ON}},
        topology_aware_default=False,
    )
    assert got == pytest.approx(200 / (1 + math.exp(-want / 50)))
    assert (got == 100) is (want == 0)


def slice_(cores):
    return ContainerDevice(uuid="a", vendor="Metax-SGPU", memory_mib=1, cores_pct=cores)


@pytest.mark.parametrize(
    ("containers", "value", "default", "want"),
    [
        # HAMi's TestNeedScore
        ([[100]], "true", False, True),
        ([[100]], "false", True, False),
        ([[99]], "true", True, False),
        ([[99], [100]], "true", False, True),
        # no or an unreadable override: the option
        ([[100]], None, True, True),
        ([[100]], None, False, False),
        ([[100]], "yes", True, True),
        ([[100]], "T", False, True),
    ],
)
def test_topology_aware_override_as_hami(containers, value, default, want):
    devices = tuple(slice_(c) for cs in containers for c in cs)
    ann = {} if value is None else {"metax-tech.com/sgpu-topology-aware": value}
    assert fit.topology_aware(default, {"metadata": {"annotations": ann}}, devices) is want


def test_override_switches_the_score_of_exclusive_sgpus():
    zones = [("a", 1), ("b", 1), ("c", 2), ("d", 3)]
    usage = [
        DeviceUsage(
            device=DeviceInfo(
                uuid=u,
                vendor="Metax-SGPU",
                model="m",
                index=i,
                split_count=16,
                memory_mib=65536,
                cores_pct=100,
                custom=(("linkZone", str(z)),),
            )
        )
        for i, (u, z) in enumerate(zones)
    ]
    apart = tuple(
        ContainerDevice(uuid=u, vendor="Metax-SGPU", memory_mib=65536, cores_pct=100)
        for u in ("c", "d")
    )

    def score(value, default):
        ann = {} if value is None else {"metax-tech.com/sgpu-topology-aware": value}
        return fit.score(
            "Metax-SGPU",
            usage,
            apart,
            NodePolicy.BINPACK,
            pod={"metadata": {"annotations": ann}},
            topology_aware_default=default,
        )

    linked_score = fit.exclusive_score(usage, apart)
    assert score("true", False) == linked_score
    assert score(None, True) == linked_score
    assert score("false", True) == score(None, False) != linked_score


def two_gpu_node():
    sdevices = [
        {
            "uuid": f"mx-sgpu-{i}",
            "model": "MXC500",
            "totalDevCount": 16,
            "totalCompute": 100,
            "totalVRam": 65536,
            "healthy": True,
        }
        for i in range(2)
    ]
    return node("mx", annotations={"metax-tech.com/node-gpu-devices": json.dumps(sdevices)})


def sgpu_pod(name, ann):
    return pod(
        name,
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "10"},
        annotations=ann,
    )


def gpu_of(p, name):
    ann = p.cluster.get_pod("default", name)["metadata"]["annotations"]
    return json.loads(ann["metax-tech.com/gpu-devices-allocated"])[0][0]["uuid"]


def test_pipeline_online_offline_and_normal_pods_do_not_mix():
    p = pipeline(two_gpu_node(), backends=("metax",))
    assert p.submit(sgpu_pod("online-1", ON)).node == "mx"
    on_gpu = gpu_of(p, "online-1")
    # a pod without app class never joins the online GPU
    assert p.submit(sgpu_pod("normal", {})).node == "mx"
    normal_gpu = gpu_of(p, "normal")
    assert normal_gpu != on_gpu
    # a second online pod joins the online GPU (a normal GPU refuses it)
    assert p.submit(sgpu_pod("online-2", ON)).node == "mx"
    assert gpu_of(p, "online-2") == on_gpu
    # an offline pod fits neither: the online GPU would suspend it, the other runs normal pods
    off = p.submit(sgpu_pod("offline", OFF))
    assert off.node is None and off.denied == ""
    assert off.filter is not None
    assert "2/2 CardAppClassMismatch" in off.filter.failed["mx"]


PIN = "metax-tech.com/use-gpuuuid"


def test_pipeline_online_pods_avoid_offline_only_gpus():
    p = pipeline(two_gpu_node(), backends=("metax",))
    for name in ("off-1", "off-2"):
        assert p.submit(sgpu_pod(name, {**OFF, PIN: "mx-sgpu-0"})).node == "mx"
    # an idle GPU beats one running only offline pods, whatever the node policy
    assert p.submit(sgpu_pod("on-1", ON)).node == "mx"
    assert gpu_of(p, "on-1") == "mx-sgpu-1"
    assert p.submit(sgpu_pod("off-3", {**OFF, PIN: "mx-sgpu-1"})).denied == ""
    assert p.cluster.get_pod("default", "off-3")["spec"].get("nodeName") is None
    # online + offline on 1 beats offline only on 0
    assert p.submit(sgpu_pod("on-2", ON)).node == "mx"
    assert gpu_of(p, "on-2") == "mx-sgpu-1"


def test_a_pod_of_another_scheduler_is_no_holder():
    """A tenant's pod that no scheduler of ours bound, carrying an app class and a forged
    allocation on a GPU, does not turn that GPU into an "offline" GPU."""
    p = pipeline(two_gpu_node(), backends=("metax",))
    forged = sgpu_pod("forged", OFF)
    forged["spec"]["schedulerName"] = "other-scheduler"
    forged["spec"]["nodeName"] = "mx"
    forged["metadata"]["annotations"]["hami.io/metax-sgpu-devices-allocated"] = (
        "mx-sgpu-0,Metax-SGPU,4096,10:;"
    )
    p.cluster.add_pod(forged)
    out = p.submit(sgpu_pod("normal", {PIN: "mx-sgpu-0"}))
    assert out.node == "mx", out.filter
    assert gpu_of(p, "normal") == "mx-sgpu-0"


def test_fit_reason_is_app_class_mismatch():
    usage = [used("g0", [ON])]
    request = DeviceRequest(vendor="Metax-SGPU", count=1, memory_mib=1024, cores_pct=10)
    info = NodeInfo(name="n", devices=(usage[0].device,))
    out = fit.fit(request, info, usage, {"metadata": {"annotations": {}}}, DevicePolicy.BINPACK)
    assert out.device_reasons == {"g0": ReasonCode.CARD_APP_CLASS_MISMATCH}


def test_a_pods_later_container_shares_its_gpu_whatever_the_gpus_old_policy():
    """HAMi's ``AddResourceUsage``: once a container of a ``best-effort`` pod is on a GPU
    whose node annotation still says ``fixed-share``, the pod's next container may join
    it (the GPU runs the pod's policy now); another pod's container may not."""
    d = DeviceInfo(
        uuid="g0",
        vendor="Metax-SGPU",
        model="m",
        index=0,
        split_count=16,
        memory_mib=65536,
        cores_pct=100,
        custom=(("qosPolicy", "fixed-share"),),
    )
    usage = [DeviceUsage(device=d, used_count=1, used_memory_mib=1024, used_cores_pct=10)]
    request = DeviceRequest(vendor="Metax-SGPU", count=1, memory_mib=1024, cores_pct=10)
    ann = {"metadata": {"annotations": {"metax-tech.com/sgpu-qos-policy": "best-effort"}}}
    info = NodeInfo(name="n", devices=(d,))
    mine = ((ContainerDevice(uuid="g0", vendor="Metax-SGPU", memory_mib=1024, cores_pct=10),),)
    assert fit.fit(request, info, usage, ann, DevicePolicy.BINPACK, mine).fits
    other = fit.fit(request, info, usage, ann, DevicePolicy.BINPACK)
    assert other.device_reasons == {"g0": ReasonCode.CARD_QOS_POLICY_MISMATCH}


def test_pipeline_two_containers_of_a_pod_on_a_gpu_of_another_policy():
    sdevices = [
        {
            "uuid": "mx-sgpu-0",
            "model": "MXC500",
            "totalDevCount": 16,
            "totalCompute": 100,
            "totalVRam": 65536,
            "healthy": True,
            "qosPolicy": "fixed-share",
        }
    ]
    p = pipeline(
        node("mx", annotations={"metax-tech.com/node-gpu-devices": json.dumps(sdevices)}),
        backends=("metax",),
    )
    limits = {
        "metax-tech.com/sgpu": "1",
        "metax-tech.com/vmemory": "4",
        "metax-tech.com/vcore": "10",
    }
    containers = [
        {"name": n, "image": "busybox", "resources": {"limits": dict(limits)}} for n in ("a", "b")
    ]
    out = p.submit(pod("two", containers=containers))  # best-effort by the webhook's default
    assert out.node == "mx", out.filter
    ann = p.cluster.get_pod("default", "two")["metadata"]["annotations"]
    assert ann["metax-tech.com/sgpu-qos-policy"] == "best-effort"
    a, b = json.loads(ann["metax-tech.com/gpu-devices-allocated"])
    assert a[0]["uuid"] == b[0]["uuid"] == "mx-sgpu-0"
    # the GPU runs the bound pod's best-effort now, whatever the stale annotation says
    # (HAMi's jittery QoS cache, TestAddJitteryQos): a best-effort pod joins it, a
    # fixed-share one no longer does
    assert p.submit(pod("late", limits)).node == "mx"
    fixed = p.submit(
        pod("fixed", limits, annotations={"metax-tech.com/sgpu-qos-policy": "fixed-share"})
    )
    assert fixed.node is None and "CardQosPolicyMismatch" in fixed.filter.failed["mx"]


def _zoned(specs):
    return [
        DeviceUsage(
            device=DeviceInfo(
                uuid=u,
                vendor="Metax-SGPU",
                model="m",
                index=i,
                split_count=16,
                memory_mib=65536,
                cores_pct=100,
                custom=(("linkZone", str(z)),),
            ),
            used_count=used,
        )
        for i, (u, z, used) in enumerate(specs)
    ]


@pytest.mark.parametrize(
    ("name", "previous", "taken", "want"),
    [
        (
            "allocate one device, rest zero device",
            [("GPU-1", 1, 1), ("GPU-2", 1, 1), ("GPU-3", 1, 1), ("GPU-4", 1, 0)],
            ["GPU-4"],
            0,
        ),
        (
            "allocate one device, rest three device",
            [("GPU-1", 1, 0), ("GPU-2", 1, 0), ("GPU-3", 1, 0), ("GPU-4", 1, 0)],
            ["GPU-4"],
            -30,
        ),
        (
            "allocate two device, best result",
            [("GPU-1", 1, 0), ("GPU-2", 1, 0), ("GPU-3", 1, 0), ("GPU-4", 1, 0)],
            ["GPU-3", "GPU-4"],
            60,
        ),
        (
            "allocate two device, bad result",
            [
                ("GPU-1", 1, 1),
                ("GPU-2", 1, 1),
                ("GPU-3", 1, 1),
                ("GPU-4", 1, 0),
                ("GPU-5", 2, 0),
                ("GPU-6", 2, 1),
                ("GPU-7", 2, 1),
                ("GPU-8", 2, 1),
            ],
            ["GPU-4", "GPU-5"],
            0,
        ),
        (
            "allocate four device, best result",
            [("GPU-1", 1, 0), ("GPU-2", 1, 0), ("GPU-3", 1, 0), ("GPU-4", 1, 0), ("GPU-5", 2, 0)],
            ["GPU-1", "GPU-2", "GPU-3", "GPU-4"],
            600,
        ),
        (
            "allocate four device, bad result",
            [("GPU-2", 1, 0), ("GPU-3", 1, 0), ("GPU-4", 1, 0), ("GPU-5", 2, 0), ("GPU-6", 2, 0)],
            ["GPU-3", "GPU-4", "GPU-5", "GPU-6"],
            180,
        ),
        (
            "allocate eight device",
            [(f"GPU-{i}", 1 if i <= 4 else 2, 0) for i in range(1, 9)],
            [f"GPU-{i}" for i in range(1, 9)],
            1200,
        ),
    ],
)
def test_score_exclusive_devices_as_hami(name, previous, taken, want):
    usage = _zoned(previous)
    devices = tuple(
        ContainerDevice(uuid=u, vendor="Metax-SGPU", memory_mib=65536, cores_pct=100) for u in taken
    )
    assert fit.exclusive_raw(usage, devices) == want
    # the 0..100 form keeps the order: 0 -> 50, more is better
    assert (fit.exclusive_score(usage, devices) > 50) is (want > 0)
