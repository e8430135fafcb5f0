import datetime as dt

from hami_core.facts.handshake import request_handshakes
from hami_core.facts.nodes import read_node
from tests.builders import cluster, container, gpu, manager, node, pipeline, pod

T0 = dt.datetime(2026, 11, 29, 9, 0, 0, tzinfo=dt.UTC)
KEY = "hami.io/node-handshake"


def hs(c, name):
    return c.get_node(name)["metadata"]["annotations"].get(KEY)


def test_requests_only_where_the_plugin_answered():
    answered = node("answered", [gpu("GPU-1")], annotations={KEY: "Reported_2026-11-29 08:59:00"})
    fresh = node("fresh", [gpu("GPU-2")])
    waiting = node("waiting", [gpu("GPU-3")], annotations={KEY: "Requesting_2026-11-29 08:00:00"})
    deleted = node("deleted", [gpu("GPU-4")], annotations={KEY: "Deleted_2026-11-29 08:00:00"})
    plain = {"metadata": {"name": "cpu-only"}}
    c = cluster(answered, fresh, waiting, deleted, plain)
    written = request_handshakes(c, manager().device_types(), now=T0)
    assert sorted(written) == [("answered", KEY), ("fresh", KEY)]
    assert hs(c, "answered") == "Requesting_2026-11-29 09:00:00"
    assert hs(c, "waiting") == "Requesting_2026-11-29 08:00:00"
    assert hs(c, "deleted") == "Deleted_2026-11-29 08:00:00"
    assert (
        "annotations" not in c.get_node("cpu-only")["metadata"]
        or KEY not in c.get_node("cpu-only")["metadata"]["annotations"]
    )


def test_an_unanswered_handshake_with_nothing_allocatable_unregisters_the_node():
    n = node("silent", [gpu("GPU-1")], annotations={KEY: "Requesting_2026-11-29 09:00:00"})
    n["status"]["allocatable"] = {"nvidia.com/gpu": "0"}
    types = manager().device_types()
    assert read_node(n, types, now=T0 + dt.timedelta(seconds=30)).unregistered == {}
    late = read_node(n, types, now=T0 + dt.timedelta(seconds=61))
    assert "has not answered since 2026-11-29 09:00:00 UTC" in late.unregistered["NVIDIA"]
    n["status"]["allocatable"] = {"nvidia.com/gpu": "10"}  # kubelet still advertises: keep it
    assert read_node(n, types, now=T0 + dt.timedelta(seconds=61)).unregistered == {}


def test_pods_avoid_an_unregistered_node_and_say_why():
    silent = node("silent", [gpu("GPU-1")], annotations={KEY: "Requesting_2000-01-01 00:00:00"})
    silent["status"]["allocatable"] = {}
    p = pipeline(silent, node("alive", [gpu("GPU-2")]))
    out = p.submit(pod("p", container(gpu=1, gpumem=100)))
    assert out.node == "alive"
    assert out.filter.failed["silent"].startswith(
        "NodeUnregistered (hami.io/node-handshake: device plugin has not answered"
    )
