"""Biren: requests, inventory, count-only fit and the pipeline. Expected values from HAMi
2.10 ``pkg/device/biren/device_test.go`` (``Test_GetNodeDevices``,
``Test_GenerateResourceRequests``, ``TestDevices_Fit``, ``Test_PatchAnnotations``)."""

import pytest
from hami_biren import fit, plugin

from hami_core.errors import AnnotationError, InvalidInputError
from hami_core.model import DeviceInfo, DevicePolicy, DeviceRequest, DeviceUsage, ReasonCode
from hami_core.protocol.config import VendorConfig
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.inventory import decode_inventory

from ..support import node, pipeline, pod, quota

#: HAMi's Test_GetNodeDevices annotation.
HAMI_REGISTER = (
    '[{"id":"7-0","count":1,"devmem":32768,"type":"Biren","health":true,"devicepairscore":{}}]'
)
CFG = VendorConfig()


def ctr(value):
    return {"name": "main", "resources": {"limits": {"birentech.com/gpu": value}}}


def test_inventory_as_hami_registers_it():
    (d,) = decode_inventory(HAMI_REGISTER, node="n", vendor="Biren")
    assert (d.uuid, d.split_count, d.memory_mib, d.model, d.healthy) == (
        "7-0",
        1,
        32768,
        "Biren",
        True,
    )
    # HAMi's DecodeNodeDevices: ":" is no device, a value without ':' is refused
    assert decode_inventory(":", node="n", vendor="Biren") == ()
    with pytest.raises(AnnotationError, match="separator"):
        decode_inventory("x", node="n", vendor="Biren")


def test_requests():
    assert plugin.hami_parse_request(ctr("2"), CFG) == DeviceRequest(
        vendor="Biren", count=2, memory_pct=100
    )
    assert plugin.hami_parse_request({"name": "x"}, CFG) is None
    for bad, message in (
        ("0", "must be greater than 0"),
        ("-1", "birentech.com/gpu"),
        ("1.5", "birentech.com/gpu"),
    ):
        with pytest.raises(InvalidInputError, match=message):
            plugin.hami_parse_request(ctr(bad), CFG)
        assert message in plugin.hami_mutate(ctr(bad), "/spec/containers/0", CFG).denial


def dev(uuid, index=0, count=2):
    return DeviceInfo(
        uuid=uuid, vendor="Biren", model="Biren", index=index, split_count=count, memory_mib=32768
    )


def test_fit_cases_of_hami():
    req = DeviceRequest(vendor="Biren", count=1, memory_pct=100)
    ok = fit.fit(req, [DeviceUsage(device=dev("a"))], {}, DevicePolicy.SPREAD)
    assert [d.uuid for d in ok.devices] == ["a"] and ok.devices[0].memory_mib == 0
    uuid = fit.fit(
        req,
        [DeviceUsage(device=dev("a"))],
        {"metadata": {"annotations": {"birentech.com/use-gpuuuid": "b"}}},
        DevicePolicy.SPREAD,
    )
    assert uuid.summary(1) == "1/1 CardUuidMismatch"
    full = fit.fit(req, [DeviceUsage(device=dev("a"), used_count=2)], {}, DevicePolicy.SPREAD)
    assert full.device_reasons == {"a": ReasonCode.CARD_TIME_SLICING_EXHAUSTED}
    mutex = fit.fit(
        req,
        [DeviceUsage(device=dev("a"), used_count=1)],
        {"metadata": {"annotations": {"hami.io/gpu-scheduler-policy": "mutex"}}},
        DevicePolicy.SPREAD,
    )
    assert mutex.device_reasons == {"a": ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT}
    two = fit.fit(
        DeviceRequest(vendor="Biren", count=2, memory_pct=100),
        [DeviceUsage(device=dev("a")), DeviceUsage(device=dev("b", 1), used_count=2)],
        {},
        DevicePolicy.SPREAD,
    )
    assert two.node_reason is ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST
    binpack = fit.fit(
        req,
        [DeviceUsage(device=dev("a")), DeviceUsage(device=dev("b", 1), used_count=1)],
        {},
        DevicePolicy.BINPACK,
    )
    assert binpack.devices[0].uuid == "b"


def biren_node():
    reg = '[{"id":"BR-0","count":2,"devmem":65536,"type":"Biren","health":true},{"id":"BR-1","index":1,"count":2,"devmem":65536,"type":"Biren","health":true}]'
    return node(
        "br-1",
        annotations={"hami.io/node-biren-register": reg},
        capacity={"birentech.com/gpu": "4"},
    )


def test_pipeline():
    p = pipeline(biren_node(), backends=("biren", "nvidia"))
    out = p.submit(pod("b", {"birentech.com/gpu": "2"}))
    assert out.denied == "" and out.error == "" and out.node == "br-1"
    ann = p.cluster.get_pod("default", "b")["metadata"]["annotations"]
    (entry,) = decode_pod_devices(ann["hami.io/Biren-devices-allocated"])
    assert sorted(d.uuid for d in entry) == ["BR-0", "BR-1"]
    assert p.submit(pod("c", {"birentech.com/gpu": "2"})).node == "br-1"
    assert p.submit(pod("d", {"birentech.com/gpu": "1"})).node is None
    assert "must be greater than 0" in p.submit(pod("e", {"birentech.com/gpu": "0"})).denied


def test_quota_counts_gpus():
    p = pipeline(biren_node(), backends=("biren",))
    p.cluster.add_quota(quota("q", {"limits.birentech.com/gpu": "1"}))
    assert p.submit(pod("a", {"birentech.com/gpu": "1"})).node == "br-1"
    assert "limits.birentech.com/gpu" in p.submit(pod("b", {"birentech.com/gpu": "1"})).denied


def test_add_resource_usage():
    """``pkg/device/biren/device_test.go::TestDevices_AddResourceUsage``: a GPU with one
    sharer that takes a container of 0 MiB, 0 % holds two sharers, memory and cores 0."""
    from ..support import usage_of

    gpu = DeviceInfo(uuid="dev-0", vendor="Biren", model="Biren", split_count=10, memory_mib=32768)
    assert usage_of("Biren", gpu, (0, 0)) == (1, 0, 0)
    assert usage_of("Biren", gpu, (0, 0), (0, 0)) == (2, 0, 0)
