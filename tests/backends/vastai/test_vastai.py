"""Vastai: requests, inventory with die facts, count fit, die mode (best combination,
mutex by card), die score and the pipeline. Expected values from HAMi 2.10
``pkg/device/vastai/device_test.go`` (``Test_GetNodeDevices``, ``TestDevices_Fit`` die
and mutex cases, ``Test_computeBestCombination``, ``Test_ScoreNode``)."""

import json

import pytest
from hami_vastai import fit, inventory, plugin

from hami_core.errors import InvalidInputError
from hami_core.model import (
    ContainerDevice,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    ReasonCode,
)
from hami_core.protocol.config import VendorConfig
from hami_core.protocol.devicelist import decode_pod_devices

from ..support import node, pipeline, pod

#: HAMi's Test_GetNodeDevices annotation.
HAMI_REGISTER = (
    '[{"id":"7-0","count":1,"devmem":32768,"type":"Vastai","health":true,"devicepairscore":{}}]'
)
CFG = VendorConfig()


def die(uuid, aic, index):
    return DeviceInfo(
        uuid=uuid,
        vendor="Vastai",
        model="Vastai",
        index=index,
        split_count=1,
        custom=(("DeviceStrategy", "die"), ("AIC", aic)),
    )


def die_register(cards):
    return json.dumps(
        [
            {
                "id": f"die-{c}-{k}",
                "index": 2 * i + k,
                "count": 1,
                "type": "Vastai",
                "health": True,
                "customInfo": {"DeviceStrategy": "die", "AIC": c},
            }
            for i, c in enumerate(cards)
            for k in range(2)
        ]
    )


def test_inventory_keeps_die_facts():
    (plain,) = inventory.node_devices(
        node("n", annotations={"hami.io/node-va-register": HAMI_REGISTER})
    )
    assert (plain.uuid, plain.split_count, plain.memory_mib, plain.custom) == ("7-0", 1, 32768, ())
    dies = inventory.node_devices(
        node("n", annotations={"hami.io/node-va-register": die_register(["1", "2"])})
    )
    assert [(d.uuid, d.info("AIC"), d.info("DeviceStrategy")) for d in dies][:2] == [
        ("die-1-0", "1", "die"),
        ("die-1-1", "1", "die"),
    ]
    assert (
        inventory.node_devices(
            node("legacy", annotations={"hami.io/node-va-register": "a,1,0,0,Vastai,0,true:"})
        )
        is None
    )


def test_requests():
    assert plugin.hami_parse_request(
        {"name": "m", "resources": {"limits": {"vastaitech.com/va": "2"}}}, CFG
    ) == DeviceRequest(vendor="Vastai", count=2, memory_pct=100)
    with pytest.raises(InvalidInputError, match="vastaitech.com/va must be greater than 0"):
        plugin.hami_parse_request(
            {"name": "m", "resources": {"limits": {"vastaitech.com/va": "0"}}}, CFG
        )


def test_best_combination_takes_the_fullest_cards_first():
    usage = [
        DeviceUsage(device=die(f"dev{i}", aic, i))
        for i, aic in enumerate(["1", "1", "1", "2", "2", "3"], start=1)
    ]
    out = fit.fit(
        DeviceRequest(vendor="Vastai", count=2, memory_pct=100), usage, {}, DevicePolicy.SPREAD
    )
    assert [d.uuid for d in out.devices] == ["dev1", "dev2"]
    across = fit.fit(
        DeviceRequest(vendor="Vastai", count=4, memory_pct=100), usage, {}, DevicePolicy.SPREAD
    )
    assert [d.uuid for d in across.devices] == ["dev1", "dev2", "dev3", "dev4"]


