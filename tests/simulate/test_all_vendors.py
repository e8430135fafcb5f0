"""``hami simulate`` on the all-vendors example: one node of each of the 13 vendor
backends, each with its inventory where HAMi 2.10 reads it (register annotations, node
capacity, MetaX's and Enflame's own annotations); one pod per vendor lands on its own
vendor's devices, and ``hami backends`` lists the 13."""

import json

from click.testing import CliRunner

from hami_core.cli import cli

from .helpers import EXAMPLES

CLUSTER = EXAMPLES / "cluster-all-vendors.yaml"
WORKLOADS = EXAMPLES / "workloads-all-vendors"

BACKENDS = {
    "amd",
    "ascend",
    "awsneuron",
    "biren",
    "cambricon",
    "enflame",
    "hygon",
    "iluvatar",
    "kunlun",
    "metax",
    "mthreads",
    "nvidia",
    "vastai",
}

#: pod -> (node, vendor key)
EXPECTED = {
    "cuda-inference": ("gpu-a100-01", "NVIDIA"),
    "npu-inference": ("npu-910b3-01", "Ascend910B3"),
    "mlu-inference": ("mlu-370-01", "MLU"),
    "dcu-inference": ("dcu-k100-01", "DCU"),
    "xpu-inference": ("xpu-p800-01", "XPU"),
    "mtt-inference": ("mtt-s4000-01", "Mthreads"),
    "ilu-inference": ("ilu-bi-v150-01", "BI-V150"),
    "mx-inference": ("mx-c500-01", "Metax-SGPU"),
    "rocm-inference": ("amd-mi300x-01", "AMD"),
    "gcu-inference": ("gcu-s60-01", "Enflame"),
    "neuron-inference": ("inf2-01", "AWSNeuron"),
    "va-inference": ("va1v-01", "Vastai"),
    "br-inference": ("br-106-01", "Biren"),
}


def test_hami_backends_lists_13():
    result = CliRunner().invoke(cli, ["backends"])
    assert result.exit_code == 0, result.output
    listed = {
        line.split()[0] for line in result.output.splitlines() if line and not line.startswith(" ")
    }
    assert listed == BACKENDS


def test_one_pod_lands_on_every_vendor():
    result = CliRunner().invoke(
        cli, ["simulate", "--cluster", str(CLUSTER), str(WORKLOADS), "-o", "json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["cluster"]["nodes"] == 13 and not data["warnings"]
    inventory = {g["uuid"]: g for g in data["gpus"]}
    pods = {p["name"]: p for p in data["pods"]}
    assert set(pods) == set(EXPECTED)
    for name, (node, vendor) in EXPECTED.items():
        pod = pods[name]
        assert pod["status"] == "placed" and pod["node"] == node, (name, pod)
        assert pod["devices"], name
        for d in pod["devices"]:
            held = inventory[d["uuid"]]
            assert d["vendor"] == held["vendor"] == vendor and held["node"] == node, (name, d)
    # vendor rules visible in the placements
    assert [d["coresPct"] for d in pods["rocm-inference"]["devices"]] == [76]  # 25 % of 304 CUs
    assert [d["memoryMiB"] for d in pods["gcu-inference"]["devices"]] == [20480]  # 3g.20gb
    assert [d["memoryMiB"] for d in pods["mtt-inference"]["devices"]] == [4096]  # 8 x 512 MiB
    dies = pods["va-inference"]["devices"]
    assert {inventory[d["uuid"]]["uuid"].rsplit("-", 1)[0] for d in dies} == {
        "VA-die-0"
    }  # one AI card


def test_scheduler_metrics_cover_every_vendor():
    """Every vendor's placed device shows in the scheduler's HAMi metrics with its one
    sharer (``hami_gpu_shared_count``); quotas per vendor unit are tested with each backend
    (``tests/backends/<vendor>``)."""
    import yaml
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from hami_core.cluster import MemoryCluster
    from hami_core.plugin import BackendManager
    from hami_core.servers.metrics import SchedulerMetrics
    from hami_core.simulate.pipeline import Pipeline

    cluster = MemoryCluster()
    for item in yaml.safe_load(CLUSTER.read_text())["items"]:
        cluster.add_node(item)
    pipeline = Pipeline(cluster, BackendManager.from_entry_points(disabled=[]))
    placed = {}
    for doc in yaml.safe_load_all((WORKLOADS / "pods.yaml").read_text()):
        out = pipeline.submit(doc)
        assert out.node == EXPECTED[doc["metadata"]["name"]][0], out
        placed[doc["metadata"]["name"]] = out.allocation
    text = generate_latest(SchedulerMetrics(pipeline.scheduler).registry).decode()
    shared = {
        (s.labels["node"], s.labels["device_uuid"]): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "hami_gpu_shared_count"
    }
    for name, allocation in placed.items():
        for d in allocation.all_devices():
            assert shared[(allocation.node, d.uuid)] == 1, (name, d.uuid)
