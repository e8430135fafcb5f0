"""Fit cases of the Kunlunxin backend (issue 7, "Done when"): a slice that fits, one that
does not with the right reason, the trimming at its edges, whole-card requests with
topology-aware sets."""

from __future__ import annotations

import pytest
from hami_kunlun.fit import fit, type_matches
from hami_kunlun.requests import parse_request

from hami_core.model import DevicePolicy, DeviceUsage, NodeInfo, ReasonCode

from .helpers import P800_MIB, config, container, free, oam, pod, used, xpu

OAM = oam()


def place(c, devices, *, usage=None, annotations=None, policy=DevicePolicy.SPREAD, cfg=None):
    cfg = cfg or config()
    request = parse_request(c, cfg)
    assert request is not None
    return fit(
        request,
        NodeInfo(name="n", devices=tuple(devices)),
        usage if usage is not None else free(*devices),
        pod("p", c, annotations=annotations),
        policy,
        cfg,
    )


def uuids(result):
    return [d.uuid for d in result.devices]


def test_a_quarter_slice_fits():
    result = place(container(vxpu=1, vmem=8000), OAM[:1])
    assert result.fits
    (d,) = result.devices
    assert (d.uuid, d.vendor, d.memory_mib, d.cores_pct) == ("XPU-0", "XPU", 24576, 25)


def test_four_quarters_fill_a_card_and_a_fifth_does_not_fit():
    card = OAM[0]
    usage = (used(card, 24576, 24576, 24576, 24576),)
    result = place(container(vxpu=1, vmem=24576), [card], usage=usage)
    assert result.device_reasons == {"XPU-0": ReasonCode.CARD_TIME_SLICING_EXHAUSTED}
    roomy = xpu("XPU-big", split=10)
    usage = (used(roomy, 24576, 24576, 24576, 24576),)
    result = place(container(vxpu=1, vmem=24576), [roomy], usage=usage)
    assert result.device_reasons == {"XPU-big": ReasonCode.CARD_INSUFFICIENT_MEMORY}
    assert result.summary(1) == "1/1 CardInsufficientMemory"


@pytest.mark.parametrize(
    ("asked", "slice_mib", "cores"),
    [(24576, 24576, 25), (24577, 49152, 50), (49152, 49152, 50), (49153, P800_MIB, 100)],
)
def test_trimming_at_its_edges(asked, slice_mib, cores):
    result = place(container(vxpu=1, vmem=asked), OAM[:1])
    assert result.fits
    assert (result.devices[0].memory_mib, result.devices[0].cores_pct) == (slice_mib, cores)