def test_mutex_die_mode_refuses_dies_of_a_busy_card():
    usage = [
        DeviceUsage(device=die("a0", "1", 0), used_count=1),
        DeviceUsage(device=die("a1", "1", 1)),
        DeviceUsage(device=die("b0", "2", 2)),
    ]
    mutex = {"metadata": {"annotations": {"hami.io/gpu-scheduler-policy": "mutex"}}}
    out = fit.fit(
        DeviceRequest(vendor="Vastai", count=1, memory_pct=100), usage, mutex, DevicePolicy.SPREAD
    )
    assert [d.uuid for d in out.devices] == ["b0"]
    none = fit.fit(
        DeviceRequest(vendor="Vastai", count=1, memory_pct=100),
        usage[:2],
        mutex,
        DevicePolicy.SPREAD,
    )
    assert (
        not none.fits and none.device_reasons["a1"] is ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    )


def test_die_score_rewards_one_card():
    usage = [DeviceUsage(device=die(f"d{i}", aic, i)) for i, aic in enumerate(["1", "1", "2", "2"])]
    same = tuple(
        ContainerDevice(uuid=u, vendor="Vastai", memory_mib=0, cores_pct=0) for u in ("d0", "d1")
    )
    split = tuple(
        ContainerDevice(uuid=u, vendor="Vastai", memory_mib=0, cores_pct=0) for u in ("d1", "d2")
    )
    assert fit.score(usage, same) == 100.0 and fit.score(usage, split) == 50.0


def test_pipeline_die_mode():
    n = node(
        "va-1",
        annotations={"hami.io/node-va-register": die_register(["1", "2"])},
        capacity={"vastaitech.com/va": "4"},
    )
    p = pipeline(n, backends=("vastai", "nvidia"))
    out = p.submit(pod("v", {"vastaitech.com/va": "2"}))
    assert out.denied == "" and out.error == "" and out.node == "va-1"
    (entry,) = decode_pod_devices(
        p.cluster.get_pod("default", "v")["metadata"]["annotations"][
            "hami.io/Vastai-devices-allocated"
        ]
    )
    assert sorted(d.uuid for d in entry) in (["die-1-0", "die-1-1"], ["die-2-0", "die-2-1"])
    assert p.submit(pod("w", {"vastaitech.com/va": "2"})).node == "va-1"
    assert p.submit(pod("x", {"vastaitech.com/va": "1"})).node is None


def test_quota_counts_devices():
    from ..support import quota

    n = node("va-1", annotations={"hami.io/node-va-register": die_register(["1", "2"])})
    p = pipeline(n, backends=("vastai",))
    p.cluster.add_quota(quota("q", {"limits.vastaitech.com/va": "2"}))
    assert p.submit(pod("a", {"vastaitech.com/va": "2"})).node == "va-1"
    assert "limits.vastaitech.com/va" in p.submit(pod("b", {"vastaitech.com/va": "1"})).denied


@pytest.mark.parametrize(
    ("case", "cards", "count", "want"),
    [
        ("single AIC group, sufficient to meet demand", ["1", "1", "1"], 2, ["dev1", "dev2"]),
        (
            "multiple AIC groups, select by count after sorting",
            ["1", "1", "1", "2", "2", "3"],
            3,
            ["dev1", "dev2", "dev3"],
        ),
        (
            "multiple AIC groups, need to take across groups",
            ["1", "1", "1", "2", "2", "3"],
            4,
            ["dev1", "dev2", "dev3", "dev4"],
        ),
        ("request number exceeds available devices", ["1", "1", "2"], 5, ["dev1", "dev2", "dev3"]),
    ],
)
def test_compute_best_combination(case, cards, count, want):
    """``device_test.go::TestComputeBestCombination``, the case named: dies from the AI
    cards holding the most of them first; asking more than there are returns them all."""
    usage = [DeviceUsage(device=die(f"dev{i}", aic, i)) for i, aic in enumerate(cards, start=1)]
    assert [u.device.uuid for u in fit.best_combination(usage, count)] == want, case


def test_add_resource_usage():
    """``device_test.go::TestDevices_AddResourceUsage``: a device with one sharer that
    takes a container of 0 MiB, 0 % holds two sharers, memory and cores 0."""
    from ..support import usage_of

    device = DeviceInfo(
        uuid="dev-0", vendor="Vastai", model="Vastai", split_count=10, memory_mib=32768
    )
    assert usage_of("Vastai", device, (0, 0), (0, 0)) == (2, 0, 0)
