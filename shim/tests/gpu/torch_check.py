#!/usr/bin/env python3
"""Checks libvgpu.so on a real NVIDIA GPU with PyTorch (not part of the CPU test suite).

    make -C shim && python3 shim/tests/gpu/torch_check.py [--limit-mib 4096]

Runs child processes with the library preloaded and a memory limit on GPU 0, and
prints one JSON report: what torch.cuda.mem_get_info and nvidia-smi show, whether an
allocation past the limit raises torch.cuda.OutOfMemoryError, and the throughput of a
matmul loop at compute limits 100, 50 and 25 % (policy force).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "build" / "libvgpu.so"

CHILD = r"""
import json, sys, time, torch
mode, limit = sys.argv[1], int(sys.argv[2])
out = {}
if mode == "memory":
    free, total = torch.cuda.mem_get_info(0)
    out["mem_get_info_mib"] = [free >> 20, total >> 20]
    x = torch.empty(int(limit * 0.5) << 20, dtype=torch.uint8, device="cuda")
    out["half_limit_ok"] = True
    try:
        y = torch.empty(limit << 20, dtype=torch.uint8, device="cuda")
        out["over_limit"] = "allocated (NOT LIMITED)"
    except torch.cuda.OutOfMemoryError as e:
        out["over_limit"] = "OutOfMemoryError"
    free, total = torch.cuda.mem_get_info(0)
    out["mem_get_info_after_mib"] = [free >> 20, total >> 20]
else:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    n, t0 = 0, time.time()
    while time.time() - t0 < 4:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        n += 10
    out["matmuls_per_s"] = n / (time.time() - t0)
print(json.dumps(out))
"""


def run(mode: str, limit: int, region: str, extra: dict[str, str]) -> dict[str, object]:
    uuid = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader", "-i", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    env = dict(
        os.environ,
        LD_PRELOAD=str(LIB),
        NVIDIA_VISIBLE_DEVICES=uuid,
        CUDA_VISIBLE_DEVICES="0",
        CUDA_DEVICE_MEMORY_LIMIT_0=f"{limit}m",
        CUDA_DEVICE_MEMORY_SHARED_CACHE=region,
        **extra,
    )
    p = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(limit)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    result: dict[str, object] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit-mib", type=int, default=4096)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        region = os.path.join(tmp, "vgpu.region")
        report: dict[str, object] = {"memory": run("memory", args.limit_mib, region, {})}
        env = dict(
            os.environ,
            LD_PRELOAD=str(LIB),
            CUDA_DEVICE_MEMORY_LIMIT_0=f"{args.limit_mib}m",
            CUDA_DEVICE_MEMORY_SHARED_CACHE=region,
        )
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total,memory.used", "--format=csv", "-i", "0"],
            env=env,
            capture_output=True,
            text=True,
        )
        report["nvidia_smi_under_library"] = smi.stdout.strip()
        for limit in (100, 50, 25):
            report[f"compute_{limit}"] = run(
                "compute",
                args.limit_mib,
                region,
                {"CUDA_DEVICE_SM_LIMIT": str(limit), "GPU_CORE_UTILIZATION_POLICY": "force"},
            )
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
