"""HAMi 2.10's own Enflame tests (``pkg/device/enflame/device_test.go``, ``gcu_test.go``
at the commit docs/hami-go-tests.md pins), value by value, through this backend's
requests, inventory, fit and bind annotations. Each test names the Go test it takes its
expected values from; what differs on purpose is said where it is asserted."""

from __future__ import annotations

import json

import pytest
from hami_enflame import fit, inventory, profiles, requests

from hami_core.errors import AnnotationError, InvalidInputError
from hami_core.model import (
    ContainerDevice,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
)
from hami_core.plugin import BackendManager
from hami_core.protocol.devicelist import encode_pod_devices

from ..support import node, pipeline, pod

INT32_MAX = 2**31 - 1
#: The profiles of HAMi's DRS fit tests.
HAMI_PROFILES = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}


def ctr(limits=None, requests_=None):
    return {
        "name": "pod-gcu-example1",
        "resources": {"limits": dict(limits or {}), "requests": dict(requests_ or {})},
    }


def drs_gcu(*, count=6, profiles_=None, healthy=True, uuid="node-a-enflame-drs-0"):
    """HAMi's DRS ``DeviceUsage`` of the fit tests: one GCU, 6 slices, 40960 MiB."""
    return DeviceInfo(
        uuid=uuid,
        vendor="Enflame",
        model="Enflame",
        index=0,
        split_count=count,
        memory_mib=40960,
        cores_pct=100,
        healthy=healthy,
        custom=(
            ("minor", "0"),
            ("index", "0"),
            ("profiles", json.dumps(HAMI_PROFILES if profiles_ is None else profiles_)),
        ),
    )


def fit_one(request, device, *, used=0, annotations=None):
    usage = [DeviceUsage(device=device, used_count=used)]
    return fit.fit(
        request,
        NodeInfo(name="node-a", devices=(device,)),
        usage,
        {"metadata": {"annotations": dict(annotations or {})}},
        DevicePolicy.SPREAD,
    )


def drs_request(**limits):
    return requests.parse_request(ctr(limits))


# --- device_test.go ------------------------------------------------------------------


def test_generate_resource_requests_by_slice_count():
    """``TestGenerateResourceRequests``: ``enflame.com/drs-gcu: 3`` is one GCU of the
    profile with 3 slices (HAMi: Nums 1, Memreq 3 in the direct mode)."""
    req = drs_request(**{"enflame.com/drs-gcu": "3"})
    assert (req.vendor, req.count, req.info("drsSlice"), req.info("requestMemory")) == (
        "Enflame",
        1,
        "3",
        "",
    )
    # in requests only, as HAMi reads it there too
    only_requests = requests.parse_request(ctr(requests_={"enflame.com/drs-gcu": "3"}))
    assert only_requests.info("drsSlice") == "3"


def test_generate_resource_requests_by_memory_core():
    """``TestGenerateResourceRequests_ByMemoryCore``: memory 20480 and core 40 are one
    GCU asked by spec (Memreq 20480, Coresreq 40)."""
    req = drs_request(**{"enflame.com/gcu-memory": "20480", "enflame.com/gcu-core": "40"})
    assert (req.vendor, req.count, req.info("requestMemory"), req.cores_pct) == (
        "Enflame",
        1,
        "20480",
        40,
    )
    assert req.info("drsSlice") == ""


def test_fit_selects_the_profile_by_slice_count():
    """``TestFit_SelectProfileByRequest``: 3 slices -> ``3g.20gb`` (id 1): 20480 MiB,
    50 % of the GCU; bind names the profile."""
    result = fit_one(drs_request(**{"enflame.com/drs-gcu": "3"}), drs_gcu())
    assert result.fits and result.summary(1) == ""
    ((uuid, mem, cores),) = [(d.uuid, d.memory_mib, d.cores_pct) for d in result.devices]
    assert (uuid, mem, cores) == ("node-a-enflame-drs-0", 20480, 50)
    entry = _assigned(result.devices)
    assert (entry["profileName"], entry["profileID"]) == ("3g.20gb", "1")


