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


# -- the NVIDIA device plugin's single MIG strategy (issue #17 item 1) -------------------

SINGLE = ["simulate", "--cluster", str(EXAMPLES / "cluster-single.yaml")]


def test_a_single_strategy_node_shows_its_instances_and_gives_count_only_pods_n_of_them():
    result = CliRunner().invoke(cli, [*SINGLE, str(EXAMPLES / "workloads-single"), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    pods = {p["name"]: p for p in data["pods"]}
    # every instance is a device: 2 GPUs x 7 1g.10gb instances
    gpus = data["gpus"]
    assert len(gpus) == 14 and {g["migInstance"] for g in gpus} == {"1g.10gb"}
    assert sorted({g["index"] for g in gpus}) == [0, 1]
    held = {}
    for name in ("trainer-0", "trainer-1"):
        p = pods[name]
        assert p["status"] == "placed", p
        uuids = [d["uuid"] for d in p["devices"]]
        assert len(set(uuids)) == 5 and all(u.startswith("MIG-") for u in uuids)
        assert {(d["mode"], d["migProfile"], d["memoryMiB"]) for d in p["devices"]} == {
            ("mig", "1g.10gb", 9856)
        }
        # the container is told its instances, nothing of the shim
        assert p["containers"][0]["env"] == {"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}
        held[name] = set(uuids)
    assert not held["trainer-0"] & held["trainer-1"]
    # the second trainer's five span the two GPUs (7 on each)
    assert len({g["index"] for g in gpus if g["uuid"] in held["trainer-1"]}) == 2
    reasons = {
        name: next(e["reason"] for e in pods[name]["explanation"] if e["node"] == "single-node")
        for name in ("too-many", "too-big")
    }
    assert reasons == {
        "too-many": "AllocatedCardsInsufficientRequest, 10/14 CardTimeSlicingExhausted",
        "too-big": "10/14 CardTimeSlicingExhausted, 4/14 CardInsufficientMemory",
    }


def test_the_text_report_names_each_instance_with_its_profile():
    result = CliRunner().invoke(cli, [*SINGLE, str(EXAMPLES / "workloads-single")])
    assert result.exit_code == 0, result.output
    gpu_rows = [ln for ln in result.output.splitlines() if "[" in ln and "MiB" in ln]
    assert len(gpu_rows) == 14
    assert all("NVIDIA A100-SXM4-80GB (mig 1g.10gb)" in ln for ln in gpu_rows)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"mode": "hami-core"}, "migStrategy single is only for mode mig"),
        ({"migStrategy": "all"}, "migStrategy must be one of none, mixed, single"),
        (
            {
                "migProfiles": [
                    {"name": "1g.10gb", "memoryMB": 9856, "placements": [{"start": 0, "size": 1}]},
                    {"name": "3g.40gb", "memoryMB": 40192, "placements": [{"start": 4, "size": 4}]},
                ]
            },
            "migStrategy single needs the instances of one profile",
        ),
    ],
)
def test_a_bad_single_strategy_group_is_refused_naming_the_problem(tmp_path, extra, message):
    group = {
        "model": "A100",
        "memoryMiB": 81920,
        "mode": "mig",
        "migStrategy": "single",
        "migProfiles": [
            {"name": "1g.10gb", "memoryMB": 9856, "placements": [{"start": 0, "size": 1}]}
        ],
        **extra,
    }
    if extra.get("mode") == "hami-core":
        group.pop("migProfiles")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(json.dumps({"nodes": [{"name": "n", "gpus": [group]}]}))
    result = CliRunner().invoke(
        cli, ["simulate", "--cluster", str(cluster), str(EXAMPLES / "workloads-single")]
    )
    assert result.exit_code != 0 and message in result.output
