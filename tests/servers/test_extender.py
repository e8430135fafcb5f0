"""The extender app through Flask's test client, on the embedded cluster."""

import copy
import json
from pathlib import Path

import pytest

from hami_core.deviceplugin.allocate import finish_allocation
from hami_core.errors import ConflictError
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.extender import create_extender_app
from hami_core.servers.metrics import SchedulerMetrics
from hami_core.webhook import Admission
from tests.builders import cluster, container, gpu, manager, node, pod

FIXTURES = Path(__file__).parent.parent / "fixtures" / "extender"


def admitted(c, p):
    """Store a pod as the webhook would have admitted it."""
    review = Admission(manager(), c).review(p)
    import jsonpatch

    obj = jsonpatch.apply_patch(copy.deepcopy(p), list(review.patch)) if review.patch else p
    return c.add_pod(obj)


def make_env(*, success_events=False):
    c = cluster(node("n1", [gpu("GPU-1")]), node("n2", [gpu("GPU-2", memory_mib=8192)]))
    sched = Scheduler(c, manager(), success_events=success_events)
    metrics = SchedulerMetrics(sched)
    state = {"leader": True}
    app = create_extender_app(
        sched,
        is_leader=lambda: state["leader"],
        leader_identity=lambda: "other-replica",
        metrics=metrics,
    )
    return c, sched, app.test_client(), state, metrics


@pytest.fixture
def env():
    return make_env()


def real_filter_args(p, names):
    args = json.loads((FIXTURES / "filter-request.json").read_text())
    args["Pod"] = p
    args["NodeNames"] = names
    return args


def test_filter_with_the_fixture_shape(env):
    c, _, client, _, _ = env
    p = admitted(c, pod("big", container(gpu=1, gpumem=10000)))
    resp = client.post("/filter", json=real_filter_args(p, ["n1", "n2"]))
    assert resp.status_code == 200
    assert resp.get_json() == {
        "NodeNames": ["n1"],
        "FailedNodes": {"n2": "1/1 CardInsufficientMemory"},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    assert c.events == []  # no success event by default (--success-events)


@pytest.mark.parametrize("success_events", [False, True])
def test_success_events_only_when_asked_failure_events_always(success_events):
    c, _, client, _, _ = make_env(success_events=success_events)
    p = admitted(c, pod("p", container(gpu=1, gpumem=10000)))
    meta = p["metadata"]
    assert client.post("/filter", json=real_filter_args(p, ["n1", "n2"])).get_json()[
        "NodeNames"
    ] == ["n1"]
    bind = {"PodName": "p", "PodNamespace": "default", "PodUID": meta["uid"], "Node": "n1"}
    assert client.post("/bind", json=bind).get_json() == {"Error": ""}
    placed = [(e.type, e.reason) for e in c.events]
    if success_events:  # HAMi's events, with the devices chosen
        assert placed == [("Normal", "FilteringSucceed"), ("Normal", "BindingSucceed")]
        assert "1/2 nodes fit: n1" in c.events[0].message
        assert c.events[1].message.startswith("bound to n1: ")
    else:
        assert placed == []
    # a pod that fits nowhere, and a bind that no longer fits: Warnings either way
    huge = admitted(c, pod("huge", container(gpu=1, gpumem=20000)))
    assert (
        client.post("/filter", json=real_filter_args(huge, ["n1", "n2"])).get_json()["NodeNames"]
        == []
    )
    late = admitted(c, pod("late", container(gpu=1, gpumem=10000)))
    bind = {"PodName": "late", "PodNamespace": "default", "PodUID": late["metadata"]["uid"]}
    answer = client.post("/bind", json={**bind, "Node": "n2"}).get_json()
    assert "no longer fits node n2" in answer["Error"]
    failed = [(e.type, e.reason, e.name) for e in c.events[len(placed) :]]
    assert failed == [("Warning", "FilteringFailed", "huge"), ("Warning", "BindingFailed", "late")]


def test_filter_failing_everywhere_records_filtering_failed(env):
    c, _, client, _, _ = env
    p = admitted(c, pod("huge", container(gpu=1, gpumem=20000)))
    body = client.post(
        "/filter", json={"pod": p, "nodenames": ["n1", "n2"]}
    ).get_json()  # any key case
    assert body["NodeNames"] == [] and set(body["FailedNodes"]) == {"n1", "n2"}
    event = c.events[-1]
    assert event.reason == "FilteringFailed" and event.type == "Warning"
    assert "n1: 1/1 CardInsufficientMemory" in event.message


def test_filter_for_a_pod_without_devices_passes_every_node(env):
    c, _, client, _, _ = env
    p = c.add_pod(pod("plain", {"name": "c", "image": "x"}))
    body = client.post("/filter", json={"Pod": p, "NodeNames": ["n1", "n2"]}).get_json()
    assert body["NodeNames"] == ["n1", "n2"] and body["FailedNodes"] == {}
    assert c.events == []


def test_full_nodes_form_answers_from_objects_and_writes_nothing(env):
    c, _, client, _, _ = env
    p = admitted(c, pod("p", container(gpu=1, gpumem=10000)))
    before = (c.list_nodes(), c.list_pods())
    nodes = {
        "items": [
            node("x1", [gpu("GPU-X", memory_mib=40000)]),
            node("x2", [gpu("GPU-Y", memory_mib=4000)]),
        ]
    }
    body = client.post("/filter", json={"Pod": p, "Nodes": nodes, "NodeNames": None}).get_json()
    assert body["NodeNames"] == ["x1"]
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["x1"]
    assert body["FailedNodes"] == {"x2": "1/1 CardInsufficientMemory"}
    assert (c.list_nodes(), c.list_pods()) == before and c.events == []


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[]",
        json.dumps({"NodeNames": ["n1"]}).encode(),
        json.dumps({"Pod": "x", "NodeNames": []}).encode(),
        json.dumps({"Pod": {"metadata": {}}, "NodeNames": "n1"}).encode(),
        json.dumps(
            {
                "Pod": {
                    "metadata": {"name": "p"},
                    "spec": {
                        "containers": [
                            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1500m"}}}
                        ]
                    },
                },
                "NodeNames": ["n1"],
            }
        ).encode(),
    ],
)
def test_malformed_filter_requests_get_an_error_not_a_crash(env, payload):
    _, _, client, _, _ = env
    resp = client.post("/filter", data=payload, content_type="application/json")
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["Error"] and body["NodeNames"] == []


