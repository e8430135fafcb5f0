"""HAMi 2.10's own MetaX tests (``pkg/device/metax/device_test.go``, ``sdevice_test.go``,
``protocol_test.go`` at the commit docs/hami-go-tests.md pins), value by value, through
this backend's requests, webhook, inventory, fit, scores and bind annotations. Each test
names the Go test it takes its expected values from; what differs on purpose is said
where it is asserted. (``test_appclass.py`` has HAMi's app-class, online and
exclusive-score tables.)"""

from __future__ import annotations

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
from hami_core.testing import mutated

from ..support import node, pipeline, pod

SGPU = "Metax-SGPU"
GPU = "Metax-GPU"
QOS = "metax-tech.com/sgpu-qos-policy"
APP = "metax-tech.com/sgpu-app-class"
TABLE = '{"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240}'


def container(**limits):
    return {"name": "main", "resources": {"limits": dict(limits)}}


# --- device_test.go (whole GPUs, Metax-GPU) ------------------------------------------------


@pytest.mark.parametrize(
    ("n", "value"), [(1, 0), (2, 110), (3, 270), (4, 540), (5, 580), (6, 730), (7, 930), (8, 1240)]
)
def test_parse_metax_annos(n, value):
    """``TestParseMetaxAnnos``: the value of the table for a pod of ``n`` GPUs, and the
    binpack score it gives (HAMi ``2000 - value``; here / 20, 0..100)."""
    assert fit._table(TABLE, n) == value
    devices = inventory.whole_gpus(
        node(
            "mx",
            capacity={"metax-tech.com/gpu": "8"},
            annotations={"metax-tech.com/gpu.topology.losses": TABLE},
        )
    )
    usage = [DeviceUsage(device=d) for d in devices]
    taken = tuple(
        ContainerDevice(uuid=d.uuid, vendor=GPU, memory_mib=65536, cores_pct=100)
        for d in devices[:n]
    )
    assert fit.gpu_score(usage, taken, NodePolicy.BINPACK) == (2000 - value) / 20


def whole(uuid, index=0, **kw):
    return DeviceInfo(
        uuid=uuid,
        vendor=GPU,
        model=GPU,
        index=index,
        split_count=kw.pop("count", 100),
        memory_mib=kw.pop("totalmem", 1280),
        cores_pct=100,
        **kw,
    )


@pytest.mark.parametrize(("device", "fits"), [("test-0000", True), ("test-1111", False)])
def test_custom_filter_rule(device, fits):
    """``Test_CustomFilterRule``: once the pod holds ``test-0000``, only ``test-0000`` is
    allowed to its next container (``CardNotFoundCustomFilterRule`` otherwise)."""
    d = whole(device)
    allocated = ((ContainerDevice(uuid="test-0000", vendor=GPU, memory_mib=1000, cores_pct=1),),)
    request = DeviceRequest(vendor=GPU, count=1, memory_mib=10, cores_pct=0)
    out = fit.fit(
        request,
        NodeInfo(name="n", devices=(d,)),
        [DeviceUsage(device=d)],
        {},
        DevicePolicy.SPREAD,
        allocated,
    )
    assert out.fits is fits
    if not fits:
        assert out.device_reasons == {device: ReasonCode.CARD_NOT_FOUND_CUSTOM_FILTER_RULE}


@pytest.mark.parametrize(
    ("key", "policy", "count", "hami"),
    [
        ("metax-tech.com/gpu.topology.losses", NodePolicy.BINPACK, 2, 1800),
        ("metax-tech.com/gpu.topology.scores", NodePolicy.SPREAD, 1, 1900),
    ],
)
def test_score_node(key, policy, count, hami):
    """``Test_ScoreNode``: losses ``{"1":100,"2":200}`` for 2 GPUs under binpack is 1800,
    scores for 1 GPU under spread 1900 (here the same order on 0..100: / 20)."""
    devices = inventory.whole_gpus(
        node(
            "mx",
            capacity={"metax-tech.com/gpu": "2"},
            annotations={key: '{"1":100,"2":200}'},
        )
    )
    usage = [DeviceUsage(device=d) for d in devices]
    taken = tuple(
        ContainerDevice(uuid=d.uuid, vendor=GPU, memory_mib=1000, cores_pct=1)
        for d in devices[:count]
    )
    got = fit.score(GPU, usage, taken, policy, pod={}, topology_aware_default=False)
    assert got == hami / 20


