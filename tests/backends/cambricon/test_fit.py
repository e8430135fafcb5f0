"""Fit cases of the Cambricon backend (issue 7, "Done when"): a slice that fits, one that
does not with the right reason, the 256 MiB unit at its edges, whole-card requests."""

from __future__ import annotations

import pytest
from hami_cambricon.fit import fit, type_matches
from hami_cambricon.requests import parse_request

from hami_core.model import DevicePolicy, DeviceUsage, NodeInfo, ReasonCode

from .helpers import config, container, free, mlu, pod

X8 = [mlu(f"MLU-x8-{i}", index=i) for i in range(4)]
X4 = [mlu(f"MLU-x4-{i}", index=i, memory_mib=23308, model="MLU370-X4") for i in range(2)]


def place(c, devices, *, usage=None, annotations=None, policy=DevicePolicy.SPREAD, cfg=None):
    cfg = cfg or config()
    p = pod("p", c, annotations=annotations)
    request = parse_request(c, cfg)
    assert request is not None
    return fit(
        request,
        NodeInfo(name="n", devices=tuple(devices)),
        usage if usage is not None else free(*devices),
        p,
        policy,
        cfg,
    )


def test_a_slice_fits():
    result = place(container(vmlu=1, vmemory=20, vcore=30), X8[:1])
    assert result.fits
    (d,) = result.devices
    assert (d.uuid, d.vendor, d.memory_mib, d.cores_pct) == ("MLU-x8-0", "MLU", 5120, 30)


