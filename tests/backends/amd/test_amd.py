"""AMD: requests, CU-count fit, discovery from ROCm tool output, allocation env and the
pipeline. Expected values from HAMi 2.10 ``pkg/device/amd/device_test.go``
(``TestMutateAdmission``, ``TestGenerateResourceRequests``, ``TestDevices_Fit``) and
``docs/develop/amd-vgpu.md`` §5.2 (25 % / 33 % / 67 % of 304 CUs)."""

from pathlib import Path

import pytest
from hami_amd import allocate, discover, fit, requests

from hami_core.deviceplugin.nodestate import FileNodeState
from hami_core.errors import InvalidInputError
from hami_core.model import (
    ContainerDevice,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    MemoryNodeState,
    NodeInfo,
    ReasonCode,
)
from hami_core.protocol import encode_inventory
from hami_core.protocol.config import VendorConfig
from hami_core.protocol.devicelist import decode_pod_devices

from ..support import node, pipeline, pod, quota

SAMPLES = Path(__file__).parent / "samples"
CFG = VendorConfig()


def ctr(**limits):
    keys = {"count": "amd.com/gpu", "mem": "amd.com/gpumem", "cores": "amd.com/gpucores"}
    return {"name": "main", "resources": {"limits": {keys[k]: v for k, v in limits.items()}}}


def test_requests_as_hami():
    assert requests.parse_request(ctr(count="2", mem="4096", cores="33"), CFG) == DeviceRequest(
        vendor="AMD", count=2, memory_mib=4096, cores_pct=33
    )
    # memory without cores: Coresreq 100
    assert requests.parse_request(ctr(count="1", mem="4096"), CFG).cores_pct == 100
    assert requests.parse_request(ctr(count="1"), CFG) == DeviceRequest(
        vendor="AMD", count=1, memory_pct=100, cores_pct=100
    )
    assert requests.parse_request({"name": "main", "resources": {"limits": {}}}, CFG) is None


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"count": "0"}, "amd.com/gpu must be greater than 0"),
        ({"count": "2147483648"}, "amd.com/gpu"),
        ({"count": "1", "mem": "-1"}, "amd.com/gpumem"),
        ({"count": "1", "mem": "2147483648"}, "amd.com/gpumem"),
        ({"count": "1", "cores": "0"}, "must be an integer percentage between 1 and 100"),
        ({"count": "1", "cores": "101"}, "must be an integer percentage between 1 and 100"),
    ],
)
def test_illegal_values_are_denied(limits, message):
    with pytest.raises(InvalidInputError, match=message):
        requests.parse_request(ctr(**limits), CFG)
    assert message in requests.mutate(ctr(**limits), "/spec/containers/0", CFG).denial


def gpu(uuid, *, index=0, memory=1000, cus=100, count=2):
    return DeviceInfo(
        uuid=uuid,
        vendor="AMD",
        model="AMD Instinct MI300X",
        index=index,
        split_count=count,
        memory_mib=memory,
        cores_pct=cus,
    )


def run(request, usage, ann=None):
    return fit.fit(
        request,
        NodeInfo(name="n", devices=tuple(u.device for u in usage)),
        usage,
        {"metadata": {"annotations": ann or {}}},
        DevicePolicy.SPREAD,
    )


@pytest.mark.parametrize(("pct", "cus"), [(25, 76), (33, 100), (67, 203), (1, 3), (100, 304)])
def test_percent_to_compute_units_as_the_design_doc(pct, cus):
    out = run(
        DeviceRequest(vendor="AMD", count=1, memory_mib=100, cores_pct=pct),
        [DeviceUsage(device=gpu("g", cus=304))],
    )
    assert out.devices[0].cores_pct == cus


