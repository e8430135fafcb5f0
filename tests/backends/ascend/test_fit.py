"""Ascend fit: slices that fit and that do not (with the reason), whole chips, 910C
modules, HCCS groups, HAMi-registered core capacity, filters."""

import pytest
from hami_ascend.fit import fit
from hami_ascend.models import DEFAULT_MODELS

from hami_core.model import (
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
    ReasonCode,
)

MODELS = {m.vendor: m for m in DEFAULT_MODELS}
B3 = MODELS["Ascend910B3"]
C = MODELS["Ascend910C"]


def chip(i, vendor="Ascend910B3", *, memory=65536, split=4, cores=100, healthy=True):
    return DeviceInfo(
        uuid=f"{vendor}-{i}",
        vendor=vendor,
        model=vendor,
        index=i,
        split_count=split,
        memory_mib=memory,
        cores_pct=cores,
        healthy=healthy,
    )


def usage(dev, *, count=0, memory=0, cores=0, cordoned=False):
    return DeviceUsage(
        device=dev,
        used_count=count,
        used_memory_mib=memory,
        used_cores_pct=cores,
        cordoned=cordoned,
    )


def run(request, usages, *, model=B3, pod=None, policy=DevicePolicy.SPREAD):
    node = NodeInfo(name="n", devices=tuple(u.device for u in usages))
    return fit(request, node, usages, pod or {"metadata": {}}, policy, model)


VIR05 = DeviceRequest(vendor="Ascend910B3", count=1, memory_mib=16384)
WHOLE = DeviceRequest(vendor="Ascend910B3", count=1, memory_pct=100, cores_pct=100)


def test_a_slice_fits_an_empty_chip():
    res = run(VIR05, [usage(chip(0))])
    assert res.fits
    assert [(d.uuid, d.memory_mib, d.cores_pct) for d in res.devices] == [
        ("Ascend910B3-0", 16384, 0)
    ]


def test_a_fifth_slice_does_not_fit_four_template_slots():
    full = usage(chip(0), count=4, memory=4 * 16384)
    res = run(VIR05, [full])
    assert not res.fits
    assert res.device_reasons == {"Ascend910B3-0": ReasonCode.CARD_TIME_SLICING_EXHAUSTED}
    assert res.summary(1) == "1/1 CardTimeSlicingExhausted"


