"""The build says what is missing; the overhead benchmark runs and reports ratios."""

from __future__ import annotations

import re
import subprocess
import sys

from .support import SHIM


def test_build_names_a_missing_compiler(tmp_path):
    proc = subprocess.run(
        ["make", "-C", str(SHIM), f"BUILD={tmp_path}", "CC=no-such-cc-here", "all"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "no C compiler: 'no-such-cc-here' not found" in proc.stderr


def test_build_into_another_directory(tmp_path):
    """How hami-nvidia's installer builds it: make -C shim BUILD=<scratch> all."""
    proc = subprocess.run(
        ["make", "-C", str(SHIM), f"BUILD={tmp_path}", "all"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", str(tmp_path / "libvgpu.so")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    exported = sorted(line.split()[-1] for line in symbols.splitlines())
    # The explicit list, nothing else: internal symbols stay hidden.
    assert (
        "dlsym" in exported
        and "cuMemAlloc_v2" in exported
        and "nvmlDeviceGetMemoryInfo_v2" in exported
    )
    assert all(name == "dlsym" or name.startswith(("cu", "nvml")) for name in exported), exported


def test_overhead_benchmark_reports_ratios(build):
    proc = subprocess.run(
        [
            sys.executable,
            str(SHIM / "bench" / "bench_overhead.py"),
            "--rounds",
            "3",
            "--calls",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if re.search(r"\d+\.\d+x", line)]
    # five configurations (memory only, + compute limit, + CUDA_OVERSUBSCRIBE, priority
    # 0 and 1) x two calls
    assert (
        len(rows) == 10
        and sum("cuMemAlloc_v2" in r for r in rows) == 5
        and sum("cuLaunchKernel" in r for r in rows) == 5
        and any(r.startswith("priority 1") for r in rows)
    )
