"""MetaX: requests, inventory, QoS, link zones, topology scores, bind annotations and the
pipeline. Expected values from HAMi 2.10 ``pkg/device/metax`` tests
(``sdevice_test.go`` ``TestGenerateResourceRequests``, ``TestGetMetaxSDevices``,
``TestCheckDeviceQos``, ``TestPrioritizeExclusiveDevices``, ``TestMutateAdmission``;
``device_test.go`` ``TestGetNodeDevices``, ``TestParseMetaxAnnos``, ``Test_ScoreNode``;
``protocol_test.go`` ``TestConvertHAMIPodDeviceToMetaxPodDevice``)."""

import json

import pytest
from hami_metax import fit, inventory, requests

from hami_core.errors import AnnotationError, InvalidInputError
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
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.testing import mutated

from ..support import node, pipeline, pod, quota

#: HAMi's TestGetMetaxSDevices annotation.
HAMI_SDEVICES = (
    '[{"uuid": "GPU-123", "model": "sgpu", "totalDevCount": 16, "totalCompute": 100, '
    '"bdf": "0000:44:00.0", "totalVRam" : 32768, "numa": 1, "healthy": true, '
    '"qosPolicy": "fixed-share"}]'
)
#: HAMi's TestParseMetaxAnnos table.
TABLE = '{"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240}'


def sgpu(pod_ann=None, **limits):
    keys = {
        "count": "metax-tech.com/sgpu",
        "mem": "metax-tech.com/vmemory",
        "cores": "metax-tech.com/vcore",
    }
    c = {"name": "main", "resources": {"limits": {keys[k]: v for k, v in limits.items()}}}
    return {"metadata": {"annotations": dict(pod_ann or {})}}, c


@pytest.mark.parametrize(
    ("limits", "want"),
    [
        (
            {"count": "1"},
            DeviceRequest(vendor="Metax-SGPU", count=1, memory_pct=100, cores_pct=100),
        ),
        (
            {"count": "2"},
            DeviceRequest(vendor="Metax-SGPU", count=2, memory_pct=100, cores_pct=100),
        ),
        (
            {"count": "1", "cores": "30"},
            DeviceRequest(vendor="Metax-SGPU", count=1, memory_pct=100, cores_pct=30),
        ),
        (
            {"count": "1", "mem": "16"},
            DeviceRequest(vendor="Metax-SGPU", count=1, memory_mib=16 * 1024, cores_pct=100),
        ),
        (
            {"count": "1", "mem": "16", "cores": "60"},
            DeviceRequest(vendor="Metax-SGPU", count=1, memory_mib=16384, cores_pct=60),
        ),
        (
            {"count": "1", "mem": "4096Mi", "cores": "60"},
            DeviceRequest(vendor="Metax-SGPU", count=1, memory_mib=4096, cores_pct=60),
        ),
        (
            {"count": "1", "mem": "16Gi"},
            DeviceRequest(vendor="Metax-SGPU", count=1, memory_mib=16384, cores_pct=100),
        ),
    ],
)
def test_sgpu_requests_as_hami(limits, want):
    p, c = sgpu(**limits)
    assert requests.parse_request(p, c) == want


def test_whole_gpu_request_and_online_pods_charge_no_cores():
    c = {"name": "m", "resources": {"limits": {"metax-tech.com/gpu": "2"}}}
    assert requests.parse_request({}, c) == DeviceRequest(
        vendor="Metax-GPU", count=2, memory_pct=100, cores_pct=100
    )
    p, c2 = sgpu({"metax-tech.com/sgpu-app-class": "online"}, count="1", cores="50")
    assert requests.parse_request(p, c2).cores_pct == 0


@pytest.mark.parametrize(
    ("ann", "limits", "message"),
    [
        ({}, {"count": "0"}, "metax-tech.com/sgpu must be greater than 0"),
        ({}, {"count": "1", "cores": "101"}, "metax-tech.com/vcore 101 is above 100"),
        ({}, {"count": "1", "mem": "1.5"}, "metax-tech.com/vmemory"),
        ({}, {"count": "1", "mem": "3000000"}, "metax-tech.com/vmemory"),
        (
            {"metax-tech.com/sgpu-app-class": "batch"},
            {"count": "1"},
            "must be one of online, offline",
        ),
        ({"metax-tech.com/sgpu-app-class": "online"}, {"count": "2"}, "must request a single sGPU"),
        (
            {"metax-tech.com/sgpu-qos-policy": "gold"},
            {"count": "1"},
            "best-effort, fixed-share, burst-share",
        ),
    ],
)
def test_illegal_values_are_denied(ann, limits, message):
    p, c = sgpu(ann, **limits)
    with pytest.raises(InvalidInputError, match=message):
        requests.parse_request(p, c)
    assert message in requests.mutate(p, c, "/spec/containers/0").denial


