"""Admission of Cambricon containers: defaults written under the names used, denials."""

from __future__ import annotations

from hami_cambricon.admission import mutate_container
from hami_cambricon.requests import parse_request

from hami_core.testing import mutated as written

from .helpers import config, container, pod


def apply(p, result):
    return written(p, "/spec/containers/0", result)


def test_count_only_gets_whole_card_values_in_limits_and_requests():
    c = container(vmlu=1)
    p = pod("p", c)
    out = apply(p, mutate_container(p, c, config()))
    res = out["spec"]["containers"][0]["resources"]
    want = {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vcore": "100"}
    assert res["limits"] == want and res["requests"] == want


def test_memory_only_gets_count_and_cores_written_in_units():
    """HAMi books vcore 100 for memory without vcore (``pkg/device/cambricon/
    device_test.go`` ``Test_GenerateResourceRequests`` "resourcememoryname don't set")."""
    c = container(vmemory=20)
    p = pod("p", c)
    out = apply(p, mutate_container(p, c, config()))
    assert out["spec"]["containers"][0]["resources"]["limits"] == {
        "cambricon.com/vmlu": "1",
        "cambricon.com/mlu.smlu.vmemory": "20",
        "cambricon.com/mlu.smlu.vcore": "100",
    }


def test_model_qualified_names_stay_model_qualified():
    c = container(vmlu=1, res={"cambricon.com/mlu370.smlu.vmemory": 20})
    p = pod("p", c)
    out = apply(p, mutate_container(p, c, config()))
    limits = out["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {
        "cambricon.com/vmlu": "1",
        "cambricon.com/mlu370.smlu.vmemory": "20",
        "cambricon.com/mlu370.smlu.vcore": "100",
    }
    assert "cambricon.com/mlu.smlu.vcore" not in limits


def test_mutation_is_idempotent_and_keeps_the_request():
    c = container(vmlu=1, vmemory=12, vcore=25)
    p = pod("p", c)
    once = apply(p, mutate_container(p, c, config()))
    c1 = once["spec"]["containers"][0]
    assert parse_request(c1, config()) == parse_request(c, config())
    twice = apply(once, mutate_container(once, c1, config()))
    assert twice == once


def test_invalid_requests_are_denied_with_the_cause():
    c = container("train", vmlu=2, vmemory=20)
    res = mutate_container(pod("p", c), c, config())
    assert (
        res is not None
        and res.denial
        and "'train'" in res.denial
        and "exactly one MLU" in res.denial
    )
    c = container("big", vmlu=1, vmemory="16Gi")
    res = mutate_container(pod("p", c), c, config())
    assert res is not None and res.denial and "'16Gi'" in res.denial


def test_runtime_class_is_set_when_configured_and_absent():
    c = container(vmlu=1)
    p = pod("p", c)
    out = apply(p, mutate_container(p, c, config(runtimeClassName="cambricon")))
    assert out["spec"]["runtimeClassName"] == "cambricon"
    p["spec"]["runtimeClassName"] = "mine"
    out = apply(p, mutate_container(p, c, config(runtimeClassName="cambricon")))
    assert out["spec"]["runtimeClassName"] == "mine"
    assert (
        "runtimeClassName"
        not in apply(pod("q", c), mutate_container(pod("q", c), c, config()))["spec"]
    )


def test_other_containers_are_not_touched():
    c = {"name": "web", "resources": {"limits": {"cpu": "1"}}}
    assert mutate_container(pod("p", c), c, config()) is None
