"""Each vendor's compute is written in its own unit (``DeviceTypeInfo.cores_unit``) by
``hami simulate`` (text, ``--explain`` and JSON) and ``hami top``: AMD compute units,
AWS NeuronCores (counted from the core masks the device lists carry), Moore Threads'
16 sGPU cores per GPU, nothing for count-only Biren and Vastai; NVIDIA and the other
percent vendors keep ``%``. Run on the all-vendors example cluster."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hami_core.cli import cli

from .helpers import EXAMPLES, write

CLUSTER = EXAMPLES / "cluster-all-vendors.yaml"
WORKLOADS = EXAMPLES / "workloads-all-vendors"


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def simulate(*args: str, workloads: Path = WORKLOADS) -> str:
    return invoke("simulate", "--cluster", str(CLUSTER), str(workloads), *args)


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return json.loads(simulate("-o", "json"))


@pytest.fixture(scope="module")
def text() -> str:
    return simulate()


def placed_row(text: str, pod: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(f"default/{pod} "))


def gpu_row(text: str, node: str) -> str:
    """The GPUs-section line of ``node``'s device #0."""
    gpus = text.split("\nGPUs\n", 1)[1]
    return next(line for line in gpus.splitlines() if line.strip().startswith(node))


def pod(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in data["pods"] if p["name"] == name)


def gpu(data: dict[str, Any], node: str, index: int = 0) -> dict[str, Any]:
    return next(g for g in data["gpus"] if g["node"] == node and g["index"] == index)


#: vendor pod -> (node, placed CORES cell, GPUs line cores, JSON unit, slice, used, total)
CASES = {
    # amd.com/gpucores 25 of a 304-CU MI300X: 76 CUs
    "rocm-inference": ("amd-mi300x-01", "76 CU", "76/304 CU", "compute-units", 76, 76, 304),
    # one NeuronCore: mask 1 of a device whose mask is 3 (two cores)
    "neuron-inference": (
        "inf2-01",
        "1 NeuronCore",
        "1/2 NeuronCores",
        "neuroncore-mask",
        1,
        1,
        2,
    ),
    # mthreads.com/sgpu-core 4 of 16
    "mtt-inference": ("mtt-s4000-01", "4 sGPU cores", "4/16 sGPU cores", "sgpu-cores", 4, 4, 16),
    # count-only vendors: no compute figure
    "br-inference": ("br-106-01", "-", "cores -", "none", 0, 0, 0),
    "va-inference": ("va1v-01", "-", "cores -", "none", 0, 0, 0),
    # percent vendors are unchanged
    "cuda-inference": ("gpu-a100-01", "30%", "cores 30/100%", "percent", 30, 30, 100),
    "mx-inference": ("mx-c500-01", "25%", "cores 25/100%", "percent", 25, 25, 100),
}


@pytest.mark.parametrize("name", CASES)
def test_simulate_text_writes_the_vendors_unit(text: str, name: str) -> None:
    node, cell, line, *_ = CASES[name]
    row = placed_row(text, name)
    assert row.rstrip().endswith(f" {cell}"), row
    g = gpu_row(text, node)
    assert f"  {line}  " in g, g
    if not line.endswith("%"):
        assert "%" not in row.split("MiB", 1)[1] and "%" not in g.split("MiB", 1)[1]


@pytest.mark.parametrize("name", CASES)
def test_simulate_json_names_the_unit_beside_each_number(data: dict[str, Any], name: str) -> None:
    node, _, _, unit, took, used, total = CASES[name]
    p = pod(data, name)
    assert [(d["coresPct"], d["coresUnit"]) for d in p["devices"]][:1] == [(took, unit)]
    g = gpu(data, node)
    assert (g["usedCoresPct"], g["coresPct"], g["coresUnit"]) == (used, total, unit)