def test_webhook_writes_best_effort_unless_online():
    p, c = sgpu(count="1")
    p["spec"] = {"containers": [c]}
    out = mutated(p, "/spec/containers/0", requests.mutate(p, c, "/spec/containers/0"))
    assert out["metadata"]["annotations"]["metax-tech.com/sgpu-qos-policy"] == "best-effort"
    p2, c2 = sgpu({"metax-tech.com/sgpu-app-class": "online"}, count="1")
    p2["spec"] = {"containers": [c2]}
    out2 = mutated(p2, "/spec/containers/0", requests.mutate(p2, c2, "/spec/containers/0"))
    assert "metax-tech.com/sgpu-qos-policy" not in out2["metadata"]["annotations"]


def test_sgpu_inventory_as_hami_reads_it():
    (d,) = inventory.sgpus(
        node("normal", annotations={"metax-tech.com/node-gpu-devices": HAMI_SDEVICES})
    )
    assert (d.uuid, d.model, d.split_count, d.cores_pct, d.memory_mib, d.numa, d.healthy) == (
        "GPU-123",
        "sgpu",
        16,
        100,
        32768,
        1,
        True,
    )
    assert d.info("qosPolicy") == "fixed-share" and d.info("bdf") == "0000:44:00.0"
    assert inventory.sgpus(node("none")) is None
    with pytest.raises(AnnotationError, match="not valid JSON"):
        inventory.sgpus(node("bad", annotations={"metax-tech.com/node-gpu-devices": ""}))
    with pytest.raises(AnnotationError, match="totalVRam must be int"):
        inventory.sgpus(
            node(
                "bad",
                annotations={"metax-tech.com/node-gpu-devices": '[{"uuid":"a","totalVRam":"x"}]'},
            )
        )


def test_whole_gpu_inventory_from_capacity():
    devices = inventory.whole_gpus(
        node(
            "mx",
            capacity={"metax-tech.com/gpu": "2"},
            annotations={"metax-tech.com/gpu.topology.losses": TABLE},
        )
    )
    assert [(d.uuid, d.split_count, d.memory_mib, d.cores_pct) for d in devices] == [
        ("mx-metax-0", 1, 65536, 100),
        ("mx-metax-1", 1, 65536, 100),
    ]
    assert devices[0].info("metax-tech.com/gpu.topology.losses") == TABLE


@pytest.mark.parametrize(
    "table",
    [
        "{",
        "[1, 2]",
        '{"2": "x"}',
        '{"2": 1e999}',
        '{"2": ' + "9" * 400 + "}",
        "[" * 5000 + "]" * 5000,
        '{"2": 1' + " " * 5000 + "}",
    ],
    ids=["not-json", "not-object", "not-number", "infinite", "beyond-float", "deep", "oversize"],
)
def test_an_unreadable_topology_table_costs_only_its_score(table, caplog):
    """Issue 24 item 2: the table is optional; unreadable, the GPUs stay usable and are
    scored as on a node without tables (the core's node score), with a warning. Before,
    an unreadable table read as 0 loss: the best score, or an uncaught OverflowError."""
    with caplog.at_level("WARNING"):
        devices = inventory.whole_gpus(
            node(
                "mx",
                capacity={"metax-tech.com/gpu": "2"},
                annotations={"metax-tech.com/gpu.topology.losses": table},
            )
        )
    plain = inventory.whole_gpus(node("mx", capacity={"metax-tech.com/gpu": "2"}))
    assert devices == plain
    assert any("gpu.topology.losses ignored" in r.getMessage() for r in caplog.records)
    usage = [DeviceUsage(device=d) for d in devices]
    two = tuple(
        ContainerDevice(uuid=d.uuid, vendor="Metax-GPU", memory_mib=65536, cores_pct=100)
        for d in devices
    )
    got = fit.score(
        "Metax-GPU", usage, two, NodePolicy.BINPACK, pod={}, topology_aware_default=False
    )
    assert got == fit.gpu_score([DeviceUsage(device=d) for d in plain], two, NodePolicy.BINPACK)
    assert got != 100.0


def sdev(uuid, *, index, qos="", zone=0, count=16):
    return DeviceInfo(
        uuid=uuid,
        vendor="Metax-SGPU",
        model="MXC500",
        index=index,
        split_count=count,
        memory_mib=65536,
        cores_pct=100,
        custom=(("qosPolicy", qos), ("linkZone", str(zone))),
    )