def test_fit_selects_the_profile_by_memory_and_core():
    """``TestFit_SelectProfileByMemoryCoreRequest``: 20480 (MiB, above twice the largest
    profile's 40 GiB) and 40 % -> ``3g.20gb``: 20480 MiB, 50 %."""
    req = drs_request(**{"enflame.com/gcu-memory": "20480", "enflame.com/gcu-core": "40"})
    result = fit_one(req, drs_gcu())
    assert result.fits
    assert [(d.memory_mib, d.cores_pct) for d in result.devices] == [(20480, 50)]
    entry = _assigned(result.devices)
    assert (entry["profileName"], entry["profileID"]) == ("3g.20gb", "1")


def _assigned(devices):
    out = fit.bind_annotations(
        {"spec": {"containers": [{"name": "pod-gcu-example1"}]}},
        NodeInfo(name="node-a", devices=(drs_gcu(),)),
        (tuple(devices),),
        clock_ns=lambda: 1,
    )
    return json.loads(out["assigned-containers"])["pod-gcu-example1"]


def test_mutate_admission_by_memory_core_api():
    """``TestMutateAdmission_ByMemoryCoreAPI``: memory 20480 + core 50 is an Enflame
    container (found, no error); the webhook copies both to requests."""
    c = ctr({"enflame.com/gcu-memory": "20480", "enflame.com/gcu-core": "50"})
    out = requests.mutate(c, "/spec/containers/0")
    assert out is not None and not out.denial
    assert out.resources == {"enflame.com/gcu-memory": "20480", "enflame.com/gcu-core": "50"}


def test_fit_profile_not_found_is_mode_not_fit():
    """``TestFit_ProfileNotFound``: only ``1g.6gb`` on the GCU, 3 slices asked ->
    no fit, ``ModeNotFit``."""
    result = fit_one(
        drs_request(**{"enflame.com/drs-gcu": "3"}), drs_gcu(profiles_={"1g.6gb": "0"})
    )
    assert not result.fits and result.summary(1) == "1/1 ModeNotFit"


def test_fit_mutex_rejects_a_used_gcu():
    """``TestFit_MutexRejectsUsedDevice``: 2 slices, 1 used, policy ``mutex`` ->
    ``1/1 ExclusiveDeviceAllocateConflict``."""
    result = fit_one(
        drs_request(**{"enflame.com/drs-gcu": "3"}),
        drs_gcu(count=2),
        used=1,
        annotations={"hami.io/gpu-scheduler-policy": "mutex"},
    )
    assert not result.fits and result.summary(1) == "1/1 ExclusiveDeviceAllocateConflict"


def test_fit_unhealthy_gcu_rejected():
    """``TestFit_UnhealthyDeviceRejected``: an unhealthy GCU is ``CardNotHealth``."""
    result = fit_one(drs_request(**{"enflame.com/drs-gcu": "3"}), drs_gcu(healthy=False))
    assert not result.fits and result.summary(1) == "1/1 CardNotHealth"


def test_patch_annotations_drs_fields():
    """``TestPatchAnnotations_DRSFields``: a 3-slice ``3g.20gb`` (20480 MiB, 50 %) on GCU
    index 0, minor 0: the allocation lists ``,20480,50``; ``gcu-assigned`` false, index
    0, minor 0, request size 3, a time, and ``assigned-containers`` with the container's
    request 3 and profile ``3g.20gb`` / ``1``."""
    devices = (
        (
            ContainerDevice(
                uuid="node-a-enflame-drs-0", vendor="Enflame", memory_mib=20480, cores_pct=50
            ),
        ),
    )
    out = fit.bind_annotations(
        {"spec": {"containers": [{"name": "pod-gcu-example1"}]}},
        NodeInfo(name="node-a", devices=(drs_gcu(),)),
        devices,
        clock_ns=lambda: 1764547200000000000,
    )
    assert ",20480,50" in encode_pod_devices(devices)
    assert out["enflame.com/gcu-assigned"] == "false"
    assert out["enflame.com/gcu-assigned-index"] == "0"
    assert out["enflame.com/gcu-assigned-id"] == "0"
    assert out["enflame.com/gcu-assigned-minor"] == "0"
    assert out["enflame.com/gcu-request-size"] == "3"
    assert out["enflame.com/gcu-assigned-time"] == "1764547200000000000"
    assert json.loads(out["assigned-containers"]) == {
        "pod-gcu-example1": {
            "allocated": False,
            "request": 3,
            "profileID": "1",
            "profileName": "3g.20gb",
        }
    }


