"""The report on a small cluster whose every number was worked out by hand.

Cluster: node-a with two 40960 MiB GPUs, node-b with one 15360 MiB T4; default
policies (node binpack, GPU spread). Pods, in order:

- train  gpu 2 x 30000        -> only node-a has two GPUs: GPU-node-a-0 and -1.
- small  gpu 1 x 10000, 20 %  -> binpack: node-a scores (40000/40960 + .2 + .2)/3 and
                                 (30000/40960 + .1)/3 averaged = 36.8 > node-b's 31.7;
                                 spread inside: both GPUs equally loaded -> index 0.
- whole  gpu 1 (whole card)   -> node-a's GPUs are shared: node-b, 15360 MiB, 100 %.
- big    gpu 1 x 12000        -> node-a: free 960 and 10960 -> 2/2 CardInsufficientMemory,
                                 largest 10960; node-b: full -> 1/1 ..., largest 0.
- bad    gpumem 16Gi          -> denied by the webhook.
- nogpu  no devices           -> placed (first node by name), holds nothing.

Summary: 3 pods with GPUs on 3 GPUs; whole cards: 2 + 1 + 1 = 4.
"""

import json

import pytest

from hami_core.errors import InvalidInputError
from hami_core.model import DevicePolicy, NodePolicy
from hami_core.simulate.report import (
    bar,
    build_explanation,
    build_report,
    render_explanation,
    render_text,
)

from .helpers import gpu_pod, run, simple_cluster

CLUSTER = simple_cluster(
    ("node-a", [{"model": "NVIDIA A100-PCIE-40GB", "memoryMiB": 40960, "count": 2}]),
    ("node-b", [{"model": "NVIDIA Tesla T4", "memoryMiB": 15360}]),
)
PODS = [
    gpu_pod("train", gpu=2, gpumem=30000),
    gpu_pod("small", gpu=1, gpumem=10000, gpucores=20),
    gpu_pod("whole", gpu=1),
    gpu_pod("big", gpu=1, gpumem=12000),
    gpu_pod("bad", gpu=1, gpumem="16Gi"),
    gpu_pod("nogpu"),
]


def report(**kw):
    sim = run(CLUSTER, PODS, **kw)
    return sim, build_report(sim)


def pods_by_name(data):
    return {p["name"]: p for p in data["pods"]}


def test_placements_with_gpus_memory_and_cores():
    _, data = report()
    pods = pods_by_name(data)
    assert [p["status"] for p in data["pods"]] == [
        "placed",
        "placed",
        "placed",
        "unschedulable",
        "denied",
        "placed",
    ]
    assert pods["train"]["node"] == "node-a"
    assert [
        (d["uuid"], d["index"], d["memoryMiB"], d["coresPct"]) for d in pods["train"]["devices"]
    ] == [
        ("GPU-node-a-0", 0, 30000, 0),
        ("GPU-node-a-1", 1, 30000, 0),
    ]
    assert [
        (d["uuid"], d["memoryMiB"], d["coresPct"], d["model"]) for d in pods["small"]["devices"]
    ] == [("GPU-node-a-0", 10000, 20, "NVIDIA A100-PCIE-40GB")]
    assert pods["whole"]["node"] == "node-b"
    assert [(d["uuid"], d["memoryMiB"], d["coresPct"]) for d in pods["whole"]["devices"]] == [
        ("GPU-node-b-0", 15360, 100)
    ]
    assert pods["nogpu"]["node"] == "node-a" and pods["nogpu"]["devices"] == []
    assert pods["train"]["request"] == [
        {
            "container": "main",
            "init": False,
            "vendor": "NVIDIA",
            "count": 2,
            "memoryMiB": 30000,
            "memoryPct": 0,
            "coresPct": 0,
            "coresUnit": "percent",
        }
    ]


def test_denied_pod_carries_the_webhook_message():
    _, data = report()
    bad = pods_by_name(data)["bad"]
    assert bad["node"] is None and bad["devices"] == [] and bad["explanation"] is None
    assert "nvidia.com/gpumem" in bad["message"] and "'16Gi'" in bad["message"]


