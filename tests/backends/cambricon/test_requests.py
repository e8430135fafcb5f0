"""Reading Cambricon requests: 256 MiB units at their edges, defaults, validation."""

from __future__ import annotations

import pytest
from hami_cambricon import plugin
from hami_cambricon.requests import MAX_MEMORY_UNITS, parse_request, pod_models

from hami_core.errors import InvalidInputError
from hami_core.model import DeviceRequest
from hami_core.testing import section

from .helpers import config, container, pod


def req(**kw):
    return DeviceRequest(vendor="MLU", **kw)


@pytest.mark.parametrize(
    ("units", "mib"),
    [(1, 256), (2, 512), (20, 5120), (96, 24576), (MAX_MEMORY_UNITS, MAX_MEMORY_UNITS * 256)],
)
def test_memory_units_are_256_mib(units, mib):
    """Memory without vcore books cores 100, as HAMi does (``pkg/device/cambricon/
    device_test.go`` ``Test_GenerateResourceRequests`` "resourcememoryname don't set")."""
    got = parse_request(container(vmlu=1, vmemory=units), config())
    assert got == req(count=1, memory_mib=mib, cores_pct=100)


def test_largest_unit_count_keeps_mib_in_int32():
    assert MAX_MEMORY_UNITS * 256 <= 2**31 - 1 < (MAX_MEMORY_UNITS + 1) * 256
    with pytest.raises(InvalidInputError, match=r"mlu\.smlu\.vmemory.*'8388608'"):
        parse_request(container(vmlu=1, vmemory=MAX_MEMORY_UNITS + 1), config())


def test_16gi_as_units_is_rejected_naming_resource_and_value():
    with pytest.raises(InvalidInputError) as exc:
        parse_request(container("train", vmlu=1, vmemory="16Gi"), config())
    msg = str(exc.value)
    assert "'train'" in msg and "cambricon.com/mlu.smlu.vmemory" in msg and "'16Gi'" in msg


def test_fractional_units_are_rejected():
    with pytest.raises(InvalidInputError, match="not a whole number"):
        parse_request(container(vmlu=1, vmemory="1500m"), config())


def test_count_only_takes_whole_exclusive_mlus():
    assert parse_request(container(vmlu=2), config()) == req(count=2, memory_pct=100, cores_pct=100)


def test_memory_zero_counts_as_unset():
    assert parse_request(container(vmlu=1, vmemory=0), config()) == req(
        count=1, memory_pct=100, cores_pct=100
    )


def test_memory_without_count_gets_default_count():
    assert parse_request(container(vmemory=4), config()) == req(
        count=1, memory_mib=1024, cores_pct=100
    )


def test_memory_slice_shares_only_with_stated_or_default_cores():
    """Below HAMi's 100 only when the pod states vcore or the config sets defaultCores."""
    assert parse_request(container(vmlu=1, vmemory=4, vcore=0), config()) == req(
        count=1, memory_mib=1024, cores_pct=0
    )
    cfg = section(plugin, default_cores_pct=25)
    assert parse_request(container(vmlu=1, vmemory=4), cfg) == req(
        count=1, memory_mib=1024, cores_pct=25
    )


def test_cores_without_memory_is_a_compute_slice_of_the_whole_memory():
    assert parse_request(container(vmlu=1, vcore=30), config()) == req(
        count=1, memory_pct=100, cores_pct=30
    )


def test_default_memory_is_rounded_up_to_whole_units():
    cfg = section(plugin, default_memory_mib=1000, default_cores_pct=20)
    assert parse_request(container(vmlu=1), cfg) == req(count=1, memory_mib=1024, cores_pct=20)


def test_cores_above_100_are_rejected():
    with pytest.raises(InvalidInputError, match=r"vcore.*above the largest accepted value 100"):
        parse_request(container(vmlu=1, vcore=101), config())


def test_a_slice_takes_exactly_one_mlu():
    with pytest.raises(InvalidInputError, match="exactly one MLU per container"):
        parse_request(container(vmlu=2, vmemory=20), config())
    with pytest.raises(InvalidInputError, match="exactly one MLU per container"):
        parse_request(container(vmlu=2, vcore=50), config())
    # whole MLUs, stated explicitly, are not a slice
    assert parse_request(container(vmlu=2, vcore=100), config()) == req(
        count=2, memory_pct=100, cores_pct=100
    )


def test_count_zero():
    assert parse_request(container(vmlu=0), config()) is None
    with pytest.raises(InvalidInputError, match="is 0 but memory"):
        parse_request(container(vmlu=0, vmemory=4), config())


def test_other_vendors_containers_are_not_read():
    other = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    assert parse_request(other, config()) is None
    assert parse_request({"name": "c"}, config()) is None


def test_quantities_come_from_limits_then_requests():
    c = {
        "name": "c",
        "resources": {
            "limits": {"cambricon.com/vmlu": "1"},
            "requests": {"cambricon.com/mlu.smlu.vmemory": "8", "cambricon.com/vmlu": "3"},
        },
    }
    assert parse_request(c, config()) == req(count=1, memory_mib=2048, cores_pct=100)


# -- model-qualified names (the handbook's seed example) -----------------------------


def test_model_qualified_names_are_accepted():
    c = container(
        vmlu=1,
        res={"cambricon.com/mlu370.smlu.vmemory": 20, "cambricon.com/mlu370.smlu.vcore": 10},
    )
    assert parse_request(c, config()) == req(count=1, memory_mib=5120, cores_pct=10)
    assert pod_models(pod("p", c), config()) == frozenset({"mlu370"})


def test_model_qualified_names_can_be_turned_off():
    c = container(vmlu=1, res={"cambricon.com/mlu370.smlu.vmemory": 20})
    # only the count is read: whole MLUs
    assert parse_request(c, config(acceptModelQualifiedNames=False)) == req(
        count=1, memory_pct=100, cores_pct=100
    )
    assert pod_models(pod("p", c), config(acceptModelQualifiedNames=False)) == frozenset()


def test_two_models_in_one_container_are_rejected():
    c = container(
        vmlu=1,
        res={"cambricon.com/mlu370.smlu.vmemory": 20, "cambricon.com/mlu590.smlu.vcore": 10},
    )
    with pytest.raises(InvalidInputError, match="several models"):
        parse_request(c, config())


def test_generic_and_qualified_memory_together_are_rejected():
    c = container(vmlu=1, vmemory=4, res={"cambricon.com/mlu370.smlu.vmemory": 20})
    with pytest.raises(InvalidInputError, match="use one"):
        parse_request(c, config())


def test_configured_names_replace_the_defaults():
    cfg = section(
        plugin,
        resource_count_name="example.com/mlu",
        resource_memory_name="example.com/mlu-mem",
        resource_cores_name="example.com/mlu-core",
    )
    c = {"name": "c", "resources": {"limits": {"example.com/mlu": "1", "example.com/mlu-mem": "2"}}}
    assert parse_request(c, cfg) == req(count=1, memory_mib=512, cores_pct=100)
    assert parse_request(container(vmlu=1), cfg) is None
