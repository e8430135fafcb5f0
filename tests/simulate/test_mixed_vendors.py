"""``hami simulate`` on the mixed-vendor example: NVIDIA, Ascend 910B3 and Cambricon
MLU370 nodes in one cluster; every pod lands only on devices of the vendor it asked for."""

import json

from click.testing import CliRunner

from hami_core.cli import cli

from .helpers import EXAMPLES

CLUSTER = EXAMPLES / "cluster-mixed-vendors.yaml"
WORKLOADS = EXAMPLES / "workloads-mixed"

#: pod -> (the vendor key it asks for, the status it must end in)
EXPECTED = {
    "cuda-train-whole-card": ("NVIDIA", "placed"),
    "cuda-inference-0": ("NVIDIA", "placed"),
    "cuda-inference-1": ("NVIDIA", "placed"),
    "npu-inference": ("Ascend910B3", "placed"),
    "npu-train-0": ("Ascend910B3", "placed"),
    "mlu-inference": ("MLU", "placed"),
    "mlu370-batch": ("MLU", "placed"),
    "mlu-train-3-cards": ("MLU", "unschedulable"),
}


def run_example():
    result = CliRunner().invoke(
        cli, ["simulate", "--cluster", str(CLUSTER), str(WORKLOADS), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_every_pod_is_placed_only_on_its_own_vendors_devices():
    data = run_example()
    assert data["cluster"]["form"] == "snapshot" and data["cluster"]["nodes"] == 3
    assert not data["warnings"]
    inventory = {g["uuid"]: g for g in data["gpus"]}
    assert {g["vendor"] for g in data["gpus"]} == {"NVIDIA", "Ascend910B3", "MLU"}
    pods = {p["name"]: p for p in data["pods"]}
    assert {name: p["status"] for name, p in pods.items()} == {
        name: status for name, (_, status) in EXPECTED.items()
    }
    for name, (vendor, status) in EXPECTED.items():
        pod = pods[name]
        assert {r["vendor"] for r in pod["request"]} == {vendor}, name
        if status != "placed":
            assert pod["devices"] == [] and pod["node"] is None, name
            continue
        assert pod["devices"], name
        for d in pod["devices"]:
            held = inventory[d["uuid"]]  # what the node's inventory says the device is
            assert d["vendor"] == held["vendor"] == vendor, (name, d)
            assert held["node"] == pod["node"], (name, d)
            assert f"default/{name}" in held["pods"]


def test_the_placements_follow_each_vendors_rules():
    pods = {p["name"]: p for p in run_example()["pods"]}
    # Ascend: 10000 MiB rounds up to the vir05_1c_16g template; whole chips for the job
    assert [d["memoryMiB"] for d in pods["npu-inference"]["devices"]] == [16384]
    train = pods["npu-train-0"]["devices"]
    assert [(d["memoryMiB"], d["coresPct"]) for d in train] == [(65536, 100)] * 2
    assert len({d["uuid"] for d in train}) == 2
    # Cambricon: 20 units of 256 MiB; the model-qualified names on an MLU370
    assert [(d["memoryMiB"], d["coresPct"]) for d in pods["mlu-inference"]["devices"]] == [
        (5120, 30)
    ]
    assert [d["model"] for d in pods["mlu370-batch"]["devices"]] == ["MLU370-X8"]
    # NVIDIA: the whole card and the two slices on the other A100
    whole = pods["cuda-train-whole-card"]["devices"]
    assert [(d["memoryMiB"], d["coresPct"]) for d in whole] == [(81920, 100)]
    shared = {
        d["uuid"] for n in ("cuda-inference-0", "cuda-inference-1") for d in pods[n]["devices"]
    }
    assert len(shared) == 1 and shared.isdisjoint({d["uuid"] for d in whole})


def test_the_pod_that_fits_nowhere_is_explained_on_every_node():
    pod = {p["name"]: p for p in run_example()["pods"]}["mlu-train-3-cards"]
    by_node = {e["node"]: e["reason"] for e in pod["explanation"]}
    assert set(by_node) == {"gpu-a100-01", "npu-910b3-01", "mlu-370-01"}
    # the NVIDIA and Ascend nodes have room, but no MLU
    assert by_node["gpu-a100-01"] == by_node["npu-910b3-01"] == "NodeInsufficientDevice"
    assert by_node["mlu-370-01"].startswith("NodeInsufficientDevice")


def test_explain_marks_other_vendors_devices():
    result = CliRunner().invoke(
        cli,
        ["simulate", "--cluster", str(CLUSTER), str(WORKLOADS), "--explain", "mlu-train-3-cards"],
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if "NVIDIA A100" in line]
    assert lines and all(line.rstrip().endswith("other vendor") for line in lines)