def test_unknown_policy_annotation_is_an_error(env):
    c, _, client, _, _ = env
    p = admitted(c, pod("p", container(gpu=1, gpumem=100)))
    p["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "pack"}
    body = client.post("/filter", json={"Pod": p, "NodeNames": ["n1"]}).get_json()
    assert "hami.io/gpu-scheduler-policy" in body["Error"] and "'pack'" in body["Error"]


def test_prioritize_and_score_alias(env):
    c, _, client, _, _ = env
    c.add_pod(pod("existing", container(gpu=1, gpumem=8000)))
    p = admitted(c, pod("p", container(gpu=1, gpumem=1000)))
    for path in ("/prioritize", "/score"):
        body = client.post(path, json={"Pod": p, "NodeNames": ["n1", "n2"]}).get_json()
        assert [h["Host"] for h in body] == ["n1", "n2"]
        assert all(0 <= h["Score"] <= 10 for h in body)
    assert client.post("/prioritize", data=b"junk").get_json() == []


def test_prioritize_binpack_prefers_the_fuller_node():
    c = cluster(node("empty", [gpu("GPU-E")]), node("busy", [gpu("GPU-B")]))
    sched = Scheduler(c, manager())
    client = create_extender_app(sched).test_client()
    first = admitted(c, pod("first", container(gpu=1, gpumem=8000)))
    sched.bind("default", "first", uid=first["metadata"]["uid"], node="busy")
    finish_allocation(c, c.get_pod("default", "first"), node="busy", success=True)
    p = admitted(c, pod("p", container(gpu=1, gpumem=1000)))
    scores = {
        h["Host"]: h["Score"]
        for h in client.post(
            "/prioritize", json={"Pod": p, "NodeNames": ["empty", "busy"]}
        ).get_json()
    }
    assert scores["busy"] > scores["empty"]


def test_prioritize_steers_a_burst_away_from_nodes_being_bound():
    c = cluster(node("empty", [gpu("GPU-E")]), node("busy", [gpu("GPU-B")]))
    sched = Scheduler(c, manager())
    client = create_extender_app(sched).test_client()
    first = admitted(c, pod("first", container(gpu=1, gpumem=8000)))
    sched.bind("default", "first", uid=first["metadata"]["uid"], node="busy")
    # "first" holds busy's lock until its Allocate: binding p there would wait for it.

    def scores(p):
        args = {"Pod": p, "NodeNames": ["empty", "busy"]}
        return {h["Host"]: h["Score"] for h in client.post("/prioritize", json=args).get_json()}

    p = admitted(c, pod("p", container(gpu=1, gpumem=1000)))
    assert scores(p)["busy"] == 0 and scores(p)["empty"] > 0
    finish_allocation(c, c.get_pod("default", "first"), node="busy", success=True)
    # Lock gone; but "empty" is now the node answered best for p, whose bind has not
    # come yet: the next pod of the burst is steered to busy.
    q = admitted(c, pod("q", container(gpu=1, gpumem=1000)))
    assert scores(q)["empty"] == 0 and scores(q)["busy"] > 0
    # Once p's bind is done, its node is no longer held for it (busy still is, for q).
    sched.bind("default", "p", uid=p["metadata"]["uid"], node="empty")
    finish_allocation(c, c.get_pod("default", "p"), node="empty", success=True)
    r = admitted(c, pod("r", container(gpu=1, gpumem=1000)))
    assert scores(r)["empty"] > 0 and scores(r)["busy"] == 0


def test_prioritize_gives_the_node_it_reserves_the_top_score_alone():
    """Four empty nodes score alike on the 0..10 scale; kube-scheduler picks at random
    among equal totals, so the node reserved for the pod's bind must be the only one at
    the top, or the burst's next pod may land on the same node (and wait for its lock)."""
    c = cluster(*(node(f"n{i}", [gpu(f"GPU-{i}")]) for i in range(4)))
    sched = Scheduler(c, manager())
    client = create_extender_app(sched).test_client()
    names = [f"n{i}" for i in range(4)]
    chosen = []
    for name in ("a", "b", "c"):
        p = admitted(c, pod(name, container(gpu=1, gpumem=1000)))
        body = client.post("/prioritize", json={"Pod": p, "NodeNames": names}).get_json()
        top = max(h["Score"] for h in body)
        best = [h["Host"] for h in body if h["Score"] == top]
        assert len(best) == 1 and top > 0
        chosen.append(best[0])
    assert len(set(chosen)) == 3  # a burst of three spreads over three nodes' locks


def test_prioritize_breaks_ties_as_the_filter_result_does():
    """Equal scores go to the smallest node name in both /prioritize and
    ``FilterResult.best`` (what ``hami simulate`` binds to), whatever the order the
    names arrive in."""
    c = cluster(*(node(f"n{i}", [gpu(f"GPU-{i}")]) for i in range(3)))
    sched = Scheduler(c, manager())
    client = create_extender_app(sched).test_client()
    p = admitted(c, pod("p", container(gpu=1, gpumem=1000)))
    names = ["n2", "n0", "n1"]
    body = client.post("/prioritize", json={"Pod": p, "NodeNames": names}).get_json()
    top = max(h["Score"] for h in body)
    assert [h["Host"] for h in body if h["Score"] == top] == ["n0"]
    assert sched.filter(p, names).best() == "n0"


def test_bind_writes_the_allocation_and_counts(env):
    c, _, client, _, metrics = env
    p = admitted(c, pod("p", container(gpu=1, gpumem=3000, gpucores=30)))
    args = json.loads((FIXTURES / "bind-request.json").read_text())
    args.update(PodName="p", PodNamespace="default", PodUID=p["metadata"]["uid"], Node="n1")
    assert client.post("/bind", json=args).get_json() == {"Error": ""}
    bound = c.get_pod("default", "p")
    ann = bound["metadata"]["annotations"]
    assert bound["spec"]["nodeName"] == "n1"
    assert ann["hami.io/vgpu-devices-to-allocate"] == "GPU-1,NVIDIA,3000,30:;"
    assert ann["hami.io/vgpu-devices-allocated"] == "GPU-1,NVIDIA,3000,30:;"
    assert ann["hami.io/bind-phase"] == "allocating" and ann["hami.io/vgpu-node"] == "n1"
    assert bound["metadata"]["labels"]["hami.io/vgpu-node"] == "n1"
    assert c.get_node("n1")["metadata"]["annotations"]["hami.io/mutex.lock"].endswith(",default,p")
    assert c.events == []  # no BindingSucceed by default (--success-events)
    assert metrics.registry.get_sample_value("hami_scheduler_bind_success_total") == 1
    text = "\n".join(f"{m.name}" for m in metrics.registry.collect())
    assert "hami_gpu_memory_allocated_bytes" in text
    assert (
        metrics.registry.get_sample_value(
            "hami_gpu_memory_allocated_bytes",
            {
                "node": "n1",
                "device_uuid": "GPU-1",
                "device_index": "0",
                "device_cores": "100",
                "device_type": "NVIDIA A100-PCIE-16GB",
            },
        )
        == 3000 * 2**20
    )
    assert (
        metrics.registry.get_sample_value(
            "hami_vgpu_memory_allocated_bytes",
            {
                "namespace": "default",
                "node": "n1",
                "pod": "p",
                "container_index": "0",
                "device_uuid": "GPU-1",
            },
        )
        == 3000 * 2**20
    )


def test_follower_refuses_bind(env):
    c, _, client, state, metrics = env
    p = admitted(c, pod("p", container(gpu=1, gpumem=1000)))
    state["leader"] = False
    body = client.post(
        "/bind",
        json={
            "PodName": "p",
            "PodNamespace": "default",
            "PodUID": p["metadata"]["uid"],
            "Node": "n1",
        },
    ).get_json()
    assert "not the leader" in body["Error"] and "other-replica" in body["Error"]
    assert "hami.io/vgpu-node" not in (
        c.get_pod("default", "p")["metadata"].get("annotations") or {}
    )
    assert metrics.registry.get_sample_value("hami_scheduler_bind_failure_total") == 1


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({}, "ExtenderBindingArgs: missing podname, podnamespace, poduid, node"),
        ({"PodName": "p"}, "ExtenderBindingArgs: missing podnamespace, poduid, node"),
        (
            {"PodName": "p", "PodNamespace": "default", "PodUID": 3, "Node": ["n1"]},
            "ExtenderBindingArgs: poduid, node must be strings",
        ),
    ],
)
def test_bind_malformed(env, payload, error):
    _, _, client, _, _ = env
    assert client.post("/bind", json=payload).get_json()["Error"] == error