def test_unschedulable_pod_is_explained_per_node_with_the_largest_fit():
    _, data = report()
    big = pods_by_name(data)["big"]
    assert big["node"] is None
    by_node = {e["node"]: e for e in big["explanation"]}
    assert by_node["node-a"]["reason"] == "2/2 CardInsufficientMemory"
    assert by_node["node-a"]["largestMemoryMiB"] == 10960
    assert by_node["node-a"]["largestCoresPct"] is None  # not a core shortfall
    assert by_node["node-a"]["container"] == "main"
    assert [(d["uuid"], d["reason"]) for d in by_node["node-a"]["devices"]] == [
        ("GPU-node-a-0", "CardInsufficientMemory"),
        ("GPU-node-a-1", "CardInsufficientMemory"),
    ]
    assert by_node["node-b"]["reason"] == "1/1 CardInsufficientMemory"
    assert by_node["node-b"]["largestMemoryMiB"] is None  # full: no size would fit


def test_core_shortfall_reports_the_largest_cores_that_fit():
    sim = run(
        simple_cluster(("n", [{"model": "NVIDIA A10", "memoryMiB": 23028}])),
        [
            gpu_pod("a", gpu=1, gpumem=1000, gpucores=70),
            gpu_pod("b", gpu=1, gpumem=1000, gpucores=50),
        ],
    )
    (entry,) = pods_by_name(build_report(sim))["b"]["explanation"]
    assert entry["reason"] == "1/1 CardInsufficientCore"
    assert (entry["largestCoresPct"], entry["largestMemoryMiB"]) == (30, None)
    assert "largest that fits: 30% cores per GPU" in render_text(build_report(sim))


def test_both_shortfalls_are_reported_when_the_request_exceeds_both():
    sim = run(
        simple_cluster(("n", [{"model": "NVIDIA A10", "memoryMiB": 16384}])),
        [
            gpu_pod("a", gpu=1, gpumem=16000, gpucores=60),
            gpu_pod("b", gpu=1, gpumem=1000, gpucores=50),
        ],
    )
    (entry,) = pods_by_name(build_report(sim))["b"]["explanation"]
    assert entry["reason"] == "1/1 CardInsufficientMemory"  # the first failing check
    assert (entry["largestMemoryMiB"], entry["largestCoresPct"]) == (384, 40)
    assert (
        "n: 1/1 CardInsufficientMemory; largest that fits: 384 MiB, 40% cores per GPU"
        in render_text(build_report(sim))
    )


def test_a_pod_that_already_exists_is_an_error_and_frees_nothing():
    sim = run(
        simple_cluster(("n", [{"model": "NVIDIA A10", "memoryMiB": 16384}])),
        [
            gpu_pod("a", gpu=1, gpumem=4000),
            gpu_pod("a", gpu=1, gpumem=2000),
            gpu_pod("a", namespace="other", gpu=1, gpumem=1000),
        ],
    )
    data = build_report(sim)
    assert [p["status"] for p in data["pods"]] == ["placed", "error", "placed"]
    assert data["pods"][1]["message"] == "pod default/a already exists"
    assert data["gpus"][0]["usedMemoryMiB"] == 5000
    assert data["summary"]["errors"] == 1


def test_gpu_usage_and_summary_numbers():
    _, data = report()
    gpus = {g["uuid"]: g for g in data["gpus"]}
    a0, a1, b0 = gpus["GPU-node-a-0"], gpus["GPU-node-a-1"], gpus["GPU-node-b-0"]
    assert (a0["usedMemoryMiB"], a0["usedCoresPct"], a0["sharers"], a0["pods"]) == (
        40000,
        20,
        2,
        ["default/small", "default/train"],
    )
    assert (a1["usedMemoryMiB"], a1["usedCoresPct"], a1["sharers"]) == (30000, 0, 1)
    assert (b0["usedMemoryMiB"], b0["usedCoresPct"], b0["pods"]) == (15360, 100, ["default/whole"])
    s = data["summary"]
    assert s == {
        "pods": 6,
        "placed": 4,
        "placedWithDevices": 3,
        "withoutDevices": 1,
        "unschedulable": 1,
        "denied": 1,
        "errors": 0,
        "gpusUsed": 3,
        "wholeCardGpus": 4,
        "otherScheduler": 0,
        "unmanaged": 0,
        "existingPods": 0,
        "line": "3 pods on 3 GPUs; one GPU per pod would need 4",
    }
    assert data["cluster"] == {
        "source": "test",
        "form": "simple",
        "nodes": 2,
        "gpus": 3,
        "existingPods": 0,
    }
    assert data["policies"] == {"node": "binpack", "gpu": "spread"}