def test_fit_cases_of_hami():
    whole = run(
        DeviceRequest(vendor="AMD", count=2, memory_pct=100, cores_pct=0),
        [DeviceUsage(device=gpu("dev-0")), DeviceUsage(device=gpu("dev-1", index=1))],
    )
    assert [(d.memory_mib, d.cores_pct) for d in whole.devices] == [(1000, 100), (1000, 100)]
    tiny = run(
        DeviceRequest(vendor="AMD", count=1, memory_mib=100, cores_pct=1),
        [DeviceUsage(device=gpu("g", cus=64))],
    )
    assert tiny.devices[0].cores_pct == 1
    mem = run(
        DeviceRequest(vendor="AMD", count=1, memory_mib=500, cores_pct=10),
        [DeviceUsage(device=gpu("g"), used_memory_mib=900)],
    )
    assert mem.device_reasons == {"g": ReasonCode.CARD_INSUFFICIENT_MEMORY}
    core = run(
        DeviceRequest(vendor="AMD", count=1, memory_mib=100, cores_pct=100),
        [DeviceUsage(device=gpu("g", cus=10), used_cores_pct=9, used_count=1)],
    )
    assert core.device_reasons == {"g": ReasonCode.CARD_INSUFFICIENT_CORE}
    uuid = run(
        DeviceRequest(vendor="AMD", count=1, memory_mib=100, cores_pct=10),
        [DeviceUsage(device=gpu("dev-1"))],
        {"amd.com/use-gpu-uuid": "dev-0"},
    )
    assert uuid.device_reasons == {"dev-1": ReasonCode.CARD_UUID_MISMATCH}
    sliced = run(
        DeviceRequest(vendor="AMD", count=1, memory_mib=100, cores_pct=10),
        [DeviceUsage(device=gpu("g"), used_count=2)],
    )
    assert sliced.device_reasons == {"g": ReasonCode.CARD_TIME_SLICING_EXHAUSTED}
    typed = run(
        DeviceRequest(vendor="AMD", count=1, memory_mib=100, cores_pct=10),
        [DeviceUsage(device=gpu("g"))],
        {"amd.com/nouse-gputype": "MI300X"},
    )
    assert typed.device_reasons == {"g": ReasonCode.CARD_TYPE_MISMATCH}


class Fake:
    def __init__(self, smi=True):
        self.smi = smi

    def __call__(self, argv):
        if argv[0] == "rocm-smi":
            return (SAMPLES / "rocm-smi.json").read_text() if self.smi else None
        return (SAMPLES / "rocminfo.txt").read_text()


def test_discovery_from_rocm_smi_and_rocminfo():
    devices = discover.discover(VendorConfig(split_count=4), Fake())
    assert [
        (d.uuid, d.index, d.model, d.memory_mib, d.cores_pct, d.split_count) for d in devices
    ] == [
        ("GPU-18f68e602b8a790f", 0, "AMD Instinct MI300X", 196592, 304, 4),
        ("GPU-5ef3d46e0e2e0fd2", 1, "AMD Instinct MI300X", 196592, 304, 4),
    ]
    assert discover.discover(CFG, Fake(smi=False)) is None


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_allocate_disjoint_cu_masks_and_memory_limit(tmp_path, kind):
    devices = discover.discover(CFG, Fake())
    # the device plugin's records (a file per record, kept across restarts) or simulate's
    state = FileNodeState(tmp_path) if kind == "file" else MemoryNodeState()
    slice_ = (
        ContainerDevice(uuid="GPU-18f68e602b8a790f", vendor="AMD", memory_mib=16384, cores_pct=76),
    )
    a = allocate.allocate({"metadata": {"uid": "p1"}}, {"name": "c"}, slice_, devices, state)
    b = allocate.allocate({"metadata": {"uid": "p2"}}, {"name": "c"}, slice_, devices, state)
    assert a.envs == {
        "ROCR_VISIBLE_DEVICES": "GPU-18f68e602b8a790f",
        "HSA_CU_MASK": "0:0-75",
        "HIP_DEVICE_MEMORY_LIMIT": "16384m",
    }
    assert b.envs["HSA_CU_MASK"] == "0:76-151"
    if kind == "file":  # a restarted device plugin reads the ranges handed out
        assert sorted(p.name for p in tmp_path.iterdir()) == ["cu-masks.json"]
        state = FileNodeState(tmp_path)
    again = allocate.allocate({"metadata": {"uid": "p1"}}, {"name": "c"}, slice_, devices, state)
    assert again.envs == a.envs
    assert allocate.CuMasks(state).prune(["p2"]) == ["p1/c"]
    c = allocate.allocate({"metadata": {"uid": "p3"}}, {"name": "c"}, slice_, devices, state)
    assert c.envs["HSA_CU_MASK"] == "0:0-75"
    big = (ContainerDevice(uuid="GPU-18f68e602b8a790f", vendor="AMD", memory_mib=1, cores_pct=300),)
    with pytest.raises(InvalidInputError, match="no free range of 300 CUs"):
        allocate.allocate({"metadata": {"uid": "p4"}}, {"name": "c"}, big, devices, state)