def test_24577_does_not_fit_beside_three_quarters_but_24576_does():
    usage = (used(OAM[0], 24576, 24576, 24576),)
    assert place(container(vxpu=1, vmem=24576), OAM[:1], usage=usage).fits
    result = place(container(vxpu=1, vmem=24577), OAM[:1], usage=usage)
    assert result.device_reasons == {"XPU-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}
    assert result.largest_memory_mib == 24576


def test_a_card_cut_in_quarters_takes_no_half():
    usage = (used(OAM[0], 24576),)
    result = place(container(vxpu=1, vmem=49152), OAM[:1], usage=usage)
    assert result.device_reasons == {"XPU-0": ReasonCode.CARD_TYPE_MISMATCH}
    assert place(container(vxpu=1, vmem=20000), OAM[:1], usage=usage).fits


def test_whole_card_needs_an_unused_card():
    usage = (used(OAM[0], 24576),)
    result = place(container(xpu=1), OAM[:1], usage=usage)
    assert result.device_reasons == {"XPU-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}
    # a sharer holding no memory still makes the card non-exclusive
    usage = (DeviceUsage(device=OAM[0], used_count=1),)
    result = place(container(xpu=1), OAM[:1], usage=usage)
    assert result.device_reasons == {"XPU-0": ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT}


def test_whole_card_request_on_an_empty_oam_node():
    result = place(container(xpu=1), OAM)
    assert uuids(result) == ["XPU-0"]
    assert all(d.memory_mib == P800_MIB and d.cores_pct == 100 for d in result.devices)


@pytest.mark.parametrize(
    ("busy", "count", "want"),
    [
        (set(), 2, [0, 1]),
        ({0, 1, 2}, 1, [3]),  # the lone free XPU of group 0, keeping group 1 whole
        ({0, 1, 2, 3}, 4, [4, 5, 6, 7]),
        ({1, 2, 3, 5, 6, 7}, 2, [0, 4]),  # across groups: the linked pair
        ({1, 3, 6, 7}, 4, None),  # 0, 2, 4, 5 are free but form no linked quad
        (set(), 8, list(range(8))),
    ],
)
def test_whole_cards_take_topology_aware_sets(busy, count, want):
    usage = tuple(used(d, 24576) if d.index in busy else DeviceUsage(device=d) for d in OAM)
    result = place(container(xpu=count), OAM, usage=usage)
    if want is None:
        assert not result.fits and result.node_reason is ReasonCode.NUMA_NOT_FIT
        assert result.summary(8) == "NumaNotFit, 4/8 CardInsufficientMemory"
    else:
        assert uuids(result) == [f"XPU-{i}" for i in want]


def test_counts_without_a_topology_aware_set_are_numa_not_fit():
    result = place(container(xpu=3), OAM)
    assert not result.fits and result.node_reason is ReasonCode.NUMA_NOT_FIT


def test_topology_can_be_turned_off():
    result = place(container(xpu=3), OAM, cfg=config(topologyAware=False))
    assert uuids(result) == ["XPU-0", "XPU-1", "XPU-2"]


def test_nodes_other_than_oam_rank_by_policy():
    four = [xpu(f"X-{i}", index=i) for i in range(4)]
    usage = (used(four[0], 24576), *free(*four[1:]))
    assert uuids(place(container(xpu=3), four, usage=usage)) == ["X-1", "X-2", "X-3"]
    assert uuids(
        place(container(vxpu=1, vmem=1), four, usage=usage, policy=DevicePolicy.BINPACK)
    ) == ["X-0"]
    assert uuids(place(container(vxpu=1, vmem=1), four, usage=usage)) == ["X-1"]


def test_vxpu_pairs_use_topology_too():
    usage = tuple(used(d, 24576) if d.index in (0, 4) else DeviceUsage(device=d) for d in OAM)
    # half-card slices cannot go on the quarter-cut cards 0 and 4
    result = place(container(vxpu=2, vmem=49152), OAM, usage=usage)
    assert uuids(result) == ["XPU-1", "XPU-2"]
    assert result.devices[0].memory_mib == 49152 and result.devices[0].cores_pct == 50


def test_more_xpus_than_the_node_has():
    result = place(container(xpu=2), OAM[:1])
    assert result.node_reason is ReasonCode.NODE_INSUFFICIENT_DEVICE


def test_unhealthy_and_filtered_xpus():
    devices = [xpu("A", healthy=False), xpu("B", index=1), xpu("C", index=2)]
    result = place(container(vxpu=1, vmem=1), devices, annotations={"hami.io/no-use-xpu-uuid": "B"})
    assert uuids(result) == ["C"]
    result = place(container(vxpu=1, vmem=1), devices, annotations={"hami.io/use-xpu-uuid": "A"})
    assert result.device_reasons == {
        "A": ReasonCode.CARD_NOT_HEALTH,
        "B": ReasonCode.CARD_UUID_MISMATCH,
        "C": ReasonCode.CARD_UUID_MISMATCH,
    }


def test_gpu_type_filter():
    devices = [xpu("A", model="R300", memory_mib=32768), xpu("B", index=1)]
    assert uuids(place(container(xpu=1), devices, annotations={"hami.io/gpu-type": "P800"})) == [
        "B"
    ]
    assert uuids(
        place(container(xpu=1), devices, annotations={"hami.io/gpu-type": "kunlunxin"})
    ) == ["A"]


@pytest.mark.parametrize(
    ("model", "token", "match"),
    [
        ("P800", "p800", True),
        ("P800-OAM", "P800", True),
        ("P8000", "P800", False),
        ("R200-VF-5G", "R200", True),
    ],
)
def test_type_tokens(model, token, match):
    assert type_matches(model, token) is match
