"""Reading Kunlunxin requests: memory trimmed up to 24576 / 49152 / 98304 MiB, cores
derived from memory, the whole-card resource."""

from __future__ import annotations

import pytest
from hami_kunlun import plugin
from hami_kunlun.requests import derived_cores, parse_request, trim_memory

from hami_core.errors import ConfigError, InvalidInputError
from hami_core.model import DeviceRequest
from hami_core.testing import section

from .helpers import config, container

TIERS = (24576, 49152, 98304)


def req(**kw):
    return DeviceRequest(vendor="XPU", **kw)


WHOLE = {"memory_pct": 100, "cores_pct": 100}


@pytest.mark.parametrize(
    ("asked", "tier"),
    [
        (1, 24576),
        (4000, 24576),
        (24576, 24576),  # exactly at the first size: stays
        (24577, 49152),  # one MiB above: the next size
        (30000, 49152),
        (49152, 49152),
        (49153, 98304),
        (200000, 98304),
    ],
)
def test_trim_memory_up(asked, tier):
    assert trim_memory(asked, TIERS) == tier


@pytest.mark.parametrize(("tier", "cores"), [(24576, 25), (49152, 50), (98304, 100)])
def test_cores_are_derived_from_memory(tier, cores):
    assert derived_cores(tier, TIERS) == cores


def test_exactly_24576_is_a_quarter_card():
    got = parse_request(container(vxpu=1, vmem=24576), config())
    assert got == req(count=1, memory_mib=24576, cores_pct=25)


def test_24577_is_a_half_card():
    got = parse_request(container(vxpu=1, vmem=24577), config())
    assert got == req(count=1, memory_mib=49152, cores_pct=50)


def test_above_the_half_is_the_whole_card():
    assert parse_request(container(vxpu=1, vmem=49153), config()) == req(count=1, **WHOLE)
    assert parse_request(container(vxpu=1, vmem=98304), config()) == req(count=1, **WHOLE)


def test_vxpu_without_memory_is_a_whole_card():
    assert parse_request(container(vxpu=2), config()) == req(count=2, **WHOLE)
    assert parse_request(container(vxpu=1, vmem=0), config()) == req(count=1, **WHOLE)


def test_memory_without_count_gets_default_count():
    assert parse_request(container(vmem=4000), config()) == req(
        count=1, memory_mib=24576, cores_pct=25
    )


def test_default_memory_is_trimmed_too():
    cfg = section(plugin, default_memory_mib=30000)
    assert parse_request(container(vxpu=1), cfg) == req(count=1, memory_mib=49152, cores_pct=50)


def test_whole_card_resource():
    assert parse_request(container(xpu=4), config()) == req(count=4, **WHOLE)
    assert parse_request(container(xpu=0), config()) is None


def test_whole_card_and_vxpu_in_one_container_are_rejected():
    with pytest.raises(InvalidInputError, match=r"kunlunxin.com/xpu asks for whole cards"):
        parse_request(container("c", xpu=1, vmem=4000), config())
    with pytest.raises(InvalidInputError, match="kunlunxin.com/vxpu for vXPU"):
        parse_request(container("c", xpu=1, vxpu=1), config())


def test_16gi_as_mib_is_rejected_naming_resource_and_value():
    with pytest.raises(InvalidInputError) as exc:
        parse_request(container("train", vxpu=1, vmem="16Gi"), config())
    assert "'train'" in str(exc.value) and "kunlunxin.com/vxpu-memory" in str(exc.value)
    assert "'16Gi'" in str(exc.value)


def test_count_zero_with_memory_is_rejected():
    assert parse_request(container(vxpu=0), config()) is None
    with pytest.raises(InvalidInputError, match="is 0 but"):
        parse_request(container(vxpu=0, vmem=1), config())


def test_other_vendors_are_not_read():
    assert (
        parse_request({"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}, config())
        is None
    )


def test_configured_names_and_tiers():
    cfg = section(
        plugin,
        resource_count_name="example.com/vxpu",
        resource_memory_name="example.com/vxpu-mem",
        options={"memoryTiersMiB": [16384, 32768], "resourceWholeCardName": "example.com/xpu"},
    )
    c = {
        "name": "c",
        "resources": {"limits": {"example.com/vxpu": "1", "example.com/vxpu-mem": "100"}},
    }
    assert parse_request(c, cfg) == req(count=1, memory_mib=16384, cores_pct=50)
    c = {"name": "c", "resources": {"limits": {"example.com/xpu": "2"}}}
    assert parse_request(c, cfg) == req(count=2, **WHOLE)
    assert parse_request(container(xpu=1), cfg) is None


@pytest.mark.parametrize("tiers", [[], [49152, 24576], [0, 1], "24576", [24576, True]])
def test_bad_tiers_are_a_config_error(tiers):
    with pytest.raises(ConfigError, match="memoryTiersMiB"):
        parse_request(container(vxpu=1, vmem=1), config(memoryTiersMiB=tiers))
