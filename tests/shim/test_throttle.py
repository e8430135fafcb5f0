"""The compute limit (SHIM.md lesson 7 and the issue's duty-cycle test).

The stand-in driver simulates a GPU: a kernel of B blocks on a device with S SMs
runs ceil(B/S) waves of STUB_WAVE_US each, queued on one timeline, and the driver
records when each ran. throttle_probe launches back to back (unthrottled, the GPU is
100% busy) and reports the duty cycle achieved after a warm-up. All scenarios run
concurrently once (they mostly sleep), then each test checks its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .support import Shim

TOLERANCE = 0.10  # ±10 percentage points
GRID = "264"  # blocks per kernel: 2 waves on 132 SMs, 33 waves on 8 SMs
SECONDS, WARMUP = "2.0", "0.6"

# name: (environment, program arguments, processes)
SCENARIOS: dict[str, tuple[dict[str, str], list[str], int]] = {}
for _limit in (20, 50, 80):
    for _sms in (132, 8):
        SCENARIOS[f"limit{_limit}_sm{_sms}"] = (
            {
                "CUDA_DEVICE_SM_LIMIT": str(_limit),
                "GPU_CORE_UTILIZATION_POLICY": "force",
                "STUB_GPU_SMS": str(_sms),
            },
            [],
            1,
        )
SCENARIOS.update(
    {
        "unlimited": ({}, [], 1),
        "default_alone": ({"CUDA_DEVICE_SM_LIMIT": "30"}, [], 1),
        "default_shared": ({"CUDA_DEVICE_SM_LIMIT": "30", "STUB_NVML_EXTRA_PROCS": "1"}, [], 1),
        "disable_shared": (
            {
                "CUDA_DEVICE_SM_LIMIT": "30",
                "GPU_CORE_UTILIZATION_POLICY": "disable",
                "STUB_NVML_EXTRA_PROCS": "1",
            },
            [],
            1,
        ),
        "handbook_core_limit": (
            {"CUDA_DEVICE_CORE_LIMIT": "30", "GPU_CORE_UTILIZATION_POLICY": "force"},
            [],
            1,
        ),
        "two_processes_40": (
            {"CUDA_DEVICE_SM_LIMIT": "40", "GPU_CORE_UTILIZATION_POLICY": "force"},
            [],
            2,
        ),
    }
)
for _variant in ("ptsz", "ex", "ex_ptsz", "coop", "coop_ptsz", "graph"):
    SCENARIOS[f"variant_{_variant}"] = (
        {
            "CUDA_DEVICE_SM_LIMIT": "40",
            "GPU_CORE_UTILIZATION_POLICY": "force",
            "STUB_GRAPH_US": "3000",
        },
        ["--variant", _variant],
        1,
    )


@pytest.fixture(scope="module")
def duty(build, tmp_path_factory) -> dict[str, list[float]]:
    """Runs every scenario at once; returns each process's achieved duty cycle."""
    running = {}
    for name, (env, args, nproc) in SCENARIOS.items():
        shim = Shim(build, Path(tmp_path_factory.mktemp(name)))
        e = shim.env(STUB_WAVE_US="2000", **env)
        running[name] = [
            shim.popen(
                "throttle_probe",
                "--seconds",
                SECONDS,
                "--warmup",
                WARMUP,
                "--grid",
                GRID,
                *args,
                env=e,
            )
            for _ in range(nproc)
        ]
    results = {}
    for name, procs in running.items():
        results[name] = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, f"{name}: {err}"
            results[name].append(json.loads(out)["duty"])
    return results


@pytest.mark.parametrize("limit", [20, 50, 80])
@pytest.mark.parametrize("sms", [132, 8])
def test_duty_cycle_follows_the_limit(duty, limit, sms):
    """Within ±10 points of 20, 50 and 80 %, with 4 ms kernels (132 SMs) and 66 ms
    kernels (the same grid on 8 SMs)."""
    (achieved,) = duty[f"limit{limit}_sm{sms}"]
    assert abs(achieved - limit / 100) <= TOLERANCE, f"{achieved:.3f} for a limit of {limit}%"


@pytest.mark.parametrize("limit", [20, 50, 80])
def test_gain_does_not_depend_on_the_sm_count(duty, limit):
    """Lesson 7: HAMi-core counts blocks x threads against an SM-scaled budget, so a
    big GPU is barely throttled. Here the same program on 8 and on 132 SMs lands on
    the same share."""
    (small,) = duty[f"limit{limit}_sm8"]
    (big,) = duty[f"limit{limit}_sm132"]
    assert abs(small - big) <= 0.05, (small, big)


def test_the_stand_in_gpu_saturates_without_a_limit(duty):
    """Control: without a limit the program keeps the simulated GPU busy."""
    assert duty["unlimited"][0] >= 0.95


def test_policy_default_limits_only_a_shared_gpu(duty):
    assert duty["default_alone"][0] >= 0.95
    assert abs(duty["default_shared"][0] - 0.30) <= TOLERANCE


def test_policy_disable_never_limits(duty):
    assert duty["disable_shared"][0] >= 0.95


def test_handbook_core_limit_name(duty):
    assert abs(duty["handbook_core_limit"][0] - 0.30) <= TOLERANCE


def test_processes_of_a_container_share_one_budget(duty):
    """Two processes, limit 40 %: together 40 %, not 40 % each."""
    assert abs(sum(duty["two_processes_40"]) - 0.40) <= TOLERANCE, duty["two_processes_40"]


@pytest.mark.parametrize("variant", ["ptsz", "ex", "ex_ptsz", "coop", "coop_ptsz", "graph"])
def test_every_launch_entry_point_is_throttled(duty, variant):
    (achieved,) = duty[f"variant_{variant}"]
    assert abs(achieved - 0.40) <= TOLERANCE, achieved