def _capacity(capacity):
    value = json.dumps(
        {"devices": [{"index": "0", "minor": "0", "capacity": capacity}], "profiles": HAMI_PROFILES}
    )
    return node("node-a", annotations={"enflame.com/gcu-drs-capacity": value})


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1e300"])
def test_drs_capacity_rejects_nan_inf_and_huge_floats(bad):
    """``TestParseDRSCapacity_RejectsNaNAndInf``: NaN, +-Inf and 1e300 are no capacity
    (the node's annotation is broken, named in the error)."""
    devices = '[{"index":"0","minor":"0","capacity":' + bad + "}]"
    value = '{"devices":' + devices + ',"profiles":{"6g.40gb":"2"}}'
    with pytest.raises(AnnotationError, match="enflame-drs|positive capacity"):
        inventory.drs_gcus(node("node-a", annotations={"enflame.com/gcu-drs-capacity": value}))


@pytest.mark.parametrize(
    ("capacity", "slices"),
    [(42, 42), (42.0, 42), ("42", 42), ("2147483648", INT32_MAX), (2**40, INT32_MAX)],
)
def test_drs_capacity_numbers_and_int32_clamp(capacity, slices):
    """``TestParseDRSCapacity_RejectsNaNAndInf``: 42 (a JSON number) is 42 slices; the
    string ``"2147483648"`` is clamped to 2^31-1 (``clampToInt32``, ``TestClampToInt32``)."""
    (d,) = inventory.drs_gcus(_capacity(capacity))
    assert d.split_count == slices


@pytest.mark.parametrize(
    "oversized",
    [
        {"4294967299g.4294967299gb": "0"},
        {"4294967299g.20gb": "0"},
        {"2g.4294967299gb": "0"},
    ],
)
def test_oversized_profiles_are_rejected(oversized):
    """``TestFit_OversizedProfileRejected``: a profile beyond int32 slices or MiB is no
    fit (HAMi: no device in the result). Here such a profile is unreadable: a GCU that
    publishes only such profiles is ``ModeNotFit``, and a node annotation with only such
    profiles is refused with its key named (HAMi would register it with overflowed int32
    memory). Its fourth case (``maxSlice`` 1 below a profile of 2^31-1 slices) cannot
    arise here: the compute share is derived from the profiles themselves."""
    req = DeviceRequest(vendor="Enflame", count=1, memory_pct=100, custom=(("requestMemory", "3"),))
    result = fit_one(req, drs_gcu(profiles_=oversized))
    assert not result.fits and result.devices == () and result.summary(1) == "1/1 ModeNotFit"
    value = json.dumps(
        {"devices": [{"index": "0", "minor": "0", "capacity": 6}], "profiles": oversized}
    )
    with pytest.raises(AnnotationError, match="enflame.com/gcu-drs-capacity"):
        inventory.drs_gcus(node("node-a", annotations={"enflame.com/gcu-drs-capacity": value}))
    # next to a readable profile, the oversized one is ignored, not the node
    mixed = json.dumps(
        {
            "devices": [{"index": "0", "capacity": 6}],
            "profiles": {**oversized, "6g.40gb": "2"},
        }
    )
    (d,) = inventory.drs_gcus(node("node-a", annotations={"enflame.com/gcu-drs-capacity": mixed}))
    assert (d.memory_mib, d.split_count) == (40960, 6)
    assert profiles.parse_name("2147483647g.20gb") == (INT32_MAX, 20)
    assert profiles.parse_name("2147483648g.20gb") == (0, 0)