def test_pipeline_places_and_allocates():
    devices = discover.discover(CFG, Fake())
    n = node(
        "amd-1",
        annotations={"hami.io/node-amd-register": encode_inventory(devices)},
        capacity={"amd.com/gpu": "20"},
    )
    p = pipeline(n, backends=("amd", "nvidia"))
    out = p.submit(
        pod("a", {"amd.com/gpu": "1", "amd.com/gpumem": "16384", "amd.com/gpucores": "25"})
    )
    assert out.denied == "" and out.error == "" and out.node == "amd-1"
    (entry,) = decode_pod_devices(
        p.cluster.get_pod("default", "a")["metadata"]["annotations"][
            "hami.io/amd-devices-allocated"
        ]
    )
    assert (entry[0].memory_mib, entry[0].cores_pct) == (16384, 76)
    assert out.envs["main"]["ROCR_VISIBLE_DEVICES"] == entry[0].uuid
    assert out.envs["main"]["HIP_DEVICE_MEMORY_LIMIT"] == "16384m"
    bad = p.submit(pod("b", {"amd.com/gpu": "1", "amd.com/gpucores": "0"}))
    assert "between 1 and 100" in bad.denied


def test_quota_in_mib():
    devices = discover.discover(CFG, Fake())
    p = pipeline(
        node("amd-1", annotations={"hami.io/node-amd-register": encode_inventory(devices)}),
        backends=("amd",),
    )
    p.cluster.add_quota(quota("q", {"limits.amd.com/gpumem": "20000"}))
    assert p.submit(pod("a", {"amd.com/gpu": "1", "amd.com/gpumem": "16384"})).node == "amd-1"
    assert (
        "limits.amd.com/gpumem"
        in p.submit(pod("b", {"amd.com/gpu": "1", "amd.com/gpumem": "4096"})).denied
    )


def test_gpucores_quota_in_percent_not_compute_units():
    """``amd.com/gpucores`` is a percentage (HAMi's ``MutateAdmission``: 1..100); the
    device list carries 76 CUs for 25 % of a 304-CU MI300X. A quota of 60 takes two pods
    at 25 % (50), not zero (76 CUs > 60)."""
    devices = discover.discover(CFG, Fake())
    p = pipeline(
        node("amd-1", annotations={"hami.io/node-amd-register": encode_inventory(devices)}),
        backends=("amd",),
    )
    p.cluster.add_quota(quota("q", {"limits.amd.com/gpucores": "60"}))
    quarter = {"amd.com/gpu": "1", "amd.com/gpumem": "1024", "amd.com/gpucores": "25"}
    assert p.submit(pod("a", quarter)).node == "amd-1"
    ann = p.cluster.get_pod("default", "a")["metadata"]["annotations"]
    assert decode_pod_devices(ann["hami.io/amd-devices-allocated"])[0][0].cores_pct == 76
    assert p.submit(pod("b", quarter)).node == "amd-1"
    over = p.submit(pod("c", quarter))
    assert "limits.amd.com/gpucores" in over.denied
    # no gpucores: the whole GPU's compute, 100 percent
    p2 = pipeline(
        node("amd-2", annotations={"hami.io/node-amd-register": encode_inventory(devices)}),
        backends=("amd",),
    )
    p2.cluster.add_quota(quota("q", {"limits.amd.com/gpucores": "150"}))
    whole = {"amd.com/gpu": "1", "amd.com/gpumem": "1024"}
    assert p2.submit(pod("w1", whole)).node == "amd-2"
    assert "limits.amd.com/gpucores" in p2.submit(pod("w2", whole)).denied


def test_fit_core_percentage_clamps_and_health_as_hami():
    """``device_test.go::TestDevices_Fit``: "core percentage maps per device" (50 % of a
    100-CU GPU is 50 CUs, of a 10-CU GPU 5), "clamps a core request to the device total"
    (101 % of 64 CUs is 64: a stated 101 is refused at admission here, as by HAMi's
    webhook, so the largest request, 100 %, is the clamp's edge) and "unhealthy device is
    rejected" (``CardNotHealth``). HAMi's
    "two whole cards" lists dev-1 before dev-0 (its reverse scan); the same two GPUs here,
    index order (``test_fit_cases_of_hami``)."""
    two = [DeviceUsage(device=gpu("dev-0", cus=10)), DeviceUsage(device=gpu("dev-1", index=1))]
    half = DeviceRequest(vendor="AMD", count=1, memory_mib=500, cores_pct=50)
    (d,) = run(half, two).devices
    assert d.memory_mib == 500 and d.cores_pct == {"dev-0": 5, "dev-1": 50}[d.uuid]
    full = DeviceRequest(vendor="AMD", count=1, memory_mib=100, cores_pct=100)
    assert fit.compute_units(gpu("g", cus=64), full) == 64
    sick = DeviceInfo(
        uuid="dev-0",
        vendor="AMD",
        model="MI300X",
        split_count=2,
        memory_mib=1000,
        cores_pct=100,
        healthy=False,
    )
    assert run(half, [DeviceUsage(device=sick)]).device_reasons == {
        "dev-0": ReasonCode.CARD_NOT_HEALTH
    }


