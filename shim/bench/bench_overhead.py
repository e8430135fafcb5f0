#!/usr/bin/env python3
"""Per-call overhead of libvgpu.so's hooked cuMemAlloc_v2 and cuLaunchKernel.

Builds the library and the stand-in driver (make -C shim test-bins), then runs
shim/tests/programs/bench.c under the library. In one process it times the hooked
entry points (what an application linked to libcuda calls) against the driver's own
definitions, alternating rounds, and reports medians. Two configurations:

  memory limit only      nothing waits; the launch is counted and its GPU time taken
                         from a sample or its kernel's estimate (throttle.c,
                         observe_begin): on the stand-in about 40 ns more than the
                         pass-through it was before (Dec 2026, 2 shared cores)
  + compute limit 50%    every launch goes through the throttle's bookkeeping
                         (two CUDA events, estimate, clock update; the stand-in
                         kernels take no GPU time so the throttle never sleeps)
  + CUDA_OVERSUBSCRIBE   allocations the GPU can hold: the path must cost the same
  priority 0 / 1         task priority (docs/sharing-modes.md): a high container
                         writing its beat, a low one reading a board with one idle
                         entry (no limit of its own, so it never sleeps)

The stand-in driver's calls cost tens of nanoseconds, so the ratios are an upper
bound; the added nanoseconds are what a real driver call (microseconds) pays.

    python3 shim/bench/bench_overhead.py [--rounds 31] [--calls 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SHIM = Path(__file__).resolve().parents[1]
BUILD = SHIM / "build"

SCRUB = ("CUDA_", "NVIDIA_", "STUB_", "HAMI_", "LIBCUDA_", "GPU_CORE_")


def run_bench(extra_env: dict[str, str], rounds: int, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUB) and k != "LD_PRELOAD"}
        env.update(
            {
                "LD_PRELOAD": str(BUILD / "libvgpu.so"),
                "LD_LIBRARY_PATH": str(BUILD / "stubs"),
                "CUDA_DEVICE_MEMORY_SHARED_CACHE": os.path.join(tmp, "bench.region"),
                "CUDA_DEVICE_MEMORY_LIMIT": "64g",
                "STUB_QUEUE_DEPTH": "100000000",
            }
        )
        env.update(extra_env)
        out = subprocess.run(
            [str(BUILD / "programs" / "bench"), str(rounds), str(calls)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
        return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = ap.parse_args()

    subprocess.run(["make", "-s", "-C", str(SHIM), "test-bins"], check=True)
    board_tmp = tempfile.TemporaryDirectory()
    uuid = "GPU-00000000-1111-2222-3333-000000000000"  # the stand-in's first device
    boards = {}
    for who in ("high", "low"):  # apart: the high run's beats must not make the low one yield
        board = Path(board_tmp.name) / who / "board"
        (board / uuid / "entry").mkdir(parents=True)
        (board / uuid / "entry" / "beat").write_bytes(bytes(8))  # written long ago
        beat = Path(board_tmp.name) / who / "beat"
        beat.mkdir()
        (beat / uuid).symlink_to(board / uuid / "entry")
        boards[who] = {
            "HAMI_SHIM_PRIORITY_DIR": str(board),
            "HAMI_SHIM_PRIORITY_BEAT_DIR": str(beat),
        }
    configs = {
        "memory limit only": {},
        "memory + compute limit 50%": {
            "CUDA_DEVICE_SM_LIMIT": "50",
            "GPU_CORE_UTILIZATION_POLICY": "force",
        },
        "+ CUDA_OVERSUBSCRIBE": {"CUDA_OVERSUBSCRIBE": "true"},
        "priority 0 (high)": {**boards["high"], "CUDA_TASK_PRIORITY": "0"},
        "priority 1 (low, idle)": {**boards["low"], "CUDA_TASK_PRIORITY": "1"},
    }
    results = {}
    for name, env in configs.items():
        r = run_bench(env, args.rounds, args.calls)
        if not r.get("hooked_distinct"):
            print(
                f"{name}: the hooked and unhooked entry points are the same; is the library preloaded?",
                file=sys.stderr,
            )
            return 1
        results[name] = {
            "cuMemAlloc_v2": {
                "hooked_ns": r["alloc_hooked_ns"],
                "unhooked_ns": r["alloc_unhooked_ns"],
                "ratio": r["alloc_hooked_ns"] / r["alloc_unhooked_ns"],
                "added_ns": r["alloc_hooked_ns"] - r["alloc_unhooked_ns"],
            },
            "cuLaunchKernel": {
                "hooked_ns": r["launch_hooked_ns"],
                "unhooked_ns": r["launch_unhooked_ns"],
                "ratio": r["launch_hooked_ns"] / r["launch_unhooked_ns"],
                "added_ns": r["launch_hooked_ns"] - r["launch_unhooked_ns"],
            },
        }
    board_tmp.cleanup()
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"per-call cost, median of {args.rounds} rounds x {args.calls} calls (stand-in driver)")
    print(
        f"{'configuration':<28} {'call':<15} {'hooked ns':>10} {'unhooked ns':>12} {'ratio':>7} {'added ns':>9}"
    )
    for name, calls in results.items():
        for call, m in calls.items():
            print(
                f"{name:<28} {call:<15} {m['hooked_ns']:>10.1f} {m['unhooked_ns']:>12.1f} "
                f"{m['ratio']:>6.2f}x {m['added_ns']:>9.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
