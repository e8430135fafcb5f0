"""Hygon DCU fit: a slice that fits, ones that do not (with the reason), whole DCUs,
filters, policies."""

import pytest
from hami_hygon.fit import fit, type_matches

from hami_core.model import (
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
    ReasonCode,
)


def dcu(i, *, model="DCU-K100_AI", memory=65520, split=10, numa=0, healthy=True):
    return DeviceInfo(
        uuid=f"DCU-{i}",
        vendor="DCU",
        model=model,
        index=i,
        split_count=split,
        memory_mib=memory,
        cores_pct=100,
        numa=numa,
        healthy=healthy,
    )


def use(dev, count=0, memory=0, cores=0, cordoned=False):
    return DeviceUsage(
        device=dev,
        used_count=count,
        used_memory_mib=memory,
        used_cores_pct=cores,
        cordoned=cordoned,
    )


def run(request, usages, pod=None, policy=DevicePolicy.SPREAD):
    node = NodeInfo(name="n", devices=tuple(u.device for u in usages))
    return fit(request, node, usages, pod or {"metadata": {}}, policy)


def req(count=1, mib=0, cores=0):
    if mib:
        return DeviceRequest(vendor="DCU", count=count, memory_mib=mib, cores_pct=cores)
    return DeviceRequest(vendor="DCU", count=count, memory_pct=100, cores_pct=cores)


def test_a_slice_fits():
    res = run(req(mib=2000, cores=60), [use(dcu(0))])
    assert res.fits and [(d.uuid, d.memory_mib, d.cores_pct) for d in res.devices] == [
        ("DCU-0", 2000, 60)
    ]


