"""HAMi 2.10 ``pkg/device/kunlun`` test cases with HAMi's expected values (issue #15 item
11): the topology-aware XPU sets of ``device_test.go::Test_graphSelect`` and
``topo_test.go`` (``TestGraghSelect_*``, ``TestInterconnect_*``), and the UUID filters of
``TestKunlunDevices_Fit_UseUUID`` / ``_NoUseUUID`` / ``TestKunlunVDevices_Fit_UUIDAnnotations``."""

from __future__ import annotations

import pytest
from hami_kunlun.fit import fit
from hami_kunlun.requests import parse_request
from hami_kunlun.topology import CROSS_QUADS, select

from hami_core.model import DevicePolicy, NodeInfo
from tests.backends.kunlun.helpers import config, container, free, pod, xpu

KUNLUN = "pkg/device/kunlun/device_test.go::Test_graphSelect"


@pytest.mark.parametrize(
    ("case", "used", "count", "want"),
    [
        ("full allocate", (), 8, [0, 1, 2, 3, 4, 5, 6, 7]),
        ("full allocate not success", (5,), 8, None),
        ("allocate 2 cards", (5,), 2, [4, 6]),
        ("allocate 1 card (5 used)", (5,), 1, [4]),
        ("allocate 1 card (6, 7 used)", (6, 7), 1, [4]),
        ("allocate 2 card according to interconnect", (0, 1, 2, 4, 5, 6), 2, [3, 7]),
        (
            "allocate 4 cards according to interconnect when have 5 cards",
            (2, 3, 7),
            4,
            [0, 1, 4, 5],
        ),
        (
            "allocate 4 cards according to interconnect when have 6 cards, leave 2 cards unconnected",
            (3, 6),
            4,
            [0, 1, 4, 5],
        ),
        (
            "allocate 4 cards according to interconnect when have 6 cards, leave 2 cards connected",
            (2, 6),
            4,
            [0, 1, 4, 5],
        ),
    ],
)
def test_graph_select(case, used, count, want):
    """``Test_graphSelect``, the case named (HAMi's empty result is None here)."""
    free_xpus = [i for i in range(8) if i not in used]
    assert select(free_xpus, count) == want, case


@pytest.mark.parametrize(
    ("case", "used", "count", "want"),
    [
        ("TestGraghSelect_AllEightAvailable", (), 8, [0, 1, 2, 3, 4, 5, 6, 7]),
        ("TestGraghSelect_EightNotFullyAvailable", (0,), 8, None),
        ("TestGraghSelect_SingleDevice", (), 1, [0]),
        ("TestGraghSelect_FourFromLeftWing", (4, 5, 6, 7), 4, [0, 1, 2, 3]),
        # only HAMi's first InterGroupConnection pair (0-4) left free
        ("TestInterconnect_TwoDevices", (1, 2, 3, 5, 6, 7), 2, [0, 4]),
        # only HAMi's first InterGroupConnection2 quad (0-1-4-5) left free
        ("TestInterconnect_FourDevices", (2, 3, 6, 7), 4, [0, 1, 4, 5]),
        ("TestInterconnect_UnsupportedCount", (), 3, None),
    ],
)
def test_topo(case, used, count, want):
    """``pkg/device/kunlun/topo_test.go``, the test named."""
    free_xpus = [i for i in range(8) if i not in used]
    assert select(free_xpus, count) == want, case


def test_interconnect_quads_are_hamis():
    """``topo_test.go::TestParseInterconnection2_Structure``: six linked quads, the first
    ``0-1-4-5`` (HAMi ``InterGroupConnection2``)."""
    assert len(CROSS_QUADS) == 6 and CROSS_QUADS[0] == (0, 1, 4, 5)


def _xpus(split):
    return [xpu(f"xpu-{i}", index=i, split=split) for i in range(8)]


def _fit(c, devices, annotations):
    cfg = config()
    request = parse_request(c, cfg)
    return fit(
        request,
        NodeInfo(name="n", devices=tuple(devices)),
        free(*devices),
        pod("p", c, annotations=annotations),
        DevicePolicy.SPREAD,
        cfg,
    )


ALL = ",".join(f"xpu-{i}" for i in range(8))


@pytest.mark.parametrize(
    ("source", "c", "split"),
    [
        ("TestKunlunDevices_Fit_UseUUID / _NoUseUUID (whole XPU)", container(xpu=1), 1),
        (
            "TestKunlunVDevices_Fit_UUIDAnnotations (vXPU, 98304 MiB)",
            container(vxpu=1, vmem=98304),
            10,
        ),
    ],
)
def test_uuid_annotations(source, c, split):
    """``pkg/device/kunlun/device_test.go``, the test named: HAMi's two key pairs,
    ``hami.io/use-xpu-uuid`` and ``baidu.com/use-gpuuuid`` (and their ``no-use``), pick
    the named XPU; excluding all eight is ``CardUuidMismatch``."""
    devices = _xpus(split)
    for key, uuid in (("baidu.com/use-gpuuuid", "xpu-5"), ("hami.io/use-xpu-uuid", "xpu-3")):
        result = _fit(c, devices, {key: uuid})
        assert [d.uuid for d in result.devices] == [uuid], (source, key)
    result = _fit(c, devices, {"hami.io/use-xpu-uuid": "xpu-99"})
    assert not result.fits and "CardUuidMismatch" in result.summary(8)
    for key in ("baidu.com/nouse-gpuuuid", "hami.io/no-use-xpu-uuid"):
        result = _fit(c, devices, {key: ALL})
        assert not result.fits and "CardUuidMismatch" in result.summary(8), (source, key)


def _read(limits, requests=None):
    from hami_core.plugin import BackendManager

    m = BackendManager.from_entry_points(disabled=[])
    res = {"limits": dict(limits), **({"requests": dict(requests)} if requests else {})}
    c = {"name": "c", "resources": res}
    pod_ = {"metadata": {"name": "p"}, "spec": {"containers": [c]}}
    return [
        (r.count, r.memory_mib, r.memory_pct, r.cores_pct)
        for r in m.parse_requests(pod_, c, init=False)
    ]


def test_vxpu_generate_resource_requests():
    """``pkg/device/kunlun/vdevice_test.go::Test_KunlunVDevices_GenerateResourceRequests``:
    "no vcount requested" asks nothing; "vcount without memory defaults to full device"
    (HAMi: 98304 MiB and 100 %, the whole P800; here 100 % of it) with cores 100;
    "vcount with memory from requests fallback": 2 x 24576 MiB, cores 25."""
    assert _read({}) == []
    assert _read({"kunlunxin.com/vxpu": "1"}) == [(1, 0, 100, 100)]
    assert _read({"kunlunxin.com/vxpu": "2"}, {"kunlunxin.com/vxpu-memory": "24576"}) == [
        (2, 24576, 0, 25)
    ]


def test_vxpu_mutate_admission_trims_memory():
    """``vdevice_test.go::Test_MutateAdmission``: "no vcount limit" is not taken; "vcount
    with vmemory gets trimmed": 30000 MiB is written as 49152 in limits and requests
    (also when the container had no requests block)."""
    from tests.unit.test_admission import patched, review

    def p(limits):
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
        }

    none = p({})
    assert patched(none, review(none))["spec"].get("schedulerName") != "hami-scheduler"
    pod_ = p({"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "30000"})
    res = patched(pod_, review(pod_))["spec"]["containers"][0]["resources"]
    assert (
        res["limits"]["kunlunxin.com/vxpu-memory"]
        == res["requests"]["kunlunxin.com/vxpu-memory"]
        == "49152"
    )