def test_requests_are_in_the_cores_resources_unit(data: dict[str, Any], text: str) -> None:
    """AMD asks percent (its slices carry CUs); AWS Neuron asks NeuronCores."""
    amd = pod(data, "rocm-inference")["request"]
    neuron = pod(data, "neuron-inference")["request"]
    mtt = pod(data, "mtt-inference")["request"]
    assert [(r["coresPct"], r["coresUnit"]) for r in amd] == [(25, "percent")]
    assert [(r["coresPct"], r["coresUnit"]) for r in neuron] == [(1, "neuroncores")]
    assert [(r["coresPct"], r["coresUnit"]) for r in mtt] == [(4, "sgpu-cores")]
    explain = simulate("--explain", "default/neuron-inference")
    assert "request: 1 AWSNeuron x 100% of memory, 1 NeuronCore\n" in explain
    assert "takes 0 MiB, 1 NeuronCore" in explain
    assert "main: #0 inf2-01-AWSNeuron-0 AWSNeuron, 0 MiB, 1 NeuronCore" in explain
    explain = simulate("--explain", "default/rocm-inference")
    assert "request: 1 AMD x 16384 MiB, 25% cores\n" in explain
    assert re.search(r"used 0/196592 MiB +0/304 CU +0/4 sharers +takes 16384 MiB, 76 CU", explain)
    assert "304%" not in explain and "76%" not in explain


def test_a_whole_neuron_device_counts_its_cores_not_its_mask(tmp_path: Path) -> None:
    """``aws.amazon.com/neuron: 1`` takes the whole device: mask 3, two NeuronCores; the
    request's whole-device marker (100) is written as the two cores it charges."""
    pods = write(
        tmp_path / "neuron.yaml",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "whole", "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "resources": {"limits": {"aws.amazon.com/neuron": 1}},
                    }
                ]
            },
        },
    )
    data = json.loads(simulate("-o", "json", workloads=pods))
    p = pod(data, "whole")
    assert p["status"] == "placed" and p["node"] == "inf2-01"
    assert [(r["coresPct"], r["coresUnit"]) for r in p["request"]] == [(2, "neuroncores")]
    assert [(d["coresPct"], d["coresUnit"]) for d in p["devices"]] == [(2, "neuroncore-mask")]
    g = gpu(data, "inf2-01")
    assert (g["usedCoresPct"], g["coresPct"]) == (2, 2)
    out = simulate(workloads=pods)
    assert placed_row(out, "whole").rstrip().endswith(" 2 NeuronCores")
    assert "  2/2 NeuronCores  " in gpu_row(out, "inf2-01")


def test_hami_top_writes_each_vendors_unit() -> None:
    out = invoke("top", "--snapshot", str(CLUSTER))
    rows = {(r.split()[0], r.split()[1]): r for r in out.splitlines() if r and r[0] != " "}
    assert "  0/304 CU  " in rows[("amd-mi300x-01", "0")]
    assert "  0/2 NeuronCores  " in rows[("inf2-01", "0")]
    assert "  0/16 sGPU cores  " in rows[("mtt-s4000-01", "0")]
    assert "  0/100%  " in rows[("gpu-a100-01", "0")]
    summary = out.strip().splitlines()[-1]
    assert summary.endswith(
        "compute 0/1600%, 0/608 CU, 0/8 NeuronCores, 0/32 sGPU cores allocated"
    ), summary
    data = json.loads(invoke("top", "--snapshot", str(CLUSTER), "-o", "json"))
    dev = {(d["node"], d["index"]): d for d in data["devices"]}
    amd = dev[("amd-mi300x-01", 0)]
    assert (amd["cores_total_pct"], amd["cores_unit"]) == (304, "compute-units")
    assert (dev[("inf2-01", 0)]["cores_total_pct"], dev[("inf2-01", 0)]["cores_unit"]) == (
        2,
        "neuroncore-mask",
    )
    assert dev[("va1v-01", 0)]["cores_unit"] == "none"
    # the _pct totals stay percent: only percent devices are summed there
    assert data["totals"]["cores_total_pct"] == 1600
    assert data["totals"]["cores_by_unit"] == {
        "percent": {"allocated": 0, "total": 1600},
        "compute-units": {"allocated": 0, "total": 608},
        "neuroncore-mask": {"allocated": 0, "total": 8},
        "sgpu-cores": {"allocated": 0, "total": 32},
    }