def test_text_report_has_placements_explanation_bars_and_summary():
    _, data = report()
    text = render_text(data)
    lines = text.splitlines()
    assert any(
        line.split()[:3] == ["default/train", "node-a", "#0"] and "30000 MiB" in line
        for line in lines
    )
    assert any("#1 GPU-node-a-1" in line and "30000 MiB" in line for line in lines)
    assert any(
        line.split()[:2] == ["default/whole", "node-b"] and "15360 MiB" in line and "100%" in line
        for line in lines
    )
    assert "default/nogpu  node-a  (no devices)" in text
    assert "Denied by the webhook (1)" in text
    assert "  default/bad: container 'main': nvidia.com/gpumem: '16Gi'" in text
    assert "Unschedulable (1)" in text
    assert "  default/big: asks 1 GPU x 12000 MiB, 0% cores" in text
    assert "    node-a: 2/2 CardInsufficientMemory; largest that fits: 10960 MiB per GPU" in text
    assert "    node-b: 1/1 CardInsufficientMemory\n" in text
    assert "[#########-]  40000/40960 MiB  cores 20/100%   2 pods" in text
    assert "[#######---]  30000/40960 MiB  cores 0/100%    1 pod" in text
    assert "[##########]  15360/15360 MiB  cores 100/100%  1 pod" in text
    assert (
        lines[-1]
        == "Summary: 3 pods on 3 GPUs; one GPU per pod would need 4 (1 unschedulable, 1 denied, 1 pod without GPUs)"
    )


def test_json_schema_keys_are_stable():
    _, data = report()
    json.dumps(data)  # serialisable
    assert set(data) == {
        "schema",
        "cluster",
        "workloads",
        "policies",
        "pods",
        "gpus",
        "summary",
        "groups",
        "warnings",
    }
    assert data["schema"] == "hami.simulate/v1"
    for p in data["pods"]:
        assert set(p) == {
            "namespace",
            "name",
            "source",
            "status",
            "node",
            "message",
            "request",
            "devices",
            "wholeCardGpus",
            "explanation",
            "notModelled",
            "deniedBy",
            "schedulerName",
            "admission",
            "containers",
            "preempted",
            "preemption",
        }
        for d in p["devices"]:
            assert set(d) == {
                "container",
                "init",
                "vendor",
                "uuid",
                "index",
                "model",
                "mode",
                "migProfile",
                "migPlacement",
                "memoryMiB",
                "coresPct",
                "coresUnit",
            }
        for e in p["explanation"] or []:
            assert set(e) == {
                "node",
                "reason",
                "container",
                "vendor",
                "largestMemoryMiB",
                "largestCoresPct",
                "coresUnit",
                "devices",
            }
    for g in data["gpus"]:
        assert set(g) == {
            "node",
            "uuid",
            "index",
            "vendor",
            "model",
            "mode",
            "migInstance",
            "memoryMiB",
            "usedMemoryMiB",
            "coresPct",
            "usedCoresPct",
            "freeMemoryMiB",
            "coresUnit",
            "splitCount",
            "sharers",
            "pods",
            "healthy",
            "cordoned",
        }


def test_same_input_gives_the_same_report():
    first = json.dumps(report()[1], sort_keys=False)
    second = json.dumps(report()[1], sort_keys=False)
    assert first == second


def test_explain_an_unschedulable_pod():
    sim = run(CLUSTER, PODS, explain="big")
    data = build_explanation(sim, "default/big")
    assert data["status"] == "unschedulable" and data["chosen"] is None
    assert data["policies"] == {
        "node": "binpack",
        "nodeFrom": "config",
        "gpu": "spread",
        "gpuFrom": "config",
    }
    nodes = {n["node"]: n for n in data["nodes"]}
    a = nodes["node-a"]
    assert not a["fits"] and a["reason"] == "2/2 CardInsufficientMemory"
    # the usage the pod saw, per device, with its reason
    assert [
        (d["usedMemoryMiB"], d["usedCoresPct"], d["sharers"], d["reason"]) for d in a["devices"]
    ] == [
        (40000, 20, 2, "CardInsufficientMemory"),
        (30000, 0, 1, "CardInsufficientMemory"),
    ]
    text = render_explanation(data)
    assert "Pod default/big" in text and ": unschedulable" in text
    assert "request: 1 GPU x 12000 MiB, 0% cores" in text
    assert "policies: node binpack (config), GPU spread (config)" in text
    assert "node-a: does not fit: 2/2 CardInsufficientMemory (container main)" in text
    assert "used 40000/40960 MiB" in text and "2/10 sharers" in text
    assert "largest that fits: 10960 MiB per GPU" in text
    assert "chosen: none" in text