def run(request, usage, ann=None):
    n = NodeInfo(name="n", devices=tuple(u.device for u in usage))
    return fit.fit(request, n, usage, {"metadata": {"annotations": ann or {}}}, DevicePolicy.SPREAD)


def test_qos_policy_of_a_shared_gpu_must_match():
    req = DeviceRequest(vendor="Metax-SGPU", count=1, memory_mib=1024, cores_pct=20)
    shared = DeviceUsage(
        device=sdev("g0", index=0, qos="fixed-share"),
        used_count=1,
        used_memory_mib=1024,
        used_cores_pct=20,
    )
    out = run(req, [shared], {"metax-tech.com/sgpu-qos-policy": "best-effort"})
    assert out.device_reasons == {"g0": ReasonCode.CARD_QOS_POLICY_MISMATCH}
    assert run(req, [shared], {"metax-tech.com/sgpu-qos-policy": "fixed-share"}).fits
    # an unused GPU, a GPU without policy: any policy
    assert run(
        req,
        [DeviceUsage(device=sdev("g1", index=0, qos="fixed-share"))],
        {"metax-tech.com/sgpu-qos-policy": "burst-share"},
    ).fits


def test_exclusive_sgpus_come_from_one_link_zone():
    usage = [
        DeviceUsage(device=sdev("a", index=0, zone=1)),
        DeviceUsage(device=sdev("b", index=1, zone=2)),
        DeviceUsage(device=sdev("c", index=2, zone=1)),
        DeviceUsage(device=sdev("d", index=3, zone=2)),
    ]
    out = run(DeviceRequest(vendor="Metax-SGPU", count=2, memory_pct=100, cores_pct=100), usage)
    zones = {u.device.uuid: u.device.info("linkZone") for u in usage}
    assert len({zones[d.uuid] for d in out.devices}) == 1


def test_topology_scores_of_whole_gpus():
    devices = inventory.whole_gpus(
        node(
            "mx",
            capacity={"metax-tech.com/gpu": "8"},
            annotations={
                "metax-tech.com/gpu.topology.losses": TABLE,
                "metax-tech.com/gpu.topology.scores": TABLE,
            },
        )
    )
    usage = [DeviceUsage(device=d) for d in devices]
    two = tuple(
        ContainerDevice(uuid=d.uuid, vendor="Metax-GPU", memory_mib=65536, cores_pct=100)
        for d in devices[:2]
    )
    four = tuple(
        ContainerDevice(uuid=d.uuid, vendor="Metax-GPU", memory_mib=65536, cores_pct=100)
        for d in devices[:4]
    )
    assert (
        fit.score("Metax-GPU", usage, two, NodePolicy.BINPACK, pod={}, topology_aware_default=False)
        == (2000 - 110) / 20
    )
    assert (
        fit.score("Metax-GPU", usage, four, NodePolicy.SPREAD, pod={}, topology_aware_default=False)
        == (2000 - 540) / 20
    )


def test_exclusive_sgpu_score_prefers_a_linked_pair():
    usage = [
        DeviceUsage(device=sdev(u, index=i, zone=z))
        for i, (u, z) in enumerate([("a", 1), ("b", 1), ("c", 2), ("d", 3)])
    ]
    linked = tuple(
        ContainerDevice(uuid=u, vendor="Metax-SGPU", memory_mib=1, cores_pct=100)
        for u in ("a", "b")
    )
    apart = tuple(
        ContainerDevice(uuid=u, vendor="Metax-SGPU", memory_mib=1, cores_pct=100)
        for u in ("c", "d")
    )
    assert fit.exclusive_score(usage, linked) > fit.exclusive_score(usage, apart)


def test_bind_annotation_for_metax_sgpu_plugin():
    devices = (
        (),
        (ContainerDevice(uuid="GPU-1", vendor="Metax-SGPU", memory_mib=4096, cores_pct=0),),
    )
    out = fit.bind_annotations("Metax-SGPU", devices, clock_ns=lambda: 7)
    assert json.loads(out["metax-tech.com/gpu-devices-allocated"]) == [
        [],
        [{"uuid": "GPU-1", "vRam": 4096}],
    ]
    assert out["metax-tech.com/predicate-time"] == "7"
    assert fit.bind_annotations("Metax-GPU", devices) == {}


