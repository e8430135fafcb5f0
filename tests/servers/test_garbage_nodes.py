"""One node's garbage annotation marks that node, never the request (issue #12 item 6)."""

import pytest

from hami_core.protocol.topology import encode_link_scores
from hami_core.scheduling import state
from hami_core.scheduling.nodes import MAX_LINK_SCORE_BYTES, MAX_NODE_ANNOTATION_BYTES, read_node
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
    "score-oversize": (SCORE, "[" + " " * (MAX_LINK_SCORE_BYTES + 1) + "]", "bytes"),
    "score-huge-int": (
        SCORE,
        '[{"uuid":"GPU-X","score":{"GPU-Y":' + "7" * 5000 + "}}]",
        "ValueError",
    ),
    "score-deep": (SCORE, "[" * 30000 + "]" * 30000, "RecursionError"),
    "cordon-oversize": (
        "hami.io/device-cordon",
        "x," * (MAX_NODE_ANNOTATION_BYTES // 2 + 1),
        "bytes",
    ),
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


@pytest.mark.parametrize(
    ("key", "limit"), [(REGISTER, MAX_NODE_ANNOTATION_BYTES), (SCORE, MAX_LINK_SCORE_BYTES)]
)
def test_an_oversize_annotation_is_named_once(key, limit):
    value = "[" + " " * (limit + 1) + "]"
    info = read_node(garbage_node(key, value), manager().device_types(), now=utcnow())
    assert info.unregistered["NVIDIA"] == f"{key}: {len(value)} bytes, more than the {limit} read"


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
