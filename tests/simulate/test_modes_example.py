"""``hami simulate`` on the sharing-modes example (issue #17 item 6): a cluster with a
dynamic-MIG, an MPS and a shim GPU; each pod lands in the mode it asked for
(``nvidia.com/vgpu-mode``), MIG pods with the profile printed, in text and JSON."""

import json

import pytest
from click.testing import CliRunner

from hami_core.cli import cli

from .helpers import EXAMPLES

ARGS = [
    "simulate",
    "--cluster",
    str(EXAMPLES / "cluster-modes.yaml"),
    str(EXAMPLES / "workloads-modes"),
]


def run(*extra: str) -> str:
    result = CliRunner().invoke(cli, [*ARGS, *extra])
    assert result.exit_code == 0, result.output
    return result.output


def test_each_pod_lands_in_the_mode_it_asked_for_with_its_mig_profile():
    data = json.loads(run("-o", "json"))
    pods = {p["name"]: p for p in data["pods"]}
    got = {
        name: (
            p["status"],
            p["node"],
            [(d["mode"], d["migProfile"], d["migPlacement"]) for d in p["devices"]],
        )
        for name, p in pods.items()
    }
    assert got == {
        "mig-small": ("placed", "mig-node", [("mig", "1g.10gb", {"start": 6, "size": 1})]),
        "mig-large": ("placed", "mig-node", [("mig", "3g.40gb", {"start": 0, "size": 4})]),
        "mig-mixed-strategy": ("placed", "mig-node", [("mig", "2g.20gb", {"start": 4, "size": 2})]),
        "mps-client": ("placed", "mps-node", [("mps", None, None)]),
        "shim-slice": ("placed", "shim-node", [("hami-core", None, None)]),
        "mig-no-placement": ("unschedulable", None, []),
    }
    # what each container would get: the instance only / MPS's variables / the shim's
    envs = {name: p["containers"][0]["env"] for name, p in pods.items() if p["containers"]}
    assert envs["mig-large"] == {"NVIDIA_VISIBLE_DEVICES": "MIG-of-GPU-mig-node-0:3g.40gb@0"}
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" in envs["mps-client"]
    assert envs["shim-slice"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8000m"
    # the instance books its profile's memory and cores
    assert [(d["memoryMiB"], d["coresPct"]) for d in pods["mig-large"]["devices"]] == [(40192, 43)]
    (miss,) = [e for e in pods["mig-no-placement"]["explanation"] if e["node"] == "mig-node"]
    assert miss["reason"] == "1/1 CardMigTopologyInfeasible"


def test_the_text_report_prints_the_mode_and_the_profile():
    out = run()
    line = next(ln for ln in out.splitlines() if "default/mig-large" in ln)
    assert "NVIDIA A100-SXM4-80GB (mig 3g.40gb)" in line and "40192 MiB" in line
    assert "(mps)" in next(ln for ln in out.splitlines() if "default/mps-client" in ln)
    assert "mig-node:  1/1 CardMigTopologyInfeasible" in out


@pytest.mark.parametrize(
    "group, message",
    [
        ({"model": "A100", "memoryMiB": 81920, "mode": "mig"}, "mode mig needs migProfiles"),
        (
            {"model": "A100", "memoryMiB": 81920, "migProfiles": [{"name": "1g.10gb"}]},
            "migProfiles is only for mode mig",
        ),
        (
            {
                "model": "A100",
                "memoryMiB": 81920,
                "mode": "mig",
                "migProfiles": [{"name": "1g", "placements": 3}],
            },
            "placements must be an array",
        ),
    ],
)
def test_a_bad_mig_group_is_refused_naming_the_problem(tmp_path, group, message):
    cluster = tmp_path / "c.yaml"
    cluster.write_text(json.dumps({"nodes": [{"name": "n", "gpus": [group]}]}))
    result = CliRunner().invoke(
        cli, ["simulate", "--cluster", str(cluster), str(EXAMPLES / "workloads-modes")]
    )
    assert result.exit_code != 0 and message in result.output
