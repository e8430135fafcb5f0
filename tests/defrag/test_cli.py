"""``hami defrag --snapshot``: the plan as JSON and as text, the pods named, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from tests.defrag.world import MIB, gpu_node, owner, pending, running


def snapshot(tmp_path: Path, *extra: dict[str, Any]) -> str:
    items: list[dict[str, Any]] = [gpu_node("node-0"), gpu_node("node-1")]
    items += [
        running(f"h-{n}-{g}", f"node-{n}", (g,), mem=MIB // 2, cores=50, owned_by=owner())
        for n in range(2)
        for g in range(2)
    ]
    items += [pending("big"), pending("small", mem=4000, cores=10), *extra]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["defrag", *args])
    return result.exit_code, result.output


def test_json_names_every_move_and_gpu(tmp_path):
    code, out = run("--snapshot", snapshot(tmp_path), "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    assert data["dry_run"] is True
    assert data["summary"] == {
        "pending": 2,
        "fit_now": 1,
        "placed_after_moves": 1,
        "without_plan": 0,
        "moves": 1,
    }
    (move,) = data["moves"]
    assert move["for"] == "default/big" and move["from"]["gpus"] != move["to"]["gpus"]
    big = next(p for p in data["pending"] if p["pod"] == "default/big")
    assert big["gpus"] == move["from"]["gpus"] and big["moves"] == 1
    freed = next(g for g in data["gpus"] if g["uuid"] == move["from"]["gpus"][0])
    assert freed["before"]["cores_pct"] == 50 and freed["after"]["cores_pct"] == 100


def test_text_and_one_pod_named(tmp_path):
    code, out = run("--snapshot", snapshot(tmp_path), "--pod", "default/big")
    assert code == 0, out
    assert out.startswith("1 pending pod(s): 0 fit now, 1 fit after 1 move(s)")
    assert "  move default/h-" in out and "GPUs changed" in out


def test_a_pdb_and_a_protected_namespace_in_the_snapshot(tmp_path):
    pdb = {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "all", "namespace": "default"},
        "spec": {"selector": {}},
        "status": {"disruptionsAllowed": 0},
    }
    code, out = run("--snapshot", snapshot(tmp_path, pdb), "-o", "json")
    assert code == 0, out
    assert json.loads(out)["summary"]["without_plan"] == 1
    code, out = run("--snapshot", snapshot(tmp_path), "--protect-namespace", "default")
    assert code == 0 and "no plan" in out


def test_bad_input_is_named(tmp_path):
    code, out = run("--snapshot", snapshot(tmp_path), "--pod", "default/nope")
    assert code != 0 and "not a pending pod of the scheduler: default/nope" in out
    empty = tmp_path / "empty.yaml"
    empty.write_text("kind: List\nitems: []\n")
    code, out = run("--snapshot", str(empty))
    assert code != 0 and "no nodes" in out


def test_apply_refuses_a_snapshot_and_a_bad_ledger(tmp_path):
    code, out = run("--snapshot", snapshot(tmp_path), "--apply")
    assert code != 0 and "--apply acts on the API server's cluster" in out
    code, out = run("--apply", "--ledger", "no-slash", "--kubeconfig", "/nonexistent")
    assert code != 0 and "--ledger: 'no-slash' is not NAMESPACE/NAME" in out
    from hami_core.errors import ConfigError
    from hami_core.servers.options import SchedulerOptions

    with pytest.raises(ConfigError, match="--consolidation-ledger: 'a/b/c'"):
        SchedulerOptions(consolidation_ledger="a/b/c")


def test_apply_limits_are_validated_at_the_flag():
    code, out = run("--apply", "--max-evictions", "-1")
    assert code == 2 and "--max-evictions" in out
    code, out = run("--apply", "--budget-wait", "-5")
    assert code == 2 and "--budget-wait" in out


def test_the_apply_report_as_json():
    from hami_core.defrag.apply import ApplyReport, Step
    from hami_core.defrag.planner import Move
    from hami_core.defrag.render import render_apply

    move = Move(
        pod="a/x",
        priority=0,
        from_node="n0",
        from_gpus=("G0",),
        to_node="n1",
        to_gpus=("G1",),
        for_pod="a/big",
    )
    report = ApplyReport(steps=(Step(move=move, result="evicted"),), stopped="done")
    assert render_apply(report) == {
        "steps": [
            {
                "pod": "a/x",
                "fromNode": "n0",
                "fromGpus": ["G0"],
                "toNode": "n1",
                "toGpus": ["G1"],
                "forPod": "a/big",
                "result": "evicted",
            }
        ],
        "skipped": {},
        "evicted": 1,
        "stopped": "done",
    }


@pytest.mark.parametrize(
    "value", ["Kube_System/ledger", "kube-system/Ledger", "kube-system/a b", f"{'n' * 64}/x"]
)
def test_a_ledger_the_api_server_cannot_name_stops_at_start(value):
    """A namespace (DNS-1123 label) or ConfigMap name (DNS-1123 subdomain) the API
    server refuses stops both flags at start, named, not at the first eviction."""
    from hami_core.errors import ConfigError
    from hami_core.servers.options import SchedulerOptions

    code, out = run("--apply", "--ledger", value, "--kubeconfig", "/nonexistent")
    assert code != 0 and f"--ledger: {value!r}" in out
    with pytest.raises(ConfigError, match="--consolidation-ledger: "):
        SchedulerOptions(consolidation_ledger=value)


@pytest.mark.parametrize(
    "args, named",
    [
        (["--goal", "foo"], "--goal"),
        (["--goal", "whole-gpus=0"], "--goal"),
        (["--goal", "whole-gpus=1,bogus=1"], "--goal"),
        (["--goal", "whole-gpus=1", "--pod", "a/b"], "--pod"),
        (["--apply"], "--snapshot"),
    ],
)
def test_a_bad_flag_value_or_combination_exits_2_as_click_refusals_do(tmp_path, args, named):
    """Every other refused flag of hami defrag (and of every command) exits 2, the
    flag named; --goal's value and the refused combinations exited 1, the status of a
    cluster that cannot be read."""
    code, out = run("--snapshot", snapshot(tmp_path), *args)
    assert code == 2 and named in out, out


@pytest.mark.parametrize("ref", ["", "big", "a/b/c", "/big"])
def test_a_pod_that_is_not_namespace_slash_name_is_refused_at_start(tmp_path, ref):
    """``--pod big`` read "not a pending pod of the scheduler: big", as if the
    cluster had been searched for it; it is a flag value of the wrong form."""
    code, out = run("--snapshot", snapshot(tmp_path), "--pod", ref)
    assert code == 2 and f"--pod: {ref!r} is not NAMESPACE/NAME" in out, out


PENDING_SNAPSHOT = str(Path(__file__).resolve().parents[2] / "examples" / "snapshot-pending.yaml")


@pytest.mark.parametrize(
    "args",
    [
        ["defrag", "--snapshot", PENDING_SNAPSHOT, "-o", "json"],
        ["explain", "ml-team/finetune-7b", "--snapshot", PENDING_SNAPSHOT, "-o", "json"],
    ],
    ids=["defrag", "explain"],
)
def test_json_output_is_only_json_on_the_process_stdout(args):
    """``-o json`` is read by programs: the process's own standard output (file
    descriptor 1, where HiGHS's C code printed its banner at its first use, out of
    CliRunner's sight) holds the JSON document and nothing else."""
    import subprocess
    import sys

    from hami_core.defrag import exact

    if not exact.available():
        pytest.skip("HiGHS is not installed: the integer program does not run")
    out = subprocess.run(
        [sys.executable, "-m", "hami_core", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode in (0, 3), out.stderr  # explain: 3 = pending
    data = json.loads(out.stdout)
    assert isinstance(data, dict) and data
    assert "HiGHS" not in out.stdout + out.stderr
