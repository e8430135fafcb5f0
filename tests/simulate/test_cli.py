"""``hami simulate`` through click, and once as a real process."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

import hami_core
from hami_core.cli import cli

from .helpers import EXAMPLES, REPO, gpu_pod, write


def invoke(*args):
    return CliRunner().invoke(cli, ["simulate", *map(str, args)])


def test_no_arguments_runs_the_bundled_example():
    result = invoke()
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Cluster " in out and "3 nodes, 10 GPUs" in out
    assert "Placed (19)" in out
    assert "default/llama-7b-inference" in out and "14000 MiB" in out
    assert "research/jupyter-9" in out
    # the explanation of the pod that fits nowhere
    assert "Unschedulable (1)" in out
    assert "default/llama-70b-finetune: asks 2 GPUs x 90000 MiB, 0% cores" in out
    assert "CardInsufficientMemory; largest that fits:" in out
    # a bar per GPU and the summary
    assert out.count("/81920 MiB") >= 8 and "/15360 MiB" in out
    assert "Summary: 19 pods on 6 GPUs; one GPU per pod would need 25 (1 unschedulable)" in out


def test_bundled_example_placements_are_as_the_handbook_scenarios_ask():
    data = json.loads(invoke("-o", "json").output)
    pods = {p["name"]: p for p in data["pods"]}
    assert [(d["memoryMiB"], d["coresPct"]) for d in pods["train-whole-card"]["devices"]] == [
        (81920, 100)
    ]
    assert [d["memoryMiB"] for d in pods["train-4gpu-0"]["devices"]] == [32000] * 4
    assert len({d["uuid"] for d in pods["train-4gpu-0"]["devices"]}) == 4
    assert [d["memoryMiB"] for d in pods["inference-3gpu-0"]["devices"]] == [4000] * 3
    assert [d["memoryMiB"] for d in pods["batch-40pct-2gpu"]["devices"]] == [32768, 32768]
    assert pods["video-transcode-t4"]["devices"][0]["model"] == "NVIDIA Tesla T4"
    assert [(d["memoryMiB"], d["coresPct"]) for d in pods["llama-7b-inference"]["devices"]] == [
        (14000, 10)
    ]
    assert [(d["memoryMiB"], d["coresPct"]) for d in pods["resnet-eval"]["devices"]] == [(4000, 5)]
    assert sum(1 for n in pods if n.startswith("jupyter-")) == 10
    assert sum(1 for n in pods if n.startswith("text-classifier-")) == 2
    assert pods["llama-70b-finetune"]["status"] == "unschedulable"
    assert data["summary"]["unschedulable"] == 1 and data["summary"]["errors"] == 0


def test_json_output_is_the_report_as_data_and_deterministic():
    first = invoke("--output", "json")
    second = invoke("--output", "json")
    assert first.exit_code == 0
    assert first.output == second.output
    data = json.loads(first.output)
    assert data["schema"] == "hami.simulate/v1"
    assert data["summary"]["line"] == "19 pods on 6 GPUs; one GPU per pod would need 25"


def test_explain_prints_one_pods_reasoning():
    result = invoke("--explain", "llama-70b-finetune")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Pod default/llama-70b-finetune")
    assert (
        "a100-node-1: does not fit: 4/4 CardInsufficientMemory (container trainer)" in result.output
    )
    assert "Summary:" not in result.output
    data = json.loads(invoke("--explain", "research/jupyter-0", "-o", "json").output)
    assert data["schema"] == "hami.simulate.explain/v1" and data["chosen"]["node"] == "a100-node-2"


def test_explain_an_unknown_pod_is_an_error():
    result = invoke("--explain", "nope")
    assert result.exit_code == 1
    assert "no pod 'nope' among the workloads" in result.output
    assert isinstance(result.exception, SystemExit)


def test_snapshot_cluster_counts_existing_usage_and_quota():
    result = invoke("--cluster", EXAMPLES / "snapshot.yaml", EXAMPLES / "workloads")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "(snapshot): 3 nodes, 10 GPUs, 2 existing pods" in out
    assert "Denied by the webhook (2)" in out and "quota gpu-quota" in out
    # the first A100 holds the snapshot's stable-diffusion pod (20000 MiB, 30 %) as well
    data = json.loads(
        invoke("--cluster", EXAMPLES / "snapshot.yaml", EXAMPLES / "workloads", "-o", "json").output
    )
    first = next(g for g in data["gpus"] if g["uuid"] == "GPU-4f1e9c02-5b1a-8d7e-2c44-0a9b3e6f1d21")
    assert "ml-team/stable-diffusion-6c8d9f7b5-x2k4p" in first["pods"]
    assert first["usedMemoryMiB"] >= 20000
    assert data["cluster"]["existingPods"] == 2


def test_only_a_cluster_uses_the_bundled_workloads_and_only_workloads_the_bundled_cluster(tmp_path):
    result = invoke("--cluster", EXAMPLES / "cluster-mixed.yaml")
    assert result.exit_code == 0 and "6 nodes" in result.output
    wl = write(tmp_path / "p.yaml", gpu_pod("mine", gpu=1, gpumem=1000))
    result = invoke(wl)
    assert (
        result.exit_code == 0
        and "default/mine" in result.output
        and "3 nodes, 10 GPUs" in result.output
    )


def test_policy_options_change_placements(tmp_path):
    cluster = write(
        tmp_path / "c.yaml",
        {
            "nodes": [
                {"name": "n", "gpus": [{"model": "NVIDIA A10", "memoryMiB": 23028, "count": 2}]}
            ]
        },
    )
    wl = write(
        tmp_path / "w.yaml", gpu_pod("p0", gpu=1, gpumem=1000), gpu_pod("p1", gpu=1, gpumem=1000)
    )

    def uuids(*opts):
        result = invoke("--cluster", cluster, wl, "-o", "json", *opts)
        assert result.exit_code == 0, result.output
        return [p["devices"][0]["uuid"] for p in json.loads(result.output)["pods"]]

    assert uuids("--gpu-policy", "binpack") == ["GPU-n-0", "GPU-n-0"]
    assert uuids("--gpu-policy", "spread") == ["GPU-n-0", "GPU-n-1"]
    assert uuids() == ["GPU-n-0", "GPU-n-1"]  # the default: spread
    config = write(
        tmp_path / "hami.yaml",
        {"version": "v1", "defaultSchedulerPolicy": {"gpuSchedulerPolicy": "binpack"}},
    )
    assert uuids("--config", config) == ["GPU-n-0", "GPU-n-0"]
    assert uuids("--config", config, "--gpu-policy", "spread") == ["GPU-n-0", "GPU-n-1"]


def test_node_policy_option(tmp_path):
    cluster = write(
        tmp_path / "c.yaml",
        {
            "nodes": [
                {"name": n, "gpus": [{"model": "NVIDIA A10", "memoryMiB": 23028}]}
                for n in ("a", "b")
            ]
        },
    )
    wl = write(
        tmp_path / "w.yaml", gpu_pod("p0", gpu=1, gpumem=1000), gpu_pod("p1", gpu=1, gpumem=1000)
    )

    def nodes(policy):
        result = invoke("--cluster", cluster, wl, "-o", "json", "--node-policy", policy)
        return [p["node"] for p in json.loads(result.output)["pods"]]

    assert nodes("binpack") == ["a", "a"]
    assert nodes("spread") == ["a", "b"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu-policy", "nearest"], "'nearest' is not one of"),
        (["--cluster", "/nonexistent.yaml"], "does not exist"),
    ],
)
def test_bad_options_are_usage_errors(args, needle):
    result = invoke(*args)
    assert result.exit_code == 2
    assert needle in result.output


def test_bad_input_exits_non_zero_with_one_line(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\nmetadata: {name: [\n")
    result = invoke(broken)
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)  # no traceback
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: ") and "broken.yaml: invalid YAML at line" in line


def test_bad_config_exits_2_as_the_servers_do(tmp_path):
    config = write(tmp_path / "hami.yaml", {"version": "v1", "nvidia": {"deviceSplitCont": 3}})
    result = invoke("--config", config)
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {config}: nvidia.deviceSplitCont: unknown key"), line


def test_missing_bundled_example_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(
        hami_core, "__file__", str(tmp_path / "site-packages" / "hami_core" / "__init__.py")
    )
    result = invoke()
    assert result.exit_code == 1
    assert "the bundled example is not installed" in result.output


def test_help_documents_every_option():
    result = CliRunner().invoke(cli, ["simulate", "--help"])
    assert result.exit_code == 0
    for option in (
        "--cluster",
        "--config",
        "--node-policy",
        "--gpu-policy",
        "--output",
        "--explain",
        "WORKLOADS",
    ):
        assert option in result.output
    assert "bundled example" in result.output


def test_long_runs_show_progress_on_stderr(tmp_path):
    docs = [gpu_pod(f"p{i}", gpu=1, gpumem=100) for i in range(201)]
    cluster = write(
        tmp_path / "c.yaml",
        {
            "nodes": [
                {"name": f"n{i}", "gpus": [{"model": "NVIDIA A10", "memoryMiB": 23028, "count": 8}]}
                for i in range(3)
            ]
        },
    )
    result = CliRunner().invoke(
        cli, ["simulate", "--cluster", str(cluster), str(write(tmp_path / "w.yaml", *docs))]
    )
    assert result.exit_code == 0
    assert "simulating 201 pods" in result.stderr
    assert "simulating" not in result.stdout
    small = CliRunner().invoke(cli, ["simulate"])
    assert "simulating" not in small.stderr


def test_a_real_process_exits_0_and_prints_the_report():
    out = subprocess.run(
        [sys.executable, "-m", "hami_core", "simulate"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "Summary: 19 pods on 6 GPUs" in out.stdout
    assert "Traceback" not in out.stderr and "simulating" not in out.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "hami_core", "simulate", "--explain", "nope"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1
    assert "Traceback" not in bad.stderr and "no pod 'nope'" in bad.stderr


def test_a_pipe_is_read_as_a_file():
    """``kubectl get nodes,pods -A -o yaml | hami simulate --cluster /dev/stdin`` and
    ``hami simulate <(kubectl get pods -o yaml)``: a pipe is not a regular file, and was
    refused as "no such file"."""
    cluster = (EXAMPLES / "cluster.yaml").read_text()
    for args in (["--cluster", "/dev/stdin"], ["/dev/stdin"]):
        text = (
            cluster
            if args[0] == "--cluster"
            else (EXAMPLES / "workloads" / "04-too-big.yaml").read_text()
        )
        out = subprocess.run(
            [sys.executable, "-m", "hami_core", "simulate", *args, "-o", "json"],
            cwd=REPO,
            input=text,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        report = json.loads(out.stdout)
        assert report["cluster"]["nodes"] == 3
        pods = report["workloads"]["pods"]
        assert pods == (20 if args[0] == "--cluster" else 1)


def test_a_directory_as_the_cluster_is_named():
    from hami_core.errors import InvalidInputError
    from hami_core.plugin import BackendManager
    from hami_core.simulate.loader import load_cluster

    with pytest.raises(InvalidInputError, match="is a directory, not a cluster file"):
        load_cluster(EXAMPLES, manager=BackendManager.from_entry_points(disabled=[]))


def test_the_bundled_example_runs_without_its_backend(monkeypatch):
    # hami-core alone (no backend installed): the example still runs, its NVIDIA GPUs
    # left out with a warning that names the backend to install; a cluster the user
    # gives is not forgiven the same way.
    from hami_core.plugin import BackendManager

    everything = [b.name for b in BackendManager.from_entry_points(disabled=[]).backends]
    monkeypatch.setenv("HAMI_DISABLED_BACKENDS", ",".join(everything))
    result = invoke("-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    # every pod asks nvidia.com/* resources nobody manages then: reported, not placed
    assert data["cluster"]["gpus"] == 0 and data["summary"]["unmanaged"] == 20
    assert data["summary"]["placed"] == 0
    assert data["warnings"][0] == (
        f"{data['cluster']['source']}: no installed backend serves vendor 'NVIDIA', so its "
        "10 GPU(s) are left out (pip install hami-nvidia)"
    )
    assert len(data["warnings"]) == 21
    assert all("which no installed backend manages" in w for w in data["warnings"][1:])
    given = invoke("--cluster", EXAMPLES / "cluster.yaml")
    assert given.exit_code != 0
    assert "no installed backend serves vendor 'NVIDIA' (installed: none)" in given.output


def test_simulate_shows_the_mode_and_serves_mps_gpus_through_mps(tmp_path):
    cluster = write(
        tmp_path / "c.yaml",
        {
            "nodes": [
                {"name": "shim", "gpus": [{"model": "NVIDIA A10", "memoryMiB": 23028}]},
                {
                    "name": "mps",
                    "gpus": [{"model": "NVIDIA A10", "memoryMiB": 23028, "mode": "mps"}],
                },
            ]
        },
    )
    wl = write(
        tmp_path / "w.yaml",
        gpu_pod("a", annotations={"nvidia.com/vgpu-mode": "mps"}, gpu=1, gpumem=2000, gpucores=40),
        gpu_pod("b", annotations={"nvidia.com/vgpu-mode": "hami-core"}, gpu=1, gpumem=2000),
    )
    result = invoke("--cluster", cluster, wl, "-o", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    pods = {p["name"]: p for p in data["pods"]}
    assert (pods["a"]["node"], pods["a"]["devices"][0]["mode"]) == ("mps", "mps")
    assert (pods["b"]["node"], pods["b"]["devices"][0]["mode"]) == ("shim", "hami-core")
    env = pods["a"]["containers"][0]["env"]
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2000M"
    assert not any(k.startswith("CUDA_DEVICE_") for k in env)
    assert "CUDA_DEVICE_MEMORY_LIMIT_0" in pods["b"]["containers"][0]["env"]
    assert {g["node"]: g["mode"] for g in data["gpus"]} == {"shim": "hami-core", "mps": "mps"}

    text = invoke("--cluster", cluster, wl).output
    assert "NVIDIA A10 (mps)" in text
    assert "NVIDIA A10 (hami-core)" not in text  # the shim's mode is the default, not shown


def test_the_readme_shows_what_make_demo_prints():
    """README.md's "What `make demo` shows" is real output: every line of its sample
    (but the "..." elisions) is a line `hami simulate` prints on the bundled example
    (the sample had gone stale: 27152 MiB where the run prints 81920)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    sample = text.split("```\nPlaced (", 1)[1].split("```", 1)[0]
    lines = [f"Placed ({line}" if i == 0 else line for i, line in enumerate(sample.splitlines())]
    printed = invoke().output.splitlines()
    shown = [line for line in lines if line.strip() and line.strip() != "..."]
    assert len(shown) >= 8
    stale = [line for line in shown if line not in printed]
    assert stale == [], "README.md sample is stale: copy these lines from `hami simulate` again"
