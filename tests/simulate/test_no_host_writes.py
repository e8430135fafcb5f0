"""``hami simulate`` writes nothing on the host, for every bundled example and so every
vendor: what a backend keeps between Allocate calls goes to the core's ``NodeState``
(in memory here), what a container mounts to ``ContainerAllocation.files`` (never
written by the simulator). Every file-system write of the process is seen through
Python's audit events (``hami_core.testing.hostwrites``), whoever makes it."""

from __future__ import annotations

import os

import pytest
import yaml
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.plugin import BackendManager
from hami_core.simulate.pipeline import Pipeline
from hami_core.testing.hostwrites import host_writes, outside

from .helpers import EXAMPLES

#: (cluster file, workloads) of every example the README runs.
RUNS = [
    ("cluster.yaml", "workloads"),
    ("snapshot.yaml", "workloads"),
    ("cluster-mixed.yaml", "workloads-mixed"),
    ("cluster-mixed-vendors.yaml", "workloads-mixed"),
    ("cluster-all-vendors.yaml", "workloads-all-vendors"),
    ("cluster-modes.yaml", "workloads-modes"),
]


def test_the_recorder_sees_a_write(tmp_path):
    # The check below cannot pass by seeing nothing: both kinds of write are caught.
    with host_writes() as seen:
        (tmp_path / "a").write_text("x")
        os.close(os.open(tmp_path / "b", os.O_WRONLY | os.O_CREAT, 0o600))
        (tmp_path / "d").mkdir()
        os.replace(tmp_path / "a", tmp_path / "c")
    assert seen == [str(tmp_path / n) for n in ("a", "b", "d", "a", "c")]
    assert outside(seen, tmp_path) == []
    assert outside([os.devnull], tmp_path) == [os.devnull]


@pytest.mark.parametrize(("cluster", "workloads"), RUNS)
def test_simulate_writes_nothing_on_the_host(cluster, workloads, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with host_writes() as seen:
        result = CliRunner().invoke(
            cli, ["simulate", "--cluster", str(EXAMPLES / cluster), str(EXAMPLES / workloads)]
        )
    assert result.exit_code == 0, result.output
    assert outside(seen, tmp_path) == []


def test_every_vendor_is_allocated_without_a_host_write(tmp_path):
    """The all-vendors example through the real Allocator: each vendor's answer is built
    (AMD's disjoint CU ranges included), and nothing lands on the host."""
    from hami_core.cluster import MemoryCluster

    cluster = MemoryCluster()
    for item in yaml.safe_load((EXAMPLES / "cluster-all-vendors.yaml").read_text())["items"]:
        cluster.add_node(item)
    pipeline = Pipeline(cluster, BackendManager.from_entry_points(disabled=[]))
    docs = list(yaml.safe_load_all((EXAMPLES / "workloads-all-vendors" / "pods.yaml").read_text()))
    second = yaml.safe_load(
        yaml.safe_dump(docs[[d["metadata"]["name"] for d in docs].index("rocm-inference")])
    )
    second["metadata"]["name"] = "rocm-inference-2"
    # on the same GPU as the first (the default policy spreads)
    second["metadata"]["annotations"] = {"amd.com/use-gpu-uuid": "GPU-18f68e602b8a7900"}
    with host_writes() as seen:
        outs = {d["metadata"]["name"]: pipeline.submit(d) for d in [*docs, second]}
    assert outside(seen, tmp_path) == []
    for name, out in outs.items():
        assert out.node and not out.error and out.allocations, (name, out)
    first = outs["rocm-inference"].allocations["main"].envs
    again = outs["rocm-inference-2"].allocations["main"].envs
    assert first["ROCR_VISIBLE_DEVICES"] == again["ROCR_VISIBLE_DEVICES"], "packed on one GPU"
    # 25 % of 304 CUs each, disjoint: the second range follows the first (NodeState kept)
    assert (first["HSA_CU_MASK"], again["HSA_CU_MASK"]) == ("0:0-75", "0:76-151")