def metax_node(name="mx-1"):
    sdevices = json.dumps(
        [
            {
                "uuid": f"{name}-sgpu-{i}",
                "model": "MXC500",
                "totalDevCount": 16,
                "totalCompute": 100,
                "totalVRam": 65536,
                "healthy": True,
                "linkZone": 1,
            }
            for i in range(2)
        ]
    )
    return node(
        name,
        annotations={"metax-tech.com/node-gpu-devices": sdevices},
        capacity={"metax-tech.com/sgpu": "32"},
    )


def test_pipeline_sgpu_and_whole_gpu_pods():
    whole = node(
        "mx-gpu",
        capacity={"metax-tech.com/gpu": "2"},
        annotations={"metax-tech.com/gpu.topology.losses": TABLE},
    )
    p = pipeline(metax_node(), whole, backends=("metax", "nvidia"))
    out = p.submit(
        pod(
            "s",
            {
                "metax-tech.com/sgpu": "1",
                "metax-tech.com/vmemory": "8",
                "metax-tech.com/vcore": "25",
            },
        )
    )
    assert out.denied == "" and out.error == "" and out.node == "mx-1"
    ann = p.cluster.get_pod("default", "s")["metadata"]["annotations"]
    assert ann["metax-tech.com/sgpu-qos-policy"] == "best-effort"
    (entry,) = decode_pod_devices(ann["hami.io/metax-sgpu-devices-allocated"])
    assert (entry[0].memory_mib, entry[0].cores_pct) == (8192, 25)
    assert json.loads(ann["metax-tech.com/gpu-devices-allocated"]) == [
        [{"uuid": entry[0].uuid, "compute": 25, "vRam": 8192}]
    ]
    g = p.submit(pod("g", {"metax-tech.com/gpu": "2"}))
    assert g.node == "mx-gpu"
    assert (
        len(
            decode_pod_devices(
                p.cluster.get_pod("default", "g")["metadata"]["annotations"][
                    "hami.io/metax-gpu-devices-allocated"
                ]
            )[0]
        )
        == 2
    )
    # MetaX's plugin reports no policy for these GPUs yet: any policy is accepted
    other = p.submit(
        pod(
            "o",
            {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "10"},
            annotations={"metax-tech.com/sgpu-qos-policy": "fixed-share"},
        )
    )
    assert other.node == "mx-1"


def test_quota_in_gib_units():
    p = pipeline(metax_node(), backends=("metax",))
    p.cluster.add_quota(quota("q", {"limits.metax-tech.com/vmemory": "8"}))
    assert (
        p.submit(pod("a", {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "8"})).node
        == "mx-1"
    )
    over = p.submit(pod("b", {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "1"}))
    assert "limits.metax-tech.com/vmemory" in over.denied


def whole_pod(name, *, init=False):
    ctr = {"image": "busybox", "resources": {"limits": {"metax-tech.com/gpu": "1"}}}
    p = pod(name, containers=[{"name": "a", **ctr}, {"name": "b", **ctr}])
    if init:
        first = p["spec"]["containers"].pop(0)
        p["spec"]["initContainers"] = [first]
    return p


def test_whole_gpus_keep_a_pod_on_one_gpu():
    """HAMi's ``customFilterRule`` of ``Metax-GPU``: a later app container may only take
    the earlier containers' GPU, which a whole GPU (one container at a time) refuses; an
    init container is not an earlier app container."""
    p = pipeline(node("mx-gpu", capacity={"metax-tech.com/gpu": "2"}), backends=("metax",))
    out = p.submit(whole_pod("two-apps"))
    assert out.node is None and out.denied == ""
    assert out.filter is not None
    reason = out.filter.failed["mx-gpu"]
    assert "1/2 CardNotFoundCustomFilterRule" in reason
    assert "1/2 CardTimeSlicingExhausted" in reason
    assert p.submit(whole_pod("init-then-app", init=True)).node == "mx-gpu"


@pytest.mark.parametrize(("held", "want"), [("test123", True), ("test456", False)])
def test_custom_filter_rule_of_whole_gpus_as_hami(held, want):
    """HAMi's ``device_test.go`` customFilterRule cases."""
    d = DeviceInfo(
        uuid="test123",
        vendor="Metax-GPU",
        model="Metax-GPU",
        index=0,
        split_count=4,
        memory_mib=65536,
        cores_pct=100,
    )
    request = DeviceRequest(vendor="Metax-GPU", count=1, memory_pct=10, cores_pct=0)
    allocated = ((ContainerDevice(uuid=held, vendor="Metax-GPU", memory_mib=1, cores_pct=0),),)
    out = fit.fit(
        request,
        NodeInfo(name="n", devices=(d,)),
        [DeviceUsage(device=d)],
        {},
        DevicePolicy.SPREAD,
        allocated,
    )
    assert out.fits is want