@pytest.mark.parametrize(
    "limits",
    [
        {"enflame.com/drs-gcu": "2200000000"},
        {"enflame.com/gcu-memory": "2200000000"},
    ],
)
def test_tenant_oversized_requests_are_denied(limits):
    """A tenant's request beyond int32 (HAMi's ``GenerateResourceRequests`` drops it and
    the pod runs without an Enflame device) is denied here with the resource named."""
    name = next(iter(limits))
    with pytest.raises(InvalidInputError, match=name):
        requests.parse_request(ctr(limits))
    assert name in requests.mutate(ctr(limits), "/spec/containers/0").denial


# --- gcu_test.go -----------------------------------------------------------------------


def test_init_gcu_device_annotation_keys_and_common_word():
    """``TestInitGCUDevice``, ``TestGCUDevices_CommonWord``: resource ``enflame.com/gcu``,
    vendor ``GCU``, ``hami.io/enflame-gcu-devices-to-allocate`` / ``-allocated``."""
    info = BackendManager.from_entry_points(disabled=[]).infos["enflame"]
    gcu = next(t for t in info.device_types if t.vendor == "GCU")
    assert gcu.resources.count == "enflame.com/gcu"
    assert gcu.to_allocate_annotation == "hami.io/enflame-gcu-devices-to-allocate"
    assert gcu.allocated_annotation == "hami.io/enflame-gcu-devices-allocated"


@pytest.mark.parametrize(
    ("limits", "found"),
    [({"enflame.com/gcu": 2}, True), ({}, False)],
)
def test_gcu_mutate_admission(limits, found):
    """``TestGCUDevices_MutateAdmission``: ``enflame.com/gcu: 2`` in limits is found, no
    error; no GCU resource is not."""
    out = requests.mutate(ctr(limits), "/spec/containers/0")
    assert (out is not None) is found
    if found:
        assert not out.denial and out.resources == {"enflame.com/gcu": 2}


@pytest.mark.parametrize(("capacity", "healthy"), [({"enflame.com/gcu": "2"}, True), ({}, False)])
def test_gcu_check_health_is_capacity(capacity, healthy):
    """``TestGCUDevices_CheckHealth``: a node with ``enflame.com/gcu`` capacity is healthy
    for GCUs, one without is not (here: it has no GCU devices at all)."""
    devices = inventory.whole_gcus(node("testnode", capacity=capacity))
    assert bool(devices) is healthy


def test_gcu_get_node_devices():
    """``TestGCUDevices_GetNodeDevices``: capacity 2 -> ``testnode-GCU-0`` / ``-1``, index
    0 / 1, Count 1, Devmem 100, Devcore 100, type GCU; no capacity -> no devices."""
    devices = inventory.whole_gcus(node("testnode", capacity={"enflame.com/gcu": "2"}))
    assert [
        (d.uuid, d.index, d.split_count, d.memory_mib, d.cores_pct, d.vendor, d.numa, d.healthy)
        for d in devices
    ] == [
        ("testnode-GCU-0", 0, 1, 100, 100, "GCU", 0, True),
        ("testnode-GCU-1", 1, 1, 100, 100, "GCU", 0, True),
    ]
    assert inventory.whole_gcus(node("testnode")) is None


def test_gcu_patch_annotations():
    """``TestGCUDevices_PatchAnnotations``: GCU ``testnode-GCU-0`` is
    ``testnode-GCU-0,GCU,0,0:;`` in both the to-allocate and the allocated annotation;
    no devices, no annotations (the Enflame backend adds none of its own for GCUs)."""
    devices = ((ContainerDevice(uuid="testnode-GCU-0", vendor="GCU", memory_mib=0, cores_pct=0),),)
    assert encode_pod_devices(devices) == "testnode-GCU-0,GCU,0,0:;"
    assert (
        fit.bind_annotations({"spec": {"containers": [{"name": "c"}]}}, NodeInfo(name="n"), ())
        == {}
    )
    p = pipeline(node("testnode", capacity={"enflame.com/gcu": "1"}), backends=("enflame",))
    assert p.submit(pod("g", {"enflame.com/gcu": "1"})).node == "testnode"
    ann = p.cluster.get_pod("default", "g")["metadata"]["annotations"]
    # HAMi's Fit books Memreq / Coresreq 100 on a whole GCU, so its bind writes this too;
    # the to-allocate copy was consumed by the device plugin's Allocate
    assert ann["hami.io/enflame-gcu-devices-allocated"] == "testnode-GCU-0,GCU,100,100:;"
    assert "hami.io/enflame-gcu-devices-to-allocate" in ann
    assert not any(k.startswith("enflame.com/") for k in ann)