@pytest.mark.parametrize(
    ("case", "annotations", "model", "want"),
    [
        ("no annotations", {}, "MI300X", True),
        ("non-matching use type", {"amd.com/use-gputype": "MI250"}, "MI300X", False),
        ("matching nouse type excludes card", {"amd.com/nouse-gputype": "MI300X"}, "MI300X", False),
        ("non-matching nouse type keeps card", {"amd.com/nouse-gputype": "MI250"}, "MI300X", True),
        ("empty nouse annotation keeps card", {"amd.com/nouse-gputype": ""}, "MI300X", True),
        ("empty use annotation keeps card", {"amd.com/use-gputype": ""}, "MI300X", True),
        (
            "whitespace-only nouse annotation keeps card",
            {"amd.com/nouse-gputype": "   "},
            "MI300X",
            True,
        ),
        (
            "whitespace-only use annotation keeps card",
            {"amd.com/use-gputype": "   "},
            "MI300X",
            True,
        ),
        (
            "nouse with trailing comma only excludes named type",
            {"amd.com/nouse-gputype": "MI250,"},
            "MI300X",
            True,
        ),
        (
            "nouse with leading comma only excludes named type",
            {"amd.com/nouse-gputype": ",MI250"},
            "MI300X",
            True,
        ),
        (
            "nouse with blank member still excludes named type",
            {"amd.com/nouse-gputype": " MI250X , "},
            "MI250X",
            False,
        ),
        ("nouse with only commas keeps card", {"amd.com/nouse-gputype": ", "}, "MI300X", True),
        (
            "use with trailing comma matches named type only",
            {"amd.com/use-gputype": "MI300,"},
            "MI250X",
            False,
        ),
        # Differences, on purpose: tokens are whole words of the model (PROTOCOL.md §5), so
        # HAMi's substring matches "MI300" -> "MI300X" do not hold here; a use list of
        # nothing but commas is no constraint, as an empty one is (HAMi refuses every card).
        (
            "matching use type (substring in HAMi)",
            {"amd.com/use-gputype": "MI300"},
            "MI300X",
            False,
        ),
        ("use with only commas (HAMi: rejects)", {"amd.com/use-gputype": ", "}, "MI300X", True),
    ],
)
def test_check_amd_type(case, annotations, model, want):
    """``device_test.go::TestCheckAMDType``, the case named (HAMi's value unless the case
    says otherwise): ``amd.com/use-gputype`` / ``nouse-gputype`` against the GPU's model."""
    out = run(
        DeviceRequest(vendor="AMD", count=1, memory_mib=100, cores_pct=10),
        [
            DeviceUsage(
                device=gpu("g").__class__(
                    uuid="g",
                    vendor="AMD",
                    model=model,
                    split_count=2,
                    memory_mib=1000,
                    cores_pct=100,
                )
            )
        ],
        annotations,
    )
    assert out.fits is want, case
    if not want:
        assert out.device_reasons == {"g": ReasonCode.CARD_TYPE_MISMATCH}


@pytest.mark.parametrize(
    ("case", "limits", "named"),
    [
        ("gpu memory in limits", {"mem": "4096"}, "amd.com/gpumem without amd.com/gpu"),
        ("core percentage in limits", {"cores": "50"}, "amd.com/gpucores without amd.com/gpu"),
        ("both", {"mem": "4096", "cores": "50"}, "amd.com/gpumem and amd.com/gpucores"),
    ],
)
def test_memory_or_cores_without_a_count_are_denied(case, limits, named):
    """Gap decided (docs/hami-go-tests.md "Decisions taken"): ``device_test.go::
    Test_MutateAdmission`` "gpu memory in limits" / "core percentage in limits": HAMi's
    webhook takes such a pod, and its ``GenerateResourceRequests`` then reads no request
    ("no gpu limits -> empty"), so the pod is scheduled with no GPU and fails at the
    kubelet on a resource no node offers. Here the container is refused naming what is
    missing: the webhook denies the pod (a pod of another scheduler is left alone)."""
    with pytest.raises(InvalidInputError, match=named):
        requests.parse_request(ctr(**limits), CFG)
    res = requests.mutate(ctr(**limits), "/spec/containers/0", CFG)
    assert res is not None and named in (res.denial or ""), case
    from tests.unit.test_admission import review

    p = pod("p", {k: v for k, v in ctr(**limits)["resources"]["limits"].items()})
    out = review(p)
    assert not out.allowed and named in out.message
    other = pod("q", dict(p["spec"]["containers"][0]["resources"]["limits"]))
    other["spec"]["schedulerName"] = "volcano"
    assert review(other).allowed