def test_bind_unknown_pod_and_uid_mismatch(env):
    c, _, client, _, _ = env
    assert (
        "not found"
        in client.post(
            "/bind",
            json={"PodName": "ghost", "PodNamespace": "default", "PodUID": "u", "Node": "n1"},
        ).get_json()["Error"]
    )
    admitted(c, pod("p", container(gpu=1, gpumem=1000)))
    assert (
        "has uid"
        in client.post(
            "/bind",
            json={"PodName": "p", "PodNamespace": "default", "PodUID": "wrong", "Node": "n1"},
        ).get_json()["Error"]
    )


def test_health_ready_backends(env):
    _, _, client, _, _ = env
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert "nvidia" in [b["name"] for b in client.get("/-/backends").get_json()]
    assert client.get("/nope").status_code == 404
    assert client.get("/filter").status_code == 405


def test_not_ready():
    c = cluster()
    app = create_extender_app(Scheduler(c, manager()), is_ready=lambda: False)
    assert app.test_client().get("/readyz").status_code == 503


def test_internal_errors_are_reported_in_error(env, monkeypatch):
    c, sched, client, _, _ = env
    p = admitted(c, pod("p", container(gpu=1, gpumem=1000)))

    def boom(*a, **k):
        raise RuntimeError("cache exploded")

    monkeypatch.setattr(sched, "filter", boom)
    body = client.post("/filter", json={"Pod": p, "NodeNames": ["n1"]}).get_json()
    assert body["Error"] == "internal error: cache exploded"
    monkeypatch.setattr(sched, "bind", boom)
    assert (
        client.post(
            "/bind", json={"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n1"}
        ).get_json()["Error"]
        == "internal error: cache exploded"
    )
    monkeypatch.setattr(sched, "prioritize", boom)
    assert client.post("/prioritize", json={"Pod": p, "NodeNames": ["n1"]}).get_json() == []
    _ = ConflictError