@pytest.mark.parametrize(
    ("resources", "count"),
    [
        (ctr({"enflame.com/gcu": "3"}), 3),
        (ctr(requests_={"enflame.com/gcu": "2"}), 2),
        (ctr(), None),
    ],
)
def test_gcu_generate_resource_requests(resources, count):
    """``TestGCUDevices_GenerateResourceRequests``: 3 in limits, 2 in requests -> that
    many whole GCUs (memory 100 %, cores 100); none -> no request."""
    req = requests.parse_request(resources)
    if count is None:
        assert req is None
    else:
        assert req == DeviceRequest(vendor="GCU", count=count, memory_pct=100, cores_pct=100)


def gcu(uuid, index, *, healthy=True):
    return DeviceInfo(
        uuid=uuid,
        vendor="GCU",
        model="GCU",
        index=index,
        split_count=1,
        memory_mib=100,
        cores_pct=100,
        healthy=healthy,
    )


WHOLE = DeviceRequest(vendor="GCU", count=1, memory_pct=100, cores_pct=100)


@pytest.mark.parametrize(
    ("name", "devices", "used", "count", "want"),
    [
        ("fit success", [gcu("dev-0", 0), gcu("dev-1", 1)], 0, 1, ""),
        (
            "fit fail: device already used",
            [gcu("dev-0", 0)],
            1,
            1,
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        ("fit fail: CardNotHealth", [gcu("dev-0", 0, healthy=False)], 0, 1, "1/1 CardNotHealth"),
        # HAMi: "1/1 AllocatedCardsInsufficientRequest" / "2/2 ..."; its scheduler checks
        # the device count first (pkg/scheduler/score.go), as this fit does
        ("fit fail: insufficient devices", [gcu("dev-0", 0)], 0, 2, "NodeInsufficientDevice"),
        (
            "fit fail: partial allocation for multiple cards",
            [gcu("dev-0", 0), gcu("dev-1", 1)],
            0,
            3,
            "NodeInsufficientDevice",
        ),
    ],
)
def test_gcu_fit(name, devices, used, count, want):
    """``TestGCUDevices_Fit``, the case named, with HAMi's reason string. "fit success"
    takes ``dev-0`` here (HAMi's reverse scan takes ``dev-1``; we take the lowest index);
    "type mismatch" cannot happen here (a request reaches its own vendor's fit only)."""
    usage = [DeviceUsage(device=d, used_count=used) for d in devices]
    request = DeviceRequest(vendor="GCU", count=count, memory_pct=100, cores_pct=100)
    result = fit.fit(
        request,
        NodeInfo(name="n", devices=tuple(devices)),
        usage,
        {"metadata": {"annotations": {}}},
        DevicePolicy.SPREAD,
    )
    assert result.summary(len(devices)) == want
    if not want:
        assert [(d.uuid, d.memory_mib, d.cores_pct) for d in result.devices] == [
            ("dev-0", 100, 100)
        ]


def test_gcu_add_resource_usage_through_the_pipeline():
    """``TestGCUDevices_AddResourceUsage``: a placed container adds one sharer and its
    memory and cores to the GCU (HAMi: Used 0 -> 1). A GCU taken is then refused to the
    next pod with HAMi's ``ExclusiveDeviceAllocateConflict``."""
    p = pipeline(node("testnode", capacity={"enflame.com/gcu": "1"}), backends=("enflame",))
    assert p.submit(pod("a", {"enflame.com/gcu": "1"})).node == "testnode"
    second = p.submit(pod("b", {"enflame.com/gcu": "1"}))
    assert second.node is None
    assert "ExclusiveDeviceAllocateConflict" in second.filter.failed["testnode"]
