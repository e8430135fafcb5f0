"""One node's garbage annotation marks that node, never the request (issue #12 item 6)."""

import pytest

from hami_core.facts.nodes import MAX_LINK_SCORE_BYTES, MAX_NODE_ANNOTATION_BYTES, read_node
from hami_core.protocol.topology import encode_link_scores
from hami_core.scheduling import state
from hami_core.scheduling.scheduler import Scheduler, utcnow
from hami_core.servers.extender import create_extender_app
from tests.builders import cluster, container, gpu, manager, node, pod
from tests.servers.test_extender import admitted, real_filter_args

REGISTER = "hami.io/node-nvidia-register"
SCORE = "hami.io/node-nvidia-score"

GARBAGE = {
    "huge-int": (REGISTER, '[{"id":"GPU-X","count":' + "9" * 5000 + "}]", "ValueError"),
    "deep-json": (REGISTER, "[" * 100000 + "]" * 100000, "bytes"),
    "deep-but-small": (REGISTER, "[" * 20000 + "]" * 20000, "RecursionError"),
    "oversize": (REGISTER, "[" + " " * (MAX_NODE_ANNOTATION_BYTES + 1) + "]", "bytes"),
    "cordon-oversize": (
        "hami.io/device-cordon",
        "x," * (MAX_NODE_ANNOTATION_BYTES // 2 + 1),
        "bytes",
    ),
}


#: Optional annotations (issue 24 item 2): unreadable, they cost what they describe (the
#: node's link scores: topology-aware placement falls back to spread), never the devices.
OPTIONAL_GARBAGE = {
    "score-oversize": (SCORE, "[" + " " * (MAX_LINK_SCORE_BYTES + 1) + "]", "bytes"),
    "score-huge-int": (
        SCORE,
        '[{"uuid":"GPU-X","score":{"GPU-Y":' + "7" * 5000 + "}}]",
        "ValueError",
    ),
    "score-beyond-int64": (
        SCORE,
        '[{"uuid":"GPU-X","score":{"GPU-Y":' + "9" * 30 + "}}]",
        "64-bit",
    ),
    "score-deep": (SCORE, "[" * 30000 + "]" * 30000, "RecursionError"),
    "score-not-json": (SCORE, "{", "not valid JSON"),
    "score-not-int": (SCORE, '[{"uuid":"GPU-X","score":{"GPU-Y":"high"}}]', "64-bit integer"),
}


def garbage_node(key, value):
    n = node("bad", [gpu("GPU-X")])
    n["metadata"]["annotations"][key] = value
    return n


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_read_node_marks_the_vendor_unusable_with_the_reason(case):
    key, value, hint = GARBAGE[case]
    info = read_node(garbage_node(key, value), manager().device_types(), now=utcnow())
    assert "NVIDIA" in info.unregistered
    assert key in info.unregistered["NVIDIA"] and hint in info.unregistered["NVIDIA"]
    assert len(info.unregistered["NVIDIA"]) < 600  # the reason is short, not the value


@pytest.mark.parametrize("case", sorted(OPTIONAL_GARBAGE))
def test_an_unreadable_optional_annotation_costs_only_what_it_describes(case):
    key, value, hint = OPTIONAL_GARBAGE[case]
    info = read_node(garbage_node(key, value), manager().device_types(), now=utcnow())
    assert info.unregistered == {}
    assert [d.uuid for d in info.devices] == ["GPU-X"]
    assert info.link_scores == {}
    assert hint in info.ignored[key] and len(info.ignored[key]) < 600


@pytest.mark.parametrize(
    "value",
    ["Requesting_garbage", "x" * (MAX_NODE_ANNOTATION_BYTES + 10), "Requesting_" + "9" * 5000, "_"],
)
def test_an_unreadable_handshake_is_no_evidence_against_the_node(value):
    """The audit of issue 24 item 2: the handshake is optional (a dead device plugin is
    proven only by a readable ``Requesting_`` older than 60 s)."""
    n = garbage_node("hami.io/node-handshake", value)
    n["status"]["allocatable"]["nvidia.com/gpu"] = "0"  # the case that counts
    info = read_node(n, manager().device_types(), now=utcnow())
    assert info.unregistered == {} and [d.uuid for d in info.devices] == ["GPU-X"]


@pytest.mark.parametrize("value", ["garbage", "x" * 70000, "2026-13-01T00:00:00Z,ns,p", ",,"])
def test_an_unreadable_node_lock_protects_nothing(value):
    """The audit of issue 24 item 2: a lock no one can read is taken at the next bind."""
    c = cluster(garbage_node("hami.io/mutex.lock", value))
    p = c.add_pod(pod("p", container(gpu=1, gpumem=1000), scheduler_name="hami-scheduler"))
    meta = p["metadata"]
    assert Scheduler(c, manager()).bind("default", "p", uid=meta["uid"], node="bad") is not None
    assert c.get_pod("default", "p")["spec"]["nodeName"] == "bad"


def test_an_oversize_annotation_is_named_once():
    limit = MAX_NODE_ANNOTATION_BYTES
    value = "[" + " " * (limit + 1) + "]"
    info = read_node(garbage_node(REGISTER, value), manager().device_types(), now=utcnow())
    assert (
        info.unregistered["NVIDIA"] == f"{REGISTER}: {len(value)} bytes, more than the {limit} read"
    )
    value = "[" + " " * (MAX_LINK_SCORE_BYTES + 1) + "]"
    info = read_node(garbage_node(SCORE, value), manager().device_types(), now=utcnow())
    assert info.ignored == {
        SCORE: f"{SCORE}: {len(value)} bytes, more than the {MAX_LINK_SCORE_BYTES} read"
    }


def test_the_link_scores_of_a_64_gpu_node_are_read():
    """All pairs both ways with NVIDIA-shaped UUIDs: 189 KB for 64 GPUs (a 64 KiB cap
    marked every GPU of a node of 38 or more unusable)."""
    uuids = [f"GPU-{i:08x}-0000-4000-8000-{i:012x}" for i in range(64)]
    scores = {
        a: {b: 10 + (i + j) % 390 for j, b in enumerate(uuids) if b != a}
        for i, a in enumerate(uuids)
    }
    value = encode_link_scores(scores)
    assert 180_000 < len(value) < MAX_LINK_SCORE_BYTES
    n = node("big", [gpu(u, index=i) for i, u in enumerate(uuids)], annotations={SCORE: value})
    info = read_node(n, manager().device_types(), now=utcnow())
    assert info.unregistered == {} and len(info.devices) == 64
    assert info.link_scores[uuids[0]][uuids[63]] == scores[uuids[0]][uuids[63]]


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_filter_and_prioritize_serve_the_good_nodes(case):
    key, value, _ = GARBAGE[case]
    c = cluster(node("good", [gpu("GPU-G")]), garbage_node(key, value))
    sched = Scheduler(c, manager())
    client = create_extender_app(sched, is_leader=lambda: True).test_client()
    p = admitted(c, pod("p", container(gpu=1, gpumem=1000)))
    resp = client.post("/filter", json=real_filter_args(p, ["good", "bad"]))
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["NodeNames"] == ["good"] and body["Error"] == ""
    assert body["FailedNodes"]["bad"].startswith("NodeUnregistered")
    resp = client.post("/prioritize", json=real_filter_args(p, ["good", "bad"]))
    assert resp.status_code == 200
    scores = {h["Host"]: h["Score"] for h in resp.get_json()}
    assert scores["bad"] == 0 and scores["good"] > 0


@pytest.mark.parametrize("case", sorted(OPTIONAL_GARBAGE))
def test_a_node_with_unreadable_link_scores_still_serves(case, caplog):
    """Before: ``NodeUnregistered`` for the node's every GPU. Now a topology-aware pod
    fits there, with one warning naming the node and the annotation."""
    key, value, _ = OPTIONAL_GARBAGE[case]
    c = cluster(node("good", [gpu("GPU-G")]), garbage_node(key, value))
    sched = Scheduler(c, manager())
    client = create_extender_app(sched, is_leader=lambda: True).test_client()
    policy = {"hami.io/gpu-scheduler-policy": "topology-aware"}
    for name in ("p", "q"):
        p = admitted(c, pod(name, container(gpu=1, gpumem=1000), annotations=policy))
        with caplog.at_level("WARNING"):
            resp = client.post("/filter", json=real_filter_args(p, ["good", "bad"]))
        assert resp.status_code == 200
        body = resp.get_json()
        assert "bad" in body["NodeNames"] and "bad" not in (body["FailedNodes"] or {}), body
    warned = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert len(warned) == 1 and "node bad" in warned[0] and "stay usable" in warned[0]


def test_an_exception_anywhere_in_one_node_marks_only_that_node(monkeypatch):
    c = cluster(node("good", [gpu("GPU-G")]), node("bad", [gpu("GPU-B")]))
    sched = Scheduler(c, manager())
    real = state.read_node

    def exploding(n, *args, **kw):
        if n["metadata"]["name"] == "bad":
            raise RecursionError("maximum recursion depth exceeded")
        return real(n, *args, **kw)

    # The scheduler's state decodes a node when its event arrives: the bad one changes.
    monkeypatch.setattr(state, "read_node", exploding)
    c.add_node(node("bad", [gpu("GPU-B")], annotations={"touched": "1"}))
    p = admitted(c, pod("p", container(gpu=1)))
    result = sched.filter(p, ["good", "bad"])
    assert result.feasible == ("good",)
    assert result.failed == {"bad": "NodeUnregistered (cannot read node: RecursionError)"}


# Vendors whose backend reads its own node annotation (hami_node_devices): what the
# backend raises on garbage reaches the core wrapped in BackendError, which read_node
# did not catch: the metrics scrape of every node failed (found by the attack run).
BACKEND_KEYS = {
    "Enflame": "enflame.com/gcu-drs-capacity",
    "Vastai": "hami.io/node-va-register",
    "Metax-SGPU": "metax-tech.com/node-gpu-devices",
}
SHAPES = {
    "huge-int": '[{"id":"X","count":' + "9" * 5000 + "}]",
    "deep": "[" * 5000 + "]" * 5000,
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("vendor", sorted(BACKEND_KEYS))
def test_a_backends_own_node_annotation_garbage_marks_only_that_node(vendor, shape):
    from prometheus_client import generate_latest

    from hami_core.servers.metrics import SchedulerMetrics

    m = manager()
    if vendor not in m.vendors:
        pytest.skip(f"the backend of {vendor} is not installed")
    bad = garbage_node(BACKEND_KEYS[vendor], SHAPES[shape])
    info = read_node(bad, m.device_types(), now=utcnow(), reader=m.node_devices)
    assert vendor in info.unregistered and "unreadable" in info.unregistered[vendor]
    c = cluster(node("good", [gpu("GPU-G")]), bad)
    sched = Scheduler(c, m)
    text = generate_latest(SchedulerMetrics(sched).registry).decode()
    assert 'hami_gpu_memory_limit_bytes{device_index="0",device_type' in text
    assert f'hami_node_unregistered{{node="bad",vendor="{vendor}"}} 1.0' in text
    client = create_extender_app(sched, is_leader=lambda: True).test_client()
    p = admitted(c, pod("p", container(gpu=1, gpumem=1000)))
    args = real_filter_args(p, ["good", "bad"])
    args["Nodes"], args["NodeNames"] = {"items": [c.get_node("good"), bad]}, None
    body = client.post("/filter", json=args).get_json()
    # the NVIDIA pod still fits both: only the garbage vendor is unusable on "bad"
    assert body["NodeNames"] == ["good", "bad"] and body["Error"] == ""
