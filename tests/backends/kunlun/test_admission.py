"""Admission of Kunlunxin containers: trimmed memory written back, count defaulted."""

from __future__ import annotations

from hami_kunlun.admission import mutate_container
from hami_kunlun.requests import parse_request

from hami_core.testing import mutated as written

from .helpers import config, container, pod


def apply(p, result):
    return written(p, "/spec/containers/0", result)


def mutated(c, **opts):
    p = pod("p", c)
    return apply(p, mutate_container(p, c, config(**opts)))


def test_memory_is_rewritten_to_its_partition_size():
    out = mutated(container(vxpu=1, vmem=30000))
    res = out["spec"]["containers"][0]["resources"]
    want = {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "49152"}
    assert res["limits"] == want and res["requests"] == want


def test_memory_above_the_half_is_written_as_the_whole_card():
    res = mutated(container(vxpu=1, vmem=60000))["spec"]["containers"][0]["resources"]
    assert res["limits"]["kunlunxin.com/vxpu-memory"] == "98304"


def test_memory_only_gets_a_count():
    res = mutated(container(vmem=100))["spec"]["containers"][0]["resources"]
    assert res["limits"] == {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "24576"}


def test_count_only_writes_no_memory():
    res = mutated(container(vxpu=2))["spec"]["containers"][0]["resources"]
    assert res["limits"] == res["requests"] == {"kunlunxin.com/vxpu": "2"}


def test_whole_cards_are_copied_to_requests():
    res = mutated(container(xpu=4))["spec"]["containers"][0]["resources"]
    assert res["limits"] == res["requests"] == {"kunlunxin.com/xpu": "4"}


def test_mutation_keeps_the_request_and_is_idempotent():
    c = container(vxpu=2, vmem=24577)
    once = mutated(c)
    c1 = once["spec"]["containers"][0]
    assert parse_request(c1, config()) == parse_request(c, config())
    again = apply(once, mutate_container(once, c1, config()))
    assert again == once


def test_invalid_requests_are_denied():
    c = container("mix", xpu=1, vmem=4000)
    res = mutate_container(pod("p", c), c, config())
    assert res is not None and res.denial and "'mix'" in res.denial
    c = container("big", vxpu=1, vmem="16Gi")
    res = mutate_container(pod("p", c), c, config())
    assert res is not None and res.denial and "'16Gi'" in res.denial


def test_runtime_class_when_configured():
    out = mutated(container(xpu=1), runtimeClassName="xpu")
    assert out["spec"]["runtimeClassName"] == "xpu"


def test_other_containers_are_not_touched():
    c = {"name": "web"}
    assert mutate_container(pod("p", c), c, config()) is None