@pytest.mark.parametrize(
    ("pod_obj", "message"),
    [
        (
            {"metadata": {"name": "p", "annotations": {"a": 1}}},
            "metadata.annotations must map strings to strings",
        ),
        (
            {"metadata": {"name": "p", "annotations": ["x"]}},
            "metadata.annotations must map strings to strings",
        ),
        (
            {"metadata": {"name": "p"}, "spec": {"containers": "c"}},
            "spec.containers must be a list",
        ),
        (
            {
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "resources": {"limits": []}}]},
            },
            "resources must hold limits and requests objects",
        ),
        ({"metadata": {"name": 3}}, "metadata.name must be a string"),
        ({"metadata": {"name": "p"}, "spec": []}, "pod spec must be an object"),
    ],
)
def test_malformed_pods_are_named_not_internal_errors(env, pod_obj, message):
    _, _, client, _, _ = env
    body = client.post("/filter", json={"Pod": pod_obj, "NodeNames": ["n1"]}).get_json()
    assert message in body["Error"] and "internal error" not in body["Error"]


@pytest.mark.parametrize("nodes", [[], "n1", 3])
def test_nodes_that_are_not_a_node_list_are_named(env, nodes):
    c, _, client, _, _ = env
    p = admitted(c, pod("p", container(gpu=1, gpumem=100)))
    body = client.post("/filter", json={"Pod": p, "Nodes": nodes}).get_json()
    assert body["Error"] == "ExtenderArgs.Nodes must be a NodeList object ({'items': [...]})"
    assert body["NodeNames"] == []