def test_a_slice_larger_than_what_is_left_is_insufficient_memory():
    half = usage(chip(0), count=1, memory=32768 + 16384)
    res = run(DeviceRequest(vendor="Ascend910B3", count=1, memory_mib=32768), [half])
    assert res.device_reasons == {"Ascend910B3-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}
    assert res.largest_memory_mib == 16384


def test_a_whole_chip_takes_an_empty_chip_not_a_shared_one():
    shared, empty = usage(chip(0), count=1, memory=16384), usage(chip(1))
    res = run(WHOLE, [shared, empty])
    assert res.fits
    assert [(d.uuid, d.memory_mib, d.cores_pct) for d in res.devices] == [
        ("Ascend910B3-1", 65536, 100)
    ]
    only_shared = run(WHOLE, [shared])
    assert only_shared.device_reasons == {"Ascend910B3-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}


def test_a_slice_after_a_whole_chip_does_not_fit():
    taken = usage(chip(0), count=1, memory=65536, cores=100)
    res = run(VIR05, [taken])
    assert res.device_reasons == {"Ascend910B3-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}


def test_hami_registered_core_count_reads_as_the_whole_chip():
    # HAMi's ascend-device-plugin writes devcore = AI Core count (20) in template mode.
    hami = chip(0, cores=20)
    res = run(WHOLE, [usage(hami)])
    assert res.fits and res.devices[0].cores_pct == 100
    taken = run(
        DeviceRequest(vendor="Ascend910B3", count=1, memory_mib=16384, cores_pct=10),
        [usage(hami, count=1, memory=16384, cores=100)],
    )
    assert taken.device_reasons == {"Ascend910B3-0": ReasonCode.CARD_INSUFFICIENT_CORE}


def test_cores_100_on_a_chip_in_use_is_an_exclusive_conflict():
    used = usage(chip(0), count=1, memory=16384)
    res = run(DeviceRequest(vendor="Ascend910B3", count=1, memory_mib=16384, cores_pct=100), [used])
    assert res.device_reasons == {"Ascend910B3-0": ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT}


def test_unhealthy_cordoned_and_filtered_chips_have_their_reasons():
    chips = [usage(chip(0, healthy=False)), usage(chip(1), cordoned=True), usage(chip(2))]
    pod = {"metadata": {"annotations": {"hami.io/no-use-Ascend910B3-uuid": "Ascend910B3-2"}}}
    res = run(VIR05, chips, pod=pod)
    assert res.device_reasons == {
        "Ascend910B3-0": ReasonCode.CARD_NOT_HEALTH,
        "Ascend910B3-1": ReasonCode.CARD_CORDONED,
        "Ascend910B3-2": ReasonCode.CARD_UUID_MISMATCH,
    }
    use = {"metadata": {"annotations": {"hami.io/use-Ascend910B3-uuid": "Ascend910B3-2"}}}
    assert run(VIR05, chips, pod=use).devices[0].uuid == "Ascend910B3-2"


def test_more_chips_than_the_node_has():
    res = run(DeviceRequest(vendor="Ascend910B3", count=3, memory_pct=100), [usage(chip(0))])
    assert res.node_reason is ReasonCode.NODE_INSUFFICIENT_DEVICE


def test_several_chips_stay_in_one_hccs_group():
    chips = [usage(chip(i)) for i in range(8)]
    chips[1] = usage(chip(1), count=1, memory=16384)  # group 0 (0-3) keeps 3 whole chips
    res = run(DeviceRequest(vendor="Ascend910B3", count=4, memory_pct=100, cores_pct=100), chips)
    assert [d.uuid for d in res.devices] == [f"Ascend910B3-{i}" for i in (4, 5, 6, 7)]
    two = run(
        DeviceRequest(vendor="Ascend910B3", count=2, memory_pct=100, cores_pct=100),
        chips,
        policy=DevicePolicy.BINPACK,
    )
    # binpack: the fuller group (0-3) that can still hold both
    assert {d.uuid for d in two.devices} <= {f"Ascend910B3-{i}" for i in (0, 2, 3)}


def test_910c_module_pairs():
    mods = [usage(chip(i, "Ascend910C")) for i in range(4)]
    pair = DeviceRequest(vendor="Ascend910C", count=2, memory_pct=100, cores_pct=100)
    assert [d.uuid for d in run(pair, mods, model=C).devices] == ["Ascend910C-0", "Ascend910C-1"]
    mods[1] = usage(chip(1, "Ascend910C"), count=1, memory=65536, cores=100)
    assert [d.uuid for d in run(pair, mods, model=C).devices] == ["Ascend910C-2", "Ascend910C-3"]
    mods[2] = usage(chip(2, "Ascend910C"), count=1, memory=65536, cores=100)
    broken = run(pair, mods, model=C)
    # chips 0 and 3 are free, but in different modules
    assert not broken.fits
    assert broken.node_reason is ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST


@pytest.mark.parametrize("policy", list(DevicePolicy))
def test_same_input_same_placement(policy):
    chips = [usage(chip(i), count=i % 2, memory=(i % 2) * 16384) for i in range(8)]
    first = run(VIR05, chips, policy=policy)
    assert first.fits and first == run(VIR05, chips, policy=policy)


def test_binpack_fills_the_fullest_chip_and_spread_the_emptiest():
    chips = [usage(chip(0), count=1, memory=16384), usage(chip(1))]
    assert run(VIR05, chips, policy=DevicePolicy.BINPACK).devices[0].uuid == "Ascend910B3-0"
    assert run(VIR05, chips, policy=DevicePolicy.SPREAD).devices[0].uuid == "Ascend910B3-1"