def test_an_ascend_chip_registered_with_its_ai_core_count_reads_as_100_percent(
    tmp_path: Path,
) -> None:
    """HAMi's ascend-device-plugin registers ``devcore`` = the chip's AI Core count (20
    for a 910B3) in template mode; fit reads that as the whole chip, and so do the
    outputs: ``0/100%``, not ``0/20%``."""
    chips = [
        {
            "id": f"HAMI-B3-{i}",
            "index": i,
            "count": 4,
            "devmem": 65536,
            "devcore": 20,
            "type": "Ascend910B3",
            "health": True,
        }
        for i in range(2)
    ]
    cluster = write(
        tmp_path / "cluster.yaml",
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": "npu-1",
                        "annotations": {"hami.io/node-register-Ascend910B3": json.dumps(chips)},
                    },
                    "status": {"allocatable": {"huawei.com/Ascend910B3": "8"}},
                }
            ],
        },
    )
    pods = write(
        tmp_path / "pods.yaml",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "whole", "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "resources": {"limits": {"huawei.com/Ascend910B3": 1}},
                    }
                ]
            },
        },
    )
    out = invoke("simulate", "--cluster", str(cluster), str(pods))
    assert "cores 100/100%" in out and "/20%" not in out, out
    data = json.loads(invoke("simulate", "--cluster", str(cluster), str(pods), "-o", "json"))
    assert {(g["usedCoresPct"], g["coresPct"]) for g in data["gpus"]} == {(100, 100), (0, 100)}
    top = invoke("top", "--snapshot", str(cluster))
    assert "0/100%" in top and "/20%" not in top, top


def test_top_sorts_compute_by_share_of_the_device_across_units() -> None:
    """After the all-vendors workloads ``--sort-by cores`` compares shares of the device:
    AMD's 76 of 304 CUs (25 %) sorts below NVIDIA's 30 %, never by the raw 76."""
    import yaml

    from hami_core.simulate.loader import WorkloadPod, Workloads, parse_cluster
    from hami_core.simulate.runner import simulate as run_simulation
    from hami_core.top import build_view

    from .helpers import manager

    mgr = manager()
    cluster = parse_cluster(
        list(yaml.safe_load_all(CLUSTER.read_text())), source="all", manager=mgr
    )
    pods = [
        WorkloadPod(pod=doc, source="all")
        for doc in yaml.safe_load_all((WORKLOADS / "pods.yaml").read_text())
        if doc
    ]
    sim = run_simulation(cluster, Workloads(pods=tuple(pods)), mgr)
    view = build_view(sim.pipeline.cluster, mgr, sort_by="cores")
    held = [(d.vendor, d.cores_allocated_share_pct) for d in view.devices]
    assert [h for h in held if h[1]] == [
        ("DCU", 60),
        ("Enflame", 50),
        ("BI-V150", 50),
        ("AWSNeuron", 50),  # 1 of 2 NeuronCores (mask 1 of mask 3)
        ("NVIDIA", 30),
        ("MLU", 30),
        ("AMD", 25),  # 76 of 304 CUs, not 76
        ("Mthreads", 25),  # 4 of 16 sGPU cores
        ("Metax-SGPU", 25),
        ("XPU", 25),
    ]  # ties in node order
    amd = next(d for d in view.devices if d.vendor == "AMD" and d.cores_allocated_pct)
    assert (amd.cores_allocated_pct, amd.cores_total_pct, amd.cores_allocated_share_pct) == (
        76,
        304,
        25,
    )
