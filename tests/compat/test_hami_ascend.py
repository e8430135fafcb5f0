"""HAMi 2.10 ``pkg/device/ascend/device_test.go`` cases, with HAMi's expected values
(issue #15 item 11). HAMi's ``MutateAdmission`` answers (handled, error): an error is a
denial here, naming the container and the resource; "not handled" is no Ascend request.
The 910A chip of these tests (32768 MiB, templates vir02 2184, vir04 4369, vir08 8738,
vir16 17476) is our default 910A model."""

from __future__ import annotations

import pytest
from hami_ascend import plugin
from hami_ascend.admission import mutate_container
from hami_ascend.requests import parse_request

from hami_core.errors import InvalidInputError
from hami_core.testing import mutated, section

ASCEND = "pkg/device/ascend/device_test.go"
CFG = section(plugin)


def _ctr(limits, requests=None):
    res = {"limits": dict(limits)}
    if requests is not None:
        res["requests"] = dict(requests)
    return {"name": "c", "resources": res}


def _pod(c, annotations=None):
    return {
        "metadata": {"name": "p", "annotations": annotations or {}},
        "spec": {"containers": [c]},
    }


def _mutate(c, annotations=None):
    p = _pod(c, annotations)
    return p, mutate_container(p, c, "/spec/containers/0", CFG)


A = "huawei.com/Ascend910A"
AM = "huawei.com/Ascend910A-memory"


def test_mutate_admission_no_limits_is_not_an_ascend_request():
    """``Test_MutateAdmission`` "no set to resources limits": not handled."""
    assert _mutate(_ctr({}))[1] is None


@pytest.mark.parametrize(
    ("case", "limits"),
    [
        # HAMi: (true, "vNPU not supported for multiple devices")
        ("resourcename and resourcememoryname set to resources limits", {A: "2", AM: "8738"}),
        # HAMi: (false, "huawei.com/Ascend910A-memory 40000 is invalid")
        ("resourcememoryname is invalid", {A: "2", AM: "40000"}),
    ],
)
def test_mutate_admission_errors_are_denials(case, limits):
    """``Test_MutateAdmission``, the case named: HAMi's webhook returns an error."""
    _, res = _mutate(_ctr(limits))
    assert res is not None and res.denial and AM in res.denial, case


def test_mutate_admission_memory_above_the_templates_takes_the_whole_chip():
    """``Test_MutateAdmission`` "resourcememoryname not within the template scope, but
    smaller than MemoryCapacity": 1 x 20000 MiB is handled; HAMi's ``trimMemory`` gives the
    chip's MemoryAllocatable (32768), written to limits and requests."""
    c = _ctr({A: "1", AM: "20000"}, {AM: "20000"})
    p, res = _mutate(c)
    out = mutated(p, "/spec/containers/0", res)
    resources = out["spec"]["containers"][0]["resources"]
    assert resources["limits"][AM] == resources["requests"][AM] == "32768"


@pytest.mark.parametrize(
    ("case", "limits", "memory"),
    [
        ("memory limit set, requests block absent", {A: "1", AM: "8738"}, "8738"),
        ("count only, no memory limit, requests block absent", {A: "1"}, "32768"),
    ],
)
def test_mutate_admission_nil_requests(case, limits, memory):
    """``Test_MutateAdmission_NilRequests``: limits only; the memory request written is
    the template (8738 is vir08 exactly) or the whole chip."""
    p, res = _mutate(_ctr(limits))
    out = mutated(p, "/spec/containers/0", res)
    assert out["spec"]["containers"][0]["resources"]["requests"][AM] == memory, case


@pytest.mark.parametrize(
    ("case", "limits", "want"),
    [
        (
            "resourcename and resourcememoryname set to limits and request",
            {A: "1", AM: "8738"},
            (1, 8738, 0),
        ),
        ("resourcememoryname don't set to limits and requests", {A: "2"}, (2, 0, 100)),
    ],
)
def test_generate_resource_requests(case, limits, want):
    """``Test_GenerateResourceRequests``, the case named: (count, memory MiB, memory %).
    HAMi's first case asks 2 x 8738; one chip here, as a slice takes one chip (HAMi's
    webhook refuses 2, see above). Cores differ for the whole chip: HAMi books 0 with
    memory 100 %, we book 100 (docs/hami-go-tests.md)."""
    r = parse_request(_pod(_ctr(limits)), _ctr(limits, limits), CFG)
    assert (r.count, r.memory_mib, r.memory_pct) == want, case


def test_generate_resource_requests_vnpu_core_mode():
    """``Test_GenerateResourceRequests_VNPUCoreMode`` "parse custom vNPU core and memory
    resources": hami-core keeps 1 x 15360 MiB with core 10."""
    c = _ctr(
        {
            "huawei.com/Ascend910B3": "1",
            "huawei.com/Ascend910B3-core": "10",
            "huawei.com/Ascend910B3-memory": "15360",
        }
    )
    r = parse_request(_pod(c, {"huawei.com/vnpu-mode": "hami-core"}), c, CFG)
    assert (r.vendor, r.count, r.memory_mib, r.cores_pct, r.memory_pct) == (
        "Ascend910B3",
        1,
        15360,
        10,
        0,
    )


B3 = "huawei.com/Ascend910B3"


@pytest.mark.parametrize(
    ("case", "limits", "names"),
    [
        (
            "memory requested in bytes exceeds int32 range on soft-partitioning path",
            {B3: "1", f"{B3}-core": "10", f"{B3}-memory": "16Gi"},
            f"{B3}-memory",
        ),
        (
            "memory requested in bytes exceeds int32 range on trim path",
            {B3: "1", f"{B3}-memory": "16Gi"},
            f"{B3}-memory",
        ),
        ("negative fractional memory request", {B3: "1", f"{B3}-memory": "-1m"}, f"{B3}-memory"),
        ("negative whole memory request", {B3: "1", f"{B3}-memory": "-100"}, f"{B3}-memory"),
        ("oversized device count exceeds int32 range", {B3: "2200000000"}, B3),
        ("negative core request", {B3: "1", f"{B3}-core": "-1"}, f"{B3}-core"),
        (
            "oversized core request exceeds int32 range",
            {B3: "1", f"{B3}-core": "2200000000"},
            f"{B3}-core",
        ),
    ],
)
def test_out_of_range_values_are_refused(case, limits, names):
    """``Test_GenerateResourceRequests_OutOfRangeValues``: HAMi drops the request (an
    empty ``ContainerDeviceRequest``); we refuse it naming the resource, never schedule
    something else."""
    c = _ctr(limits)
    with pytest.raises(InvalidInputError, match=names.replace(".", r"\.")):
        parse_request(_pod(c, {"huawei.com/vnpu-mode": "hami-core"}), c, CFG)