def test_a_slice_that_does_not_fit_says_insufficient_memory():
    used = (DeviceUsage(device=X8[0], used_count=1, used_memory_mib=20480, used_cores_pct=50),)
    result = place(container(vmlu=1, vmemory=20, vcore=30), X8[:1], usage=used)
    assert not result.fits
    assert result.device_reasons == {"MLU-x8-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}
    assert result.summary(1) == "1/1 CardInsufficientMemory"
    assert result.largest_memory_mib == 4096 and result.largest_cores_pct == 50


def test_a_slice_over_the_free_cores_says_insufficient_core():
    used = (DeviceUsage(device=X8[0], used_count=1, used_memory_mib=1024, used_cores_pct=80),)
    result = place(container(vmlu=1, vmemory=4, vcore=30), X8[:1], usage=used)
    assert result.device_reasons == {"MLU-x8-0": ReasonCode.CARD_INSUFFICIENT_CORE}


@pytest.mark.parametrize(
    ("device", "units", "fits"),
    [
        (X8[0], 96, True),  # 96 x 256 = 24576 MiB = the whole card
        (X8[0], 97, False),  # 24832 MiB > 24576
        (X4[0], 91, True),  # 23296 MiB <= 23308 (HAMi's documented MLU370-X4 devmem)
        (X4[0], 92, False),  # 23552 MiB > 23308
    ],
)
def test_memory_units_at_the_card_edge(device, units, fits):
    result = place(container(vmlu=1, vmemory=units), [device])
    assert result.fits is fits
    if fits:
        assert result.devices[0].memory_mib == units * 256
    else:
        assert result.device_reasons == {device.uuid: ReasonCode.CARD_INSUFFICIENT_MEMORY}
        assert result.largest_memory_mib == device.memory_mib


def test_one_unit_below_what_is_left_fits_and_one_above_does_not():
    used = (DeviceUsage(device=X8[0], used_count=1, used_memory_mib=24576 - 1024),)
    assert place(container(vmlu=1, vmemory=4, vcore=0), X8[:1], usage=used).fits
    assert not place(container(vmlu=1, vmemory=5, vcore=0), X8[:1], usage=used).fits


def test_memory_without_vcore_wants_the_card_exclusively():
    """HAMi books cores 100 for memory without vcore (``pkg/device/cambricon/
    device_test.go`` ``Test_GenerateResourceRequests`` "resourcememoryname don't set"),
    and its ``Fit`` refuses cores 100 on a card in use (``ExclusiveDeviceAllocateConflict``,
    ``TestDevices_Fit``): a memory-only sMLU does not join a shared card."""
    used = (DeviceUsage(device=X8[0], used_count=1, used_memory_mib=1024),)
    result = place(container(vmlu=1, vmemory=4), X8[:1], usage=used)
    assert result.device_reasons == {"MLU-x8-0": ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT}
    assert place(container(vmlu=1, vmemory=4), X8[:1]).devices[0].cores_pct == 100


def test_whole_card_request_takes_distinct_empty_cards():
    used = (
        DeviceUsage(device=X8[0], used_count=1, used_memory_mib=1024, used_cores_pct=10),
        *free(*X8[1:]),
    )
    result = place(container(vmlu=2), X8, usage=used)
    assert result.fits
    assert [d.uuid for d in result.devices] == ["MLU-x8-1", "MLU-x8-2"]
    assert all(d.memory_mib == 24576 and d.cores_pct == 100 for d in result.devices)


def test_whole_card_on_a_shared_card_is_refused():
    used = (DeviceUsage(device=X8[0], used_count=1, used_memory_mib=1024, used_cores_pct=10),)
    result = place(container(vmlu=1), X8[:1], usage=used)
    assert result.device_reasons == {"MLU-x8-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}
    # compute alone: a whole-compute slice on a card someone shares
    result = place(container(vmlu=1, vmemory=4, vcore=100), X8[:1], usage=used)
    assert result.device_reasons == {"MLU-x8-0": ReasonCode.CARD_INSUFFICIENT_CORE}


def test_slice_on_an_exclusively_held_card_is_compute_exhausted():
    used = (DeviceUsage(device=X8[0], used_count=1, used_memory_mib=1024, used_cores_pct=100),)
    result = place(container(vmlu=1, vmemory=4, vcore=0), X8[:1], usage=used)
    assert result.device_reasons == {"MLU-x8-0": ReasonCode.CARD_COMPUTE_UNITS_EXHAUSTED}
    # without vcore the slice asks cores 100: HAMi's order reports the cores first
    result = place(container(vmlu=1, vmemory=4), X8[:1], usage=used)
    assert result.device_reasons == {"MLU-x8-0": ReasonCode.CARD_INSUFFICIENT_CORE}


def test_more_cards_than_the_node_has():
    result = place(container(vmlu=3), X4)
    assert not result.fits and result.node_reason is ReasonCode.NODE_INSUFFICIENT_DEVICE


def test_split_count_exhausted():
    used = (DeviceUsage(device=mlu("MLU-s", split=2), used_count=2, used_memory_mib=512),)
    result = place(container(vmlu=1, vmemory=1), [used[0].device], usage=used)
    assert result.device_reasons == {"MLU-s": ReasonCode.CARD_TIME_SLICING_EXHAUSTED}


def test_unhealthy_and_cordoned_cards():
    bad = mlu("MLU-bad", healthy=False)
    cordoned = DeviceUsage(device=mlu("MLU-cordon", index=1), cordoned=True)
    result = place(
        container(vmlu=1, vmemory=1),
        [bad, cordoned.device],
        usage=(DeviceUsage(device=bad), cordoned),
    )
    assert result.device_reasons == {
        "MLU-bad": ReasonCode.CARD_NOT_HEALTH,
        "MLU-cordon": ReasonCode.CARD_CORDONED,
    }


def test_type_filter_annotation():
    devices = [X8[0], mlu("MLU-x4", index=1, model="MLU370-X4", memory_mib=23308)]
    result = place(
        container(vmlu=1, vmemory=4),
        devices,
        annotations={"cambricon.com/use-mlutype": "MLU370-X4"},
    )
    assert [d.uuid for d in result.devices] == ["MLU-x4"]
    result = place(
        container(vmlu=1, vmemory=4),
        devices,
        annotations={"cambricon.com/nouse-mlutype": "MLU370-X4,MLU370-X8"},
    )
    assert result.summary(2) == "2/2 CardTypeMismatch"


def test_handbook_gpu_type_cambricon_selects_any_mlu():
    result = place(container(vmlu=1), X8[:1], annotations={"hami.io/gpu-type": "cambricon"})
    assert result.fits
    result = place(container(vmlu=1), X8[:1], annotations={"hami.io/gpu-type": "nvidia"})
    assert result.device_reasons == {"MLU-x8-0": ReasonCode.CARD_TYPE_MISMATCH}


def test_model_qualified_resource_restricts_the_model():
    devices = [mlu("MLU-590", index=0, model="MLU590-M9", memory_mib=65536), X8[1]]
    c = container(vmlu=1, res={"cambricon.com/mlu370.smlu.vmemory": 4})
    result = place(c, devices)
    assert [d.uuid for d in result.devices] == ["MLU-x8-1"]
    c = container(vmlu=1, res={"cambricon.com/mlu590.smlu.vmemory": 4})
    assert [d.uuid for d in place(c, devices).devices] == ["MLU-590"]
    c = container(vmlu=1, res={"cambricon.com/mlu290.smlu.vmemory": 4})
    assert place(c, devices).summary(2) == "2/2 CardTypeMismatch"


def test_uuid_filters():
    result = place(
        container(vmlu=1), X8, annotations={"cambricon.com/use-gpuuuid": "MLU-x8-2,MLU-x8-3"}
    )
    assert [d.uuid for d in result.devices] == ["MLU-x8-2"]
    result = place(
        container(vmlu=1), X8[:2], annotations={"cambricon.com/nouse-gpuuuid": "MLU-x8-0"}
    )
    assert [d.uuid for d in result.devices] == ["MLU-x8-1"]
    result = place(container(vmlu=1), X8[:1], annotations={"hami.io/gpu-uuid-exclude": "MLU-x8-0"})
    assert result.device_reasons == {"MLU-x8-0": ReasonCode.CARD_UUID_MISMATCH}


def test_cards_registered_without_devcore_do_not_account_compute():
    # HAMi's documented hami.io/node-mlu-register example states devcore 0
    card = mlu("MLU-45013011-2257-0000-0000-000000000000", cores=0, memory_mib=23308)
    used = (DeviceUsage(device=card, used_count=1, used_memory_mib=1024, used_cores_pct=50),)
    result = place(container(vmlu=1, vmemory=4, vcore=80), [card], usage=used)
    assert result.fits and result.devices[0].cores_pct == 80


def test_policies_choose_deterministically():
    usage = (
        DeviceUsage(device=X8[0], used_count=1, used_memory_mib=8192, used_cores_pct=30),
        *free(*X8[1:]),
    )
    c = container(vmlu=1, vmemory=4, vcore=10)
    assert place(c, X8, usage=usage, policy=DevicePolicy.BINPACK).devices[0].uuid == "MLU-x8-0"
    assert place(c, X8, usage=usage, policy=DevicePolicy.SPREAD).devices[0].uuid == "MLU-x8-1"
    assert (
        place(c, X8, usage=usage, policy=DevicePolicy.TOPOLOGY_AWARE).devices[0].uuid == "MLU-x8-1"
    )


def test_numa_policy_keeps_a_container_on_one_numa_node():
    devices = [mlu(f"MLU-n{i}", index=i, numa=i // 2) for i in range(4)]
    usage = (
        DeviceUsage(device=devices[2], used_count=1, used_memory_mib=1024),
        *free(devices[0], devices[1], devices[3]),
    )
    result = place(container(vmlu=2), devices, usage=(*free(*devices),), policy=DevicePolicy.NUMA)
    assert {d.uuid for d in result.devices} in ({"MLU-n0", "MLU-n1"}, {"MLU-n2", "MLU-n3"})
    c = container(vmlu=1, vmemory=1, vcore=0)
    result = place(c, devices, usage=usage, policy=DevicePolicy.NUMA)
    assert result.devices[0].uuid in ("MLU-n2", "MLU-n3")


@pytest.mark.parametrize(
    ("model", "token", "match"),
    [
        ("MLU370-X8", "MLU370", True),
        ("MLU370-X8", "mlu370-x8", True),
        ("MLU370-X8", "MLU370-X4", False),
        ("MLU370-X8", "MLU37", False),
        ("MLU-MLU370-X4", "MLU370", True),
        ("MLU590-M9", "cambricon", True),
    ],
)
def test_type_tokens_match_whole_words(model, token, match):
    assert type_matches(model, token) is match