#: name -> (device fields, usage fields, request fields, annotations,
#: {vendor: HAMi's reason, "" for a fit}); HAMi's TestMetaxDevices_Fit (Metax-GPU) and
#: TestMetaxSDevices_Fit (Metax-SGPU) share these cases.
FIT = {
    "fit fail: memory not enough": (
        {"totalmem": 128},
        {},
        {"memory_mib": 512, "cores_pct": 50},
        {},
        {GPU: "1/1 CardInsufficientMemory", SGPU: "1/1 CardInsufficientMemory"},
    ),
    "fit fail: core not enough": (
        {"totalmem": 1024},
        {"used_cores_pct": 100},
        {"memory_mib": 512, "cores_pct": 50},
        {},
        {GPU: "1/1 CardInsufficientCore", SGPU: "1/1 CardInsufficientCore"},
    ),
    "fit fail: card overused": (
        {},
        {"used_count": 100},
        {"memory_mib": 512, "cores_pct": 50},
        {},
        {GPU: "1/1 CardTimeSlicingExhausted", SGPU: "1/1 CardTimeSlicingExhausted"},
    ),
    "fit fail: card exclusively": (
        {},
        {"used_count": 20},
        {"memory_mib": 512, "cores_pct": 100},
        {},
        {
            GPU: "1/1 ExclusiveDeviceAllocateConflict",
            SGPU: "1/1 ExclusiveDeviceAllocateConflict",
        },
    ),
    "fit fail: CardComputeUnitsExhausted": (
        {},
        {"used_count": 20, "used_cores_pct": 100},
        {"memory_mib": 512, "cores_pct": 0},
        {},
        {GPU: "1/1 CardComputeUnitsExhausted", SGPU: "1/1 CardComputeUnitsExhausted"},
    ),
    # HAMi: "1/1 AllocatedCardsInsufficientRequest"; its scheduler checks the device count
    # first (pkg/scheduler/score.go), as this fit does
    "fit fail: AllocatedCardsInsufficientRequest": (
        {},
        {"used_count": 20, "used_cores_pct": 10},
        {"count": 2, "memory_mib": 512, "cores_pct": 20},
        {},
        {GPU: "NodeInsufficientDevice", SGPU: "NodeInsufficientDevice"},
    ),
    "fit success: memory percentage": (
        {},
        {"used_count": 20, "used_cores_pct": 10},
        {"memory_pct": 10, "cores_pct": 20},
        {},
        {GPU: "", SGPU: ""},
    ),
    "mutex policy rejects used device": (
        {"totalmem": 128},
        {"used_count": 1},
        {"memory_mib": 64, "cores_pct": 50},
        {"hami.io/gpu-scheduler-policy": "mutex"},
        {
            GPU: "1/1 ExclusiveDeviceAllocateConflict",
            SGPU: "1/1 ExclusiveDeviceAllocateConflict",
        },
    ),
    # HAMi's sdevice.go spells it CardUnhealthy for sGPUs; the shared code here (and the
    # scheduler's pre-filter) say CardNotHealth for every vendor
    "fit fail: CardNotHealth": (
        {"healthy": False},
        {},
        {"memory_mib": 512, "cores_pct": 50},
        {},
        {GPU: "1/1 CardNotHealth", SGPU: "1/1 CardNotHealth"},
    ),
    "fit fail: user assign use uuid mismatch": (
        {"uuid": "dev-1"},
        {},
        {"memory_mib": 512, "cores_pct": 50},
        {"metax-tech.com/use-gpuuuid": "dev-0"},
        {SGPU: "1/1 CardUuidMismatch"},
    ),
    "fit fail: user assign no use uuid match": (
        {},
        {},
        {"memory_mib": 512, "cores_pct": 50},
        {"metax-tech.com/nouse-gpuuuid": "dev-0"},
        {SGPU: "1/1 CardUuidMismatch"},
    ),
    "fit fail: online task, app class unfit": (
        {"totalmem": 128},
        {"used_count": 1, "used_memory_mib": 64, "used_cores_pct": 10, "holders": ({},)},
        {"memory_mib": 64, "cores_pct": 50},
        {APP: "online"},
        {SGPU: "1/1 CardAppClassMismatch"},
    ),
    "fit fail: normal task, app class unfit": (
        {"totalmem": 128},
        {
            "used_count": 1,
            "used_memory_mib": 64,
            "used_cores_pct": 10,
            "holders": ({APP: "online"},),
        },
        {"memory_mib": 64, "cores_pct": 50},
        {},
        {SGPU: "1/1 CardAppClassMismatch"},
    ),
}