def test_memory_exactly_at_the_free_edge_and_one_mib_over():
    left = use(dcu(0), count=1, memory=65520 - 4096, cores=10)
    assert run(req(mib=4096, cores=10), [left]).fits
    over = run(req(mib=4097, cores=10), [left])
    assert over.device_reasons == {"DCU-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}
    assert over.largest_memory_mib == 4096


def test_cores_run_out():
    busy = use(dcu(0), count=1, memory=1000, cores=60)
    res = run(req(mib=1000, cores=50), [busy])
    assert res.device_reasons == {"DCU-0": ReasonCode.CARD_INSUFFICIENT_CORE}
    assert res.summary(1) == "1/1 CardInsufficientCore"
    assert res.largest_cores_pct == 40


def test_default_cores_100_is_exclusive():
    busy = use(dcu(0), count=1, memory=1000, cores=0)
    res = run(req(mib=2000, cores=100), [busy])
    assert res.device_reasons == {"DCU-0": ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT}
    taken = use(dcu(0), count=1, memory=2000, cores=100)
    res2 = run(req(mib=1000, cores=0), [taken])
    assert res2.device_reasons == {"DCU-0": ReasonCode.CARD_COMPUTE_UNITS_EXHAUSTED}


def test_a_whole_dcu_takes_an_empty_one():
    res = run(req(cores=100), [use(dcu(0), count=1, memory=1000, cores=10), use(dcu(1))])
    assert [(d.uuid, d.memory_mib, d.cores_pct) for d in res.devices] == [("DCU-1", 65520, 100)]


def test_split_count_exhausted_and_too_many_dcus():
    full = use(dcu(0, split=4), count=4, memory=4000, cores=40)
    assert run(req(mib=10, cores=1), [full]).device_reasons == {
        "DCU-0": ReasonCode.CARD_TIME_SLICING_EXHAUSTED
    }
    res = run(req(count=2, cores=100), [use(dcu(0))])
    assert res.node_reason is ReasonCode.NODE_INSUFFICIENT_DEVICE


def test_type_filters_match_whole_words():
    assert type_matches("DCU-Z100", "z100")
    assert not type_matches("DCU-Z100L", "Z100")
    assert type_matches("DCU-K100_AI", "K100")
    assert type_matches("DCU-K100_AI", "K100_AI")
    devs = [use(dcu(0, model="DCU-Z100L")), use(dcu(1, model="DCU-Z100"))]
    pod = {"metadata": {"annotations": {"hygon.com/use-dcutype": "Z100"}}}
    res = run(req(mib=1000, cores=10), devs, pod)
    assert [d.uuid for d in res.devices] == ["DCU-1"]
    nouse = {"metadata": {"annotations": {"hygon.com/nouse-dcutype": "z100,k100"}}}
    none = run(req(mib=1000, cores=10), devs[1:], nouse)
    assert none.device_reasons == {"DCU-1": ReasonCode.CARD_TYPE_MISMATCH}


def test_uuid_filters_health_and_cordon():
    devs = [use(dcu(0, healthy=False)), use(dcu(1), cordoned=True), use(dcu(2)), use(dcu(3))]
    pod = {"metadata": {"annotations": {"hygon.com/nouse-gpuuuid": "DCU-2"}}}
    assert [d.uuid for d in run(req(mib=1000, cores=10), devs, pod).devices] == ["DCU-3"]
    res = run(req(count=2, mib=1000, cores=10), devs, pod)
    assert res.node_reason is ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST
    assert res.device_reasons == {
        "DCU-0": ReasonCode.CARD_NOT_HEALTH,
        "DCU-1": ReasonCode.CARD_CORDONED,
        "DCU-2": ReasonCode.CARD_UUID_MISMATCH,
    }
    only3 = {"metadata": {"annotations": {"hygon.com/use-gpuuuid": "DCU-3"}}}
    assert [d.uuid for d in run(req(mib=1000, cores=10), devs, only3).devices] == ["DCU-3"]


def test_binpack_spread_and_numa():
    devs = [use(dcu(0), count=1, memory=1000, cores=10), use(dcu(1)), use(dcu(2, numa=1))]
    assert (
        run(req(mib=1000, cores=10), devs, policy=DevicePolicy.BINPACK).devices[0].uuid == "DCU-0"
    )
    assert run(req(mib=1000, cores=10), devs, policy=DevicePolicy.SPREAD).devices[0].uuid == "DCU-1"
    two = run(
        req(count=2, cores=100),
        [use(dcu(0)), use(dcu(1, numa=1)), use(dcu(2, numa=1))],
        policy=DevicePolicy.NUMA,
    )
    assert [d.uuid for d in two.devices] == ["DCU-1", "DCU-2"]


@pytest.mark.parametrize("policy", list(DevicePolicy))
def test_same_input_same_placement(policy):
    devs = [use(dcu(i), count=i % 2, memory=(i % 2) * 1000, cores=(i % 2) * 10) for i in range(4)]
    first = run(req(mib=1000, cores=10), devs, policy=policy)
    assert first.fits and first == run(req(mib=1000, cores=10), devs, policy=policy)


@pytest.mark.parametrize(
    ("case", "annotations", "model", "want"),
    [
        ("exist one dcu in use type", {"hygon.com/use-dcutype": "dcu"}, "dcu", True),
        ("the different of dcu in use type", {"hygon.com/use-dcutype": "dcu"}, "test", False),
        ("no dcu in use annotation", {}, "dcu", True),
        ("exist multi dcu in use type", {"hygon.com/use-dcutype": "dcu,test"}, "dcu", True),
        ("exist one dcu no use type", {"hygon.com/nouse-dcutype": "dcu"}, "dcu", False),
        ("exist multi dcu no use type", {"hygon.com/nouse-dcutype": "test,dcu"}, "test", False),
        ("the different of dcu no use type", {"hygon.com/nouse-dcutype": "dcu"}, "test", True),
        ("empty use type annotation is no constraint", {"hygon.com/use-dcutype": ""}, "dcu", True),
        (
            "empty nouse type annotation excludes nothing",
            {"hygon.com/nouse-dcutype": ""},
            "dcu",
            True,
        ),
        (
            "whitespace-only nouse type annotation excludes nothing",
            {"hygon.com/nouse-dcutype": "   "},
            "dcu",
            True,
        ),
    ],
)
def test_check_dcu_type(case, annotations, model, want):
    """``pkg/device/hygon/device_test.go::Test_checkDCUtype``, the case named: the pod's
    ``hygon.com/use-dcutype`` / ``nouse-dcutype`` against the DCU's model (tokens match
    case-insensitively; blank lists constrain nothing)."""
    from hami_hygon.fit import filters_of

    assert filters_of({"metadata": {"annotations": annotations}}).type_ok(model) is want, case