@pytest.mark.parametrize(
    "items", [[{}], [{"metadata": "x"}], [{"metadata": {"name": "n", "annotations": []}}]]
)
def test_malformed_node_objects_are_named(env, items):
    c, _, client, _, _ = env
    p = admitted(c, pod("p", container(gpu=1, gpumem=100)))
    body = client.post("/filter", json={"Pod": p, "Nodes": {"items": items}}).get_json()
    assert "Nodes.items must be a list of Node objects" in body["Error"]


def test_deeply_nested_and_huge_bodies(env):
    _, _, client, _, _ = env
    deep = "[" * 200_000 + "]" * 200_000
    for path in ("/filter", "/bind"):
        body = client.post(path, data=deep, content_type="application/json").get_json()
        assert "nests too deeply" in body["Error"] or "must be a JSON object" in body["Error"]
    huge = client.post("/filter", data=b" " * (65 * 1024 * 1024), content_type="application/json")
    assert huge.status_code == 413 and huge.get_json()["Error"]


def test_a_node_named_twice_is_answered_once_in_kube_schedulers_order(env):
    """kube-scheduler names each node once; a request naming one twice (a buggy or
    hostile caller) gets each node once, where it first appears, not an echo."""
    c, _, client, _, _ = env
    p = admitted(c, pod("p", container(gpu=1, gpumem=4000)))
    names = ["n2", "n1", "n2", "n1", "n2"]
    body = client.post("/filter", json={"Pod": p, "NodeNames": names}).get_json()
    assert body["NodeNames"] == ["n2", "n1"] and body["FailedNodes"] == {}
    plain = c.add_pod(pod("plain", {"name": "c", "image": "x"}))  # not ours: every node passes
    body = client.post("/filter", json={"Pod": plain, "NodeNames": names}).get_json()
    assert body["NodeNames"] == ["n2", "n1"]
    big = admitted(c, pod("big", container(gpu=1, gpumem=10000)))
    body = client.post("/filter", json={"Pod": big, "NodeNames": ["n2", "n1", "n2"]}).get_json()
    assert body["NodeNames"] == ["n1"] and list(body["FailedNodes"]) == ["n2"]
    scores = client.post("/prioritize", json={"Pod": p, "NodeNames": names}).get_json()
    assert [s["Host"] for s in scores] == ["n2", "n1"]
    objects = {"items": [node("x1", [gpu("GPU-X")]), node("x2", [gpu("GPU-Y")])]}
    objects["items"].append(copy.deepcopy(objects["items"][0]))
    body = client.post("/filter", json={"Pod": p, "Nodes": objects}).get_json()
    assert body["NodeNames"] == ["x1", "x2"]
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["x1", "x2"]
    scores = client.post("/prioritize", json={"Pod": p, "Nodes": objects}).get_json()
    assert [s["Host"] for s in scores] == ["x1", "x2"]


def test_a_pod_fitting_nowhere_is_told_to_consolidation_on_the_leader_only():
    c = cluster(node("n1", [gpu("GPU-1", memory_mib=8192)]))
    told: list[str] = []
    state = {"leader": True}
    app = create_extender_app(
        Scheduler(c, manager()),
        is_leader=lambda: state["leader"],
        on_no_node=lambda p: told.append(p["metadata"]["name"]),
    )
    client = app.test_client()
    huge = admitted(c, pod("huge", container(gpu=1, gpumem=20000)))
    small = admitted(c, pod("small", container(gpu=1, gpumem=1000)))
    for p in (huge, small):
        client.post("/filter", json={"Pod": p, "NodeNames": ["n1"]})
    assert told == ["huge"]
    state["leader"] = False
    client.post("/filter", json={"Pod": huge, "NodeNames": ["n1"]})
    assert told == ["huge"]