@pytest.mark.parametrize(
    ("case", "vendor"),
    [(case, vendor) for case, (*_, want) in FIT.items() for vendor in want],
)
def test_fit_tables(case, vendor):
    """``TestMetaxDevices_Fit`` (``Metax-GPU``) and ``TestMetaxSDevices_Fit``
    (``Metax-SGPU``), the case named, with HAMi's reason string (the device: 100 sharers,
    1280 MiB, 100 cores unless the case says otherwise). HAMi's "fit success" of two equal
    devices takes the last (reverse scan); the lowest index is taken here."""
    device, used, request, annotations, want = FIT[case]
    kw = dict(device)
    d = DeviceInfo(
        uuid=kw.pop("uuid", "dev-0"),
        vendor=vendor,
        model=vendor,
        index=0,
        split_count=100,
        memory_mib=kw.pop("totalmem", 1280),
        cores_pct=100,
        **kw,
    )
    req = dict(request)
    result = fit.fit(
        DeviceRequest(vendor=vendor, count=req.pop("count", 1), **req),
        NodeInfo(name="n", devices=(d,)),
        [DeviceUsage(device=d, **used)],
        {"metadata": {"annotations": annotations}},
        DevicePolicy.SPREAD,
    )
    assert result.summary(1) == want[vendor], result
    if not want[vendor]:
        assert [(x.uuid, x.memory_mib, x.cores_pct) for x in result.devices] == [("dev-0", 128, 20)]