def test_explain_a_placed_pod_shows_scores_and_the_chosen_devices():
    sim = run(CLUSTER, PODS, explain="small")
    data = build_explanation(sim, "small")
    nodes = {n["node"]: n for n in data["nodes"]}
    assert nodes["node-a"]["fits"] and nodes["node-b"]["fits"]
    assert nodes["node-a"]["score"] > nodes["node-b"]["score"]
    assert 0 <= nodes["node-b"]["extenderScore"] <= nodes["node-a"]["extenderScore"] <= 10
    takes = [d["takes"] for d in nodes["node-a"]["devices"]]
    assert takes == [{"memoryMiB": 10000, "coresPct": 20}, None]
    assert data["chosen"]["node"] == "node-a"
    assert [d["uuid"] for d in data["chosen"]["devices"]] == ["GPU-node-a-0"]
    text = render_explanation(data)
    assert "node-a: fits, score" in text and "(extender " in text
    assert "chosen: node-a (highest binpack score" in text
    assert "main: #0 GPU-node-a-0 NVIDIA A100-PCIE-40GB, 10000 MiB, 20% cores" in text


def test_explain_a_denied_pod():
    sim = run(CLUSTER, PODS, explain="bad")
    text = render_explanation(build_explanation(sim, "bad"))
    assert "denied: " in text and "'16Gi'" in text


def test_explain_names_the_policy_source():
    pods = [
        gpu_pod("p", gpu=1, gpumem=1000, annotations={"hami.io/gpu-scheduler-policy": "binpack"})
    ]
    sim = run(CLUSTER, pods, explain="p", node_policy=NodePolicy.SPREAD)
    pol = build_explanation(sim, "p")["policies"]
    assert pol == {
        "node": "spread",
        "nodeFrom": "command line",
        "gpu": "binpack",
        "gpuFrom": "pod annotation",
    }


def test_bar():
    assert bar(0, 100) == "[----------]"
    assert bar(1, 100) == "[#---------]"
    assert bar(99, 100) == "[#########-]"
    assert bar(100, 100) == "[##########]"
    assert bar(61440, 81920) == "[#######---]"
    assert bar(5, 0) == "[----------]"


def test_links_of_the_simple_form_drive_the_topology_aware_policy():
    cluster = {
        "nodes": [
            {
                "name": "n",
                "gpus": [{"model": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920, "count": 4}],
                "links": [
                    {"gpus": [0, 1], "score": 20},
                    {"gpus": [2, 3], "score": 400},
                    {"gpus": [1, 2], "score": 10},
                ],
            }
        ]
    }
    pods = [gpu_pod("p", gpu=2, gpumem=1000)]
    placed = build_report(run(cluster, pods, device_policy=DevicePolicy.TOPOLOGY_AWARE))["pods"][0]
    assert [d["index"] for d in placed["devices"]] == [2, 3]
    spread = build_report(run(cluster, pods))["pods"][0]
    assert [d["index"] for d in spread["devices"]] == [0, 1]


def test_find_pod_by_name_and_namespace():
    sim = run(
        CLUSTER,
        [
            gpu_pod("x", namespace="a", gpu=1),
            gpu_pod("x", namespace="b", gpu=1),
            gpu_pod("y", gpu=1),
        ],
    )
    assert sim.find("b/x").key == "b/x"
    assert sim.find("y").key == "default/y"
    with pytest.raises(InvalidInputError, match="several namespaces: a/x, b/x"):
        sim.find("x")
    with pytest.raises(InvalidInputError, match="no pod 'z'"):
        sim.find("z")
