"""SHIM.md lessons 5 and 6: never crash or exit the application, silent unless
LIBCUDA_LOG_LEVEL asks, no effect on processes that never touch CUDA, fork()
survives, and a missing or malformed limit fails closed with a loud log line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .support import GPU0, OOM, MiB, duty_range, near


def test_fork(shim):
    """A child that never touches CUDA exits normally; a child that does shares the
    parent's limit (it sees the parent's 600 MiB and gets only the rest); the parent
    keeps exactly its own usage afterwards; forking while another thread allocates
    never deadlocks a child."""
    out = json.loads(shim.run("forker", timeout=120).stdout)
    assert out["parent_alloc"] == 0
    assert out["a_status"] == 7, "the CUDA-free child ran its own exit path"
    assert out["b_status"] == 0
    assert out["child_free_mib"] == 424
    assert (out["child_alloc_424"], out["child_alloc_1"], out["child_free"]) == (0, OOM, 0)
    assert out["parent_free_mib"] == 424
    assert (out["parent_alloc_424"], out["parent_alloc_1"]) == (0, OOM)
    assert (out["hung"], out["failed"]) == (0, 0)


OPS = (
    "init",
    "ctx",
    "0",
    "meminfo",
    "alloc",
    "1024m",
    "alloc",
    "1",
    "nvml",
    "0",
    "launch",
    "10",
    "132",
)


def test_silent_unless_asked(shim):
    """Nothing on stderr by default, even when refusing memory and throttling."""
    quiet = shim.probe(*OPS, CUDA_DEVICE_SM_LIMIT="50", GPU_CORE_UTILIZATION_POLICY="force")
    assert quiet.rcs("alloc") == [0, OOM]
    assert quiet.stderr == ""
    loud = shim.probe(
        *OPS, LIBCUDA_LOG_LEVEL="4", CUDA_DEVICE_SM_LIMIT="50", GPU_CORE_UTILIZATION_POLICY="force"
    )
    assert "[hami-vgpu INFO" in loud.stderr and "[hami-vgpu DEBUG" in loud.stderr
    assert "refusing 1 bytes" in loud.stderr


def test_no_effect_on_a_process_that_never_touches_cuda(shim, build):
    """dlopen/dlsym/fork in an ordinary program: same output with the library, no
    region file, no GPU library mapped, nothing logged even at debug level, and the
    C library's dlerror() state is untouched."""
    env = shim.env(LIBCUDA_LOG_LEVEL="4", CUDA_DEVICE_MEMORY_LIMIT_0="bogus")
    under = shim.run("nocuda", env=env)
    plain = shim.run("nocuda", env=shim.env(LD_PRELOAD=None))
    assert under.stdout == plain.stdout
    assert json.loads(under.stdout)["gpu_libs"] == 0
    assert json.loads(under.stdout)["dlerror_set"] == 1
    assert under.stderr == ""
    assert not shim.region.exists()
    # A real interpreter: hundreds of dlopen/dlsym calls (extension modules).
    code = "import ctypes, json, ssl, sqlite3, decimal; print(json.dumps(sorted(['ok', str(ctypes.sizeof(ctypes.c_long))])))"
    py = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert py.returncode == 0, py.stderr
    assert py.stdout.strip() == '["8", "ok"]'
    assert py.stderr == ""
    assert not shim.region.exists()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "12x"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", ""),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "-5m"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "1.5g"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "99999999999999999999g"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", "1024mb"),
        ("CUDA_DEVICE_MEMORY_LIMIT_0", None),  # missing, and no all-device default
        ("CUDA_DEVICE_SM_LIMIT_0", "abc"),
        ("CUDA_DEVICE_SM_LIMIT_0", "150"),
    ],
)
def test_missing_or_malformed_limit_fails_closed(shim, region_reader, variable, value):
    """The device gets no memory at all (total 0, every allocation OOM), the other
    device is unaffected, one loud line names the variable when logs are asked
    for, and the region records why for the monitor."""
    ops = ("init", "ctx", "0", "meminfo", "alloc", "1", "nvml", "0", "ctx", "1", "alloc", "1m")
    r = shim.probe(*ops, **{variable: value})
    assert r.rcs("alloc") == [OOM, 0]
    assert (r.op("meminfo")["total"], r.op("meminfo")["free"]) == (0, 0)
    assert r.op("nvml")["v1"]["total"] == 0
    assert r.stderr == "", "fails closed silently unless logs are asked for"

    loud = shim.probe(*ops, LIBCUDA_LOG_LEVEL="1", **{variable: value})
    failing = [line for line in loud.stderr.splitlines() if "FAILING CLOSED" in line]
    assert len(failing) == 1, loud.stderr
    assert GPU0 in failing[0]
    assert (variable if value is not None else "CUDA_DEVICE_MEMORY_LIMIT") in failing[0]

    region = region_reader.read_region(shim.region)
    assert region.device(GPU0).fenced and region.fenced
    assert GPU0 in region.fence_reason


def test_unusable_region_fails_closed_without_crashing(shim):
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "meminfo",
        "alloc",
        "1",
        LIBCUDA_LOG_LEVEL="1",
        CUDA_DEVICE_MEMORY_SHARED_CACHE="/nonexistent-dir/x/vgpu.region",
    )
    assert r.rcs("alloc") == [OOM]
    assert r.op("meminfo")["total"] == 0
    assert "shared region unusable" in r.stderr


def test_disable_control_passes_everything_through(shim):
    """CUDA_DISABLE_CONTROL=true (HAMi's opt-out) forwards every call unchanged."""
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "alloc",
        "2g",
        "meminfo",
        CUDA_DISABLE_CONTROL="true",
        CUDA_DEVICE_MEMORY_LIMIT_0="bogus",
    )
    assert r.rcs("alloc") == [0]
    assert r.op("meminfo")["total"] == 80 << 30
    assert not shim.region.exists()


def test_unparsable_policy_enforces_the_limit(shim, build):
    """A malformed GPU_CORE_UTILIZATION_POLICY must not lift the compute limit."""
    env = shim.env(
        CUDA_DEVICE_SM_LIMIT="30", GPU_CORE_UTILIZATION_POLICY="sometimes", STUB_WAVE_US="2000"
    )
    out = json.loads(
        shim.run(
            "throttle_probe", "--seconds", "1", "--warmup", "0.3", "--grid", "264", env=env
        ).stdout
    )
    # the probe's run-queue wait on a loaded machine allowed for (support.duty_range)
    assert near(duty_range(out), 0.30, 0.10), out


def test_errors_of_the_driver_pass_through(shim):
    """No context: the driver's own error comes back, nothing is charged."""
    r = shim.probe("init", "alloc", "1m", "meminfo", "ctx", "0", "meminfo")
    assert r.rcs("alloc") == [201]  # CUDA_ERROR_INVALID_CONTEXT
    assert r.ops("meminfo")[0]["rc"] == 201
    assert r.ops("meminfo")[1]["free"] == 1024 * MiB