def test_core_limit_above_100_is_denied():
    """``TestMetaxDevices_Fit`` / ``TestMetaxSDevices_Fit`` "core limit can't exceed 100":
    HAMi's fit clamps 120 to 100 for whole GPUs and refuses it (``CardInsufficientCore``)
    for sGPUs; here a vcore above 100 never reaches a fit: the webhook denies the pod."""
    c = container(**{"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "120"})
    with pytest.raises(InvalidInputError, match="metax-tech.com/vcore 120 is above 100"):
        requests.parse_request({}, c)


def test_fit_success_takes_one_of_two_free_devices():
    """``TestMetaxDevices_Fit`` / ``TestMetaxSDevices_Fit`` "fit success": 64 MiB, 50 %
    of two free 128 MiB devices fits on one of them."""
    for vendor in (GPU, SGPU):
        devices = [
            DeviceInfo(
                uuid=f"dev-{i}",
                vendor=vendor,
                model=vendor,
                index=i,
                split_count=100,
                memory_mib=128,
                cores_pct=100,
            )
            for i in range(2)
        ]
        result = fit.fit(
            DeviceRequest(vendor=vendor, count=1, memory_mib=64, cores_pct=50),
            NodeInfo(name="n", devices=tuple(devices)),
            [DeviceUsage(device=d) for d in devices],
            {"metadata": {"annotations": {}}},
            DevicePolicy.SPREAD,
        )
        assert [(x.uuid, x.memory_mib, x.cores_pct) for x in result.devices] == [("dev-0", 64, 50)]


@pytest.mark.parametrize("vendor", [GPU, SGPU])
def test_add_resource_usage(vendor):
    """``TestMetaxDevices_AddResourceUsage``, ``TestMetaxSDevices_AddResourceUsage``:
    used 0, 15 %, 2000 MiB plus a container of 50 %, 1024 MiB -> 1, 65 %, 3024 MiB."""
    d = DeviceInfo(
        uuid="dev-0",
        vendor=vendor,
        model=vendor,
        index=0,
        split_count=100,
        memory_mib=65536,
        cores_pct=100,
    )
    after = DeviceUsage(device=d, used_cores_pct=15, used_memory_mib=2000).charged(
        memory_mib=1024, cores_pct=50
    )
    assert (after.used_count, after.used_cores_pct, after.used_memory_mib) == (1, 65, 3024)


# --- protocol_test.go -----------------------------------------------------------------------


def test_convert_metax_sdevices_to_hami_devices():
    """``TestConvertMetaxSDeviceToHAMIDevice``: MetaX's two sGPU records become devices
    0 and 1 with their count, memory, compute, NUMA (-1 kept), health, QoS policy, model
    and link zone; the available counts are not read."""
    records = [
        {
            "uuid": "GPU-a16ac188-0592-5c8f-2b6e-8bd8e7a604a9",
            "bdf": "0000:0a:00.0",
            "model": "native",
            "totalDevCount": 16,
            "totalCompute": 100,
            "totalVRam": 64 * 1024,
            "availableDevCount": 6,
            "availableCompute": 50,
            "availableVRam": 32 * 1024,
            "numa": 0,
            "healthy": True,
            "qosPolicy": "best-effort",
            "linkZone": 1,
        },
        {
            "uuid": "GPU-a16ac188-0592-5c8f-2b6e-8bd8e7a604a8",
            "bdf": "0000:09:00.0",
            "model": "sgpu",
            "totalDevCount": 8,
            "totalCompute": 100,
            "totalVRam": 32 * 1024,
            "availableDevCount": 6,
            "availableCompute": 50,
            "availableVRam": 32 * 1024,
            "numa": -1,
            "healthy": False,
            "qosPolicy": "burst-share",
            "linkZone": 2,
        },
    ]
    devices = inventory.sgpus(
        node("n", annotations={"metax-tech.com/node-gpu-devices": json.dumps(records)})
    )
    got = [
        (
            d.uuid,
            d.index,
            d.split_count,
            d.memory_mib,
            d.cores_pct,
            d.vendor,
            d.numa,
            d.healthy,
            d.info("qosPolicy"),
            d.model,
            d.info("linkZone"),
        )
        for d in devices
    ]
    assert got == [
        (records[0]["uuid"], 0, 16, 65536, 100, SGPU, 0, True, "best-effort", "native", "1"),
        (records[1]["uuid"], 1, 8, 32768, 100, SGPU, -1, False, "burst-share", "sgpu", "2"),
    ]


def test_convert_hami_pod_devices_to_metax_pod_devices():
    """``TestConvertHAMIPodDeviceToMetaxPodDevice``: two containers of two sGPUs each
    become MetaX's ``[[{"uuid", "compute", "vRam"}]]`` in the same order."""
    spec = [
        [
            ("GPU-a16ac188-0592-5c8f-2b6e-8bd8e7a604a0", 10, 50),
            ("GPU-a16ac188-0592-5c8f-2b6e-8bd8e7a604a1", 1024, 30),
        ],
        [
            ("GPU-a16ac188-0592-5c8f-2b6e-8bd8e7a604a3", 10 * 1024, 20),
            ("GPU-a16ac188-0592-5c8f-2b6e-8bd8e7a604a7", 64 * 1024, 80),
        ],
    ]
    devices = tuple(
        tuple(ContainerDevice(uuid=u, vendor=SGPU, memory_mib=m, cores_pct=c) for u, m, c in ctr)
        for ctr in spec
    )
    out = fit.bind_annotations(SGPU, devices, clock_ns=lambda: 1)
    assert json.loads(out["metax-tech.com/gpu-devices-allocated"]) == [
        [{"uuid": u, "compute": c, "vRam": m} for u, m, c in ctr] for ctr in spec
    ]


# --- sdevice_test.go (sGPUs, Metax-SGPU) ---------------------------------------------------


@pytest.mark.parametrize(
    ("name", "limits", "ann", "found", "error", "after"),
    [
        ("no sgpu resource", {}, {QOS: "best-effort"}, False, "", {QOS: "best-effort"}),
        ("qos policy error", {"metax-tech.com/sgpu": "1"}, {QOS: "best-effortx"}, True, QOS, None),
        ("no qos policy", {"metax-tech.com/sgpu": "1"}, {}, True, "", {QOS: "best-effort"}),
        ("pod annotation nil", {"metax-tech.com/sgpu": "1"}, None, True, "", {QOS: "best-effort"}),
        (
            "qos policy fit",
            {"metax-tech.com/sgpu": "1"},
            {QOS: "burst-share"},
            True,
            "",
            {QOS: "burst-share"},
        ),
        (
            "app class task must allocate single device",
            {"metax-tech.com/sgpu": "2"},
            {APP: "online"},
            True,
            "must request a single sGPU",
            None,
        ),
        (
            "app class task verify error",
            {"metax-tech.com/sgpu": "1"},
            {APP: "oNLine"},
            True,
            APP,
            None,
        ),
        (
            "offline task with qos",
            {"metax-tech.com/sgpu": "1"},
            {APP: "offline", QOS: "best-effortx"},
            True,
            QOS,
            None,
        ),
        (
            "online task with qos",
            {"metax-tech.com/sgpu": "1"},
            {APP: "online", QOS: "best-effortx"},
            True,
            "",
            {APP: "online", QOS: "best-effortx"},
        ),
    ],
)
def test_sgpu_mutate_admission(name, limits, ann, found, error, after):
    """``TestMutateAdmission`` (sdevice_test.go), the case named: found or not, the
    error (here a denial naming the annotation) and the pod's annotations afterwards (the
    webhook writes ``best-effort`` when an sGPU pod that is not ``online`` names none;
    an ``online`` pod's QoS policy is not read)."""
    c = container(**limits)
    p = {"metadata": {} if ann is None else {"annotations": dict(ann)}, "spec": {"containers": [c]}}
    out = requests.mutate(p, c, "/spec/containers/0")
    assert (out is not None) is found
    if error:
        assert out.denial and error in out.denial
        return
    if out is not None:
        assert not out.denial
        p = mutated(p, "/spec/containers/0", out)
    assert (p["metadata"].get("annotations") or {}) == after


@pytest.mark.parametrize(
    ("limits", "want"),
    [
        ({"metax-tech.com/sgpu": "1"}, (1, None, 100, 100)),
        ({"metax-tech.com/sgpu": "2"}, (2, None, 100, 100)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "30"}, (1, None, 100, 30)),
        ({"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "16"}, (1, 16384, 0, 100)),
        (
            {
                "metax-tech.com/sgpu": "1",
                "metax-tech.com/vcore": "60",
                "metax-tech.com/vmemory": "16",
            },
            (1, 16384, 0, 60),
        ),
        (
            {
                "metax-tech.com/sgpu": "1",
                "metax-tech.com/vcore": "60",
                "metax-tech.com/vmemory": "1024Mi",
            },
            (1, 1024, 0, 60),
        ),
        (
            {
                "metax-tech.com/sgpu": "1",
                "metax-tech.com/vcore": "60",
                "metax-tech.com/vmemory": "16Gi",
            },
            (1, 16384, 0, 60),
        ),
    ],
)
def test_sgpu_generate_resource_requests(limits, want):
    """``TestGenerateResourceRequests`` (sdevice_test.go): count, memory (MiB; plain
    numbers are GiB, ``Mi`` / ``Gi`` quantities bytes), memory percent, cores."""
    req = requests.parse_request({}, container(**limits))
    memory = req.memory_mib or None
    assert (
        req.vendor,
        req.count,
        memory,
        req.memory_pct if memory is None else 0,
        req.cores_pct,
    ) == (
        SGPU,
        *want,
    )


@pytest.mark.parametrize(
    "limits",
    [
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "2100001"},
        {"metax-tech.com/sgpu": "2200000000"},
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "2200000000"},
    ],
)
def test_tenant_oversized_sgpu_requests_are_denied(limits):
    """``TestGenerateResourceRequests`` oversized cases (memory above int32 MiB, count
    and vcore above int32): HAMi drops the request, so the pod runs with no sGPU at all;
    here the pod is denied, naming the resource."""
    c = container(**limits)
    with pytest.raises(InvalidInputError, match="metax-tech.com/"):
        requests.parse_request({}, c)
    assert "metax-tech.com/" in requests.mutate({}, c, "/spec/containers/0").denial


def test_get_metax_sdevices_edge_cases():
    """``TestGetMetaxSDevices``: no annotation and ``[]`` give no sGPU; a value that is not
    JSON gives none in HAMi (error ignored) and marks the node's annotation broken here,
    with the key named."""
    assert inventory.sgpus(node("normal")) is None
    assert (
        inventory.sgpus(node("normal", annotations={"metax-tech.com/node-gpu-devices": "[]"})) == []
    )
    with pytest.raises(AnnotationError, match="metax-tech.com/node-gpu-devices"):
        inventory.sgpus(node("normal", annotations={"metax-tech.com/node-gpu-devices": ""}))


def _sgpu(uuid="GPU-123", qos="", zone=0, index=0):
    return DeviceInfo(
        uuid=uuid,
        vendor=SGPU,
        model="MXC500",
        index=index,
        split_count=16,
        memory_mib=65536,
        cores_pct=100,
        custom=(("qosPolicy", qos), ("linkZone", str(zone))),
    )


@pytest.mark.parametrize(
    ("name", "used", "device_qos", "cores", "want"),
    [
        ("check no use device", 0, "burst-share", 50, True),
        ("check request exclusive", 2, "burst-share", 100, True),
        ("check fail", 2, "burst-share", 50, False),
        ("check pass", 2, "best-effort", 50, True),
    ],
)
def test_check_device_qos(name, used, device_qos, cores, want):
    """``TestCheckDeviceQos``, the case named (a ``best-effort`` request)."""
    usage = DeviceUsage(device=_sgpu(qos=device_qos), used_count=used)
    request = DeviceRequest(vendor=SGPU, count=1, memory_mib=1024, cores_pct=cores)
    assert fit.qos_fits("best-effort", usage, request) is want


def test_a_bound_pod_sets_the_gpus_qos_until_metax_reports_it():
    """``TestAddJitteryQos``: once a ``best-effort`` pod is bound to a GPU MetaX still
    reports as ``burst-share``, HAMi expects the GPU to run ``best-effort`` (its jittery
    QoS cache, until the node annotation says so). Here the GPU's policy is read from
    the pods our scheduler bound there: a ``burst-share`` pod is refused on it, a
    ``best-effort`` one shares it. (HAMi's ``""`` for an exclusive slice needs no
    counterpart: a GPU held whole takes no other sharer.)"""
    p = pipeline(
        node(
            "mx",
            annotations={
                "metax-tech.com/node-gpu-devices": json.dumps(
                    [
                        {
                            "uuid": "GPU-456",
                            "totalDevCount": 16,
                            "totalCompute": 100,
                            "totalVRam": 65536,
                            "healthy": True,
                            "qosPolicy": "burst-share",
                        }
                    ]
                )
            },
        ),
        backends=("metax",),
    )
    limits = {
        "metax-tech.com/sgpu": "1",
        "metax-tech.com/vmemory": "4",
        "metax-tech.com/vcore": "10",
    }
    assert p.submit(pod("first", limits, annotations={QOS: "best-effort"})).node == "mx"
    refused = p.submit(pod("burst", limits, annotations={QOS: "burst-share"}))
    assert refused.node is None and "1/1 CardQosPolicyMismatch" in refused.filter.failed["mx"]
    assert p.submit(pod("second", limits, annotations={QOS: "best-effort"})).node == "mx"
    # a tenant who edits a bound pod's annotation to something that is no policy does
    # not lock the GPU against others: that value is not read
    tampered = DeviceUsage(device=_sgpu(qos="best-effort"), used_count=1, holders=({QOS: "gold"},))
    request = DeviceRequest(vendor=SGPU, count=1, memory_mib=1024, cores_pct=10)
    assert fit.qos_fits("best-effort", tampered, request)
    assert not fit.qos_fits("fixed-share", tampered, request)
    # an online pod's QoS is not the GPU's (HAMi adds no cache entry for it)
    usage = DeviceUsage(
        device=_sgpu(qos=""),
        used_count=1,
        holders=({APP: "online", QOS: "fixed-share"},),
    )
    request = DeviceRequest(vendor=SGPU, count=1, memory_mib=1024, cores_pct=10)
    assert fit.qos_fits("best-effort", usage, request)


def _zoned(spec):
    return [DeviceUsage(device=_sgpu(uuid=f"GPU-{n}", zone=z, index=n)) for n, z in spec]


@pytest.mark.parametrize(
    ("name", "spec", "count", "want"),
    [
        ("require one device", [(1, 1), (2, 1), (5, 2)], 1, [5]),
        ("require two device", [(1, 1), (2, 1), (5, 2), (6, 2), (7, 2)], 2, [1, 2]),
        (
            "require four device, best result",
            [(1, 1), (2, 1), (5, 2), (6, 2), (7, 2), (8, 2)],
            4,
            [5, 6, 7, 8],
        ),
        (
            "require four device, general result",
            [(1, 1), (2, 1), (5, 2), (6, 2), (7, 2)],
            4,
            [1, 2, 5, 6],
        ),
        ("no metalink, require two device", [(5, 0), (6, 0), (7, 0)], 2, [5, 6]),
        (
            "part metalink, require two device, best result",
            [(3, 0), (4, 0), (7, 1), (8, 1)],
            2,
            [7, 8],
        ),
        (
            "part metalink, require four device, bad result",
            [(3, 0), (4, 0), (6, 1), (7, 1), (8, 1)],
            4,
            [3, 6, 7, 8],
        ),
    ],
)
def test_prioritize_exclusive_devices(name, spec, count, want):
    """``TestPrioritizeExclusiveDevices``, the case named: exclusive sGPUs (vcore 100) of
    a pod without app class come from the smallest link zone that holds them all; else
    zones smallest first, then GPUs outside any zone (sorted here by index: HAMi's last
    case lists GPU-6, 7, 8, 3)."""
    usage = _zoned(spec)
    request = DeviceRequest(vendor=SGPU, count=count, memory_pct=100, cores_pct=100)
    out = fit.fit(
        request,
        NodeInfo(name="n", devices=tuple(u.device for u in usage)),
        usage,
        {"metadata": {"annotations": {}}},
        DevicePolicy.SPREAD,
    )
    assert sorted(d.uuid for d in out.devices) == sorted(f"GPU-{n}" for n in want)


@pytest.mark.parametrize(
    ("name", "ann", "taken", "previous"),
    [
        (
            "topology-aware exclusive allocation",
            {"metax-tech.com/sgpu-topology-aware": "true"},
            [("GPU-3", 100), ("GPU-4", 100)],
            ["GPU-1", "GPU-2", "GPU-3", "GPU-4"],
        ),
        ("online allocation", {APP: "online"}, [("GPU-1", 0)], ["GPU-1", "GPU-2"]),
    ],
)
def test_score_node_policy_independence(name, ann, taken, previous):
    """``TestScoreNodePolicyIndependence``: the topology-aware and online scores are the
    same under binpack and spread. (Its third case, "no hint scores zero", is HAMi adding
    0 to its policy-dependent node score; here the core's node score is used directly.)"""
    usage = [DeviceUsage(device=_sgpu(uuid=u, zone=1, index=i)) for i, u in enumerate(previous)]
    devices = tuple(
        ContainerDevice(uuid=u, vendor=SGPU, memory_mib=1, cores_pct=c) for u, c in taken
    )
    scores = {
        policy: fit.score(
            SGPU,
            usage,
            devices,
            policy,
            pod={"metadata": {"annotations": ann}},
            topology_aware_default=False,
        )
        for policy in (NodePolicy.BINPACK, NodePolicy.SPREAD)
    }
    assert scores[NodePolicy.BINPACK] == scores[NodePolicy.SPREAD]
