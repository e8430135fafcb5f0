#!/usr/bin/env python3
"""Checks the sharing modes of issue #17 on a real NVIDIA GPU with PyTorch (not part of
the CPU test suite, which uses the stand-in drivers).

    python3 shim/tests/gpu/modes_check.py [--gpu 0] [--only oversub,mps,mig] [--enable-mig]

Needs: an NVIDIA driver (nvidia-smi), PyTorch with CUDA, pynvml (``nvidia-ml-py``) for the
MIG part, ``nvidia-cuda-mps-control`` for the MPS part, and root for MPS and MIG. Builds
``shim/build/libvgpu.so`` with make if it is missing. Prints one JSON report; every
check has ``ok`` true/false (or ``skipped`` with the reason); exit status 1 when a check
that ran failed.

What it checks:

oversub (libvgpu.so with ``CUDA_OVERSUBSCRIBE=true``, docs/sharing-modes.md): a child
    under the shim with a limit 2 GiB above the GPU's memory fills the GPU with 1 GiB
    tensors and goes on past its physical memory; ``ok`` when the allocations past the
    GPU succeed, are managed memory (``cuPointerGetAttribute`` IS_MANAGED, asked of the
    driver directly), the shared region reports them as oversubscribed bytes, an
    allocation past the limit still raises ``torch.cuda.OutOfMemoryError``, and without
    the variable the same fill stops at the physical size. Figures: read bandwidth
    (``x.sum()``) of a device tensor and of a host-backed one, and their ratio: the
    performance cost docs/sharing-modes.md states.
mps (NVIDIA MPS as the device plugin configures its clients): starts a control daemon
    on a private pipe directory, runs a client with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25``
    and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M`` and one with 100; ``ok`` when the
    limited client's allocation past 2 GiB fails, one under it succeeds, and its matmul
    throughput is at most 60 % of the unlimited client's. Stops the daemon (``quit``).
    Then ``server_side`` (``mpsIsolation: per-container``): a fresh daemon whose server
    defaults are 25 % and 2048M, as the device plugin sets them; ``ok`` only when a
    client without the variables and one that raises them both fail past 2 GiB.
mig (dynamic MIG through the device plugin's own code, hami_nvidia.nvml.PynvmlLibrary
    over pynvml): with MIG mode on (``--enable-mig`` turns it on with ``nvidia-smi -mig 1``
    and off again at the end; that needs an idle GPU and may need a reset), lists the
    profiles, creates a GPU instance of the smallest at its first placement with its
    compute instance, runs a child on the instance's ``MIG-...`` UUID, reads the GPU as
    the device plugin publishes it under ``migstrategy: single`` (each instance a device),
    destroys it; ``ok`` when the instance is listed, the child sees about the profile's
    memory and cannot allocate more, the single strategy's device is the instance (its
    MIG UUID, memory, placement), and nothing is left after the destroy.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SHIM = Path(__file__).resolve().parents[2]
LIB = SHIM / "build" / "libvgpu.so"
READER = SHIM.parent / "backends" / "hami-nvidia" / "hami_nvidia" / "shared_region.py"
GIB = 1 << 30
MIB = 1 << 20

# --- children (run in fresh processes: the shim and MPS act at process start) ----------

OVERSUB_CHILD = r"""
import ctypes, json, sys, time, torch
limit_mib, extra_mib = int(sys.argv[1]), int(sys.argv[2])
cuda = ctypes.CDLL("libcuda.so.1")
IS_MANAGED = 8  # CU_POINTER_ATTRIBUTE_IS_MANAGED
def managed(t):
    v = ctypes.c_uint(0)
    rc = cuda.cuPointerGetAttribute(ctypes.byref(v), IS_MANAGED, ctypes.c_uint64(t.data_ptr()))
    return bool(v.value) if rc == 0 else None
free, total = torch.cuda.mem_get_info(0)
out = {"mem_get_info_mib": [free // 2**20, total // 2**20]}
held, kinds = [], []
target = limit_mib - extra_mib // 2  # past the GPU, below the limit
while sum(t.numel() for t in held) // 2**20 + 1024 <= target:
    try:
        t = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        out["stopped_at_mib"] = sum(t.numel() for t in held) // 2**20
        break
    held.append(t)
    kinds.append(managed(t))
out["allocated_mib"] = sum(t.numel() for t in held) // 2**20
out["managed_tensors"] = sum(1 for k in kinds if k)
out["device_tensors"] = sum(1 for k in kinds if k is False)
try:
    torch.empty((limit_mib + 1024) * 2**20, dtype=torch.uint8, device="cuda")
    out["past_limit"] = "allocated (NOT LIMITED)"
except torch.cuda.OutOfMemoryError:
    out["past_limit"] = "OutOfMemoryError"
def gbps(t):
    t.fill_(1); torch.cuda.synchronize()
    t0 = time.time(); n = 0
    while time.time() - t0 < 2:
        t.sum(); n += 1
    torch.cuda.synchronize()
    return round(n * t.numel() / (time.time() - t0) / 1e9, 2)
dev = [t for t, k in zip(held, kinds) if k is False]
host = [t for t, k in zip(held, kinds) if k]
if dev and host:
    out["device_read_gb_per_s"] = gbps(dev[0])
    out["host_backed_read_gb_per_s"] = gbps(host[-1])
print(json.dumps(out), flush=True)
sys.stdin.readline()  # hold the memory while the parent reads the region
"""

MEMORY_CHILD = r"""
import json, sys, time, torch
cap_mib = int(sys.argv[1])
out = {}
free, total = torch.cuda.mem_get_info(0)
out["mem_get_info_mib"] = [free // 2**20, total // 2**20]
try:
    x = torch.empty(int(cap_mib * 0.75) * 2**20, dtype=torch.uint8, device="cuda")
    out["under_cap"] = "allocated"
    del x
except torch.cuda.OutOfMemoryError:
    out["under_cap"] = "OutOfMemoryError"
try:
    y = torch.empty((cap_mib + 512) * 2**20, dtype=torch.uint8, device="cuda")
    out["over_cap"] = "allocated (NOT LIMITED)"
    del y
except torch.cuda.OutOfMemoryError:
    out["over_cap"] = "OutOfMemoryError"
if len(sys.argv) > 2:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    n, t0 = 0, time.time()
    while time.time() - t0 < 4:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
        n += 10
    out["matmuls_per_s"] = round(n / (time.time() - t0), 2)
print(json.dumps(out))
"""


def child(code: str, args: list[str], env: dict[str, str], timeout: float = 600) -> dict[str, Any]:
    p = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if p.returncode != 0:
        return {"error": p.stderr[-3000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def smi(*args: str) -> str:
    return subprocess.run(
        ["nvidia-smi", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def gpu_uuid(gpu: int) -> str:
    return smi("--query-gpu=uuid", "--format=csv,noheader", "-i", str(gpu))


def clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CUDA_MPS_", "CUDA_DEVICE_", "LD_PRELOAD", "HAMI_SHIM_"))
    }


# --- oversubscription -------------------------------------------------------------------


def check_oversub(gpu: int) -> dict[str, Any]:
    if not LIB.exists():
        subprocess.run(["make", "-C", str(SHIM)], check=True, capture_output=True)
    spec = importlib.util.spec_from_file_location("hami_region_reader", READER)
    assert spec is not None and spec.loader is not None
    reader = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = reader
    spec.loader.exec_module(reader)

    uuid = gpu_uuid(gpu)
    total_mib = int(
        smi("--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", str(gpu))
    )
    extra = 2048
    limit = total_mib + extra
    report: dict[str, Any] = {"gpu_mib": total_mib, "limit_mib": limit}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in ("with", "without"):
            region = os.path.join(tmp, f"{variant}.region")
            env = dict(
                clean_env(),
                LD_PRELOAD=str(LIB),
                NVIDIA_VISIBLE_DEVICES=uuid,
                CUDA_VISIBLE_DEVICES=str(gpu),
                CUDA_DEVICE_MEMORY_LIMIT_0=f"{limit}m",
                CUDA_DEVICE_MEMORY_SHARED_CACHE=region,
            )
            if variant == "with":
                env["CUDA_OVERSUBSCRIBE"] = "true"
            p = subprocess.Popen(
                [sys.executable, "-c", OVERSUB_CHILD, str(limit), str(extra)],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                line = p.stdout.readline() if p.stdout else ""
                if not line:
                    report[variant] = {"error": (p.stderr.read() if p.stderr else "")[-3000:]}
                    continue
                out = json.loads(line)
                r = reader.read_region(region)
                out["region_used_mib"] = r.used_bytes(uuid) // MIB
                out["region_oversubscribed_mib"] = r.oversubscribed_bytes(uuid) // MIB
                report[variant] = out
            finally:
                if p.stdin:
                    p.stdin.close()
                p.wait(timeout=120)
    w, wo = report.get("with", {}), report.get("without", {})
    report["ok"] = bool(
        w.get("managed_tensors", 0) >= 1
        and w.get("allocated_mib", 0) > total_mib
        and w.get("region_oversubscribed_mib", 0) >= 1024 * w.get("managed_tensors", 0)
        and w.get("past_limit") == "OutOfMemoryError"
        and wo.get("managed_tensors", 1) == 0
        and wo.get("allocated_mib", limit) <= total_mib
    )
    if w.get("device_read_gb_per_s") and w.get("host_backed_read_gb_per_s"):
        report["slowdown_host_backed"] = round(
            w["device_read_gb_per_s"] / max(w["host_backed_read_gb_per_s"], 1e-9), 1
        )
    return report


# --- MPS -----------------------------------------------------------------------------------


def check_mps(gpu: int) -> dict[str, Any]:
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        return {"skipped": "nvidia-cuda-mps-control not found"}
    tmp = tempfile.mkdtemp(prefix="hami-mps-")
    pipe, logs = os.path.join(tmp, "pipe"), os.path.join(tmp, "log")
    os.makedirs(pipe)
    os.makedirs(logs)
    denv = dict(
        clean_env(),
        CUDA_VISIBLE_DEVICES=str(gpu),
        CUDA_MPS_PIPE_DIRECTORY=pipe,
        CUDA_MPS_LOG_DIRECTORY=logs,
    )
    daemon = subprocess.Popen([control, "-f"], env=denv, stdin=subprocess.DEVNULL)
    report: dict[str, Any] = {}
    try:
        time.sleep(2)
        base = dict(clean_env(), CUDA_VISIBLE_DEVICES=str(gpu), CUDA_MPS_PIPE_DIRECTORY=pipe)
        report["limited"] = child(
            MEMORY_CHILD,
            ["2048", "matmul"],
            dict(
                base,
                CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25",
                CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=2048M",
            ),
        )
        report["unlimited"] = child(MEMORY_CHILD, ["2048", "matmul"], base)
    finally:
        subprocess.run([control], input="quit\n", text=True, env=denv, timeout=30)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.send_signal(signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    report["server_side"] = check_mps_server_side(control, gpu)
    lim, unl = report["limited"], report["unlimited"]
    if lim.get("matmuls_per_s") and unl.get("matmuls_per_s"):
        report["throughput_ratio"] = round(lim["matmuls_per_s"] / unl["matmuls_per_s"], 3)
    report["ok"] = bool(
        lim.get("under_cap") == "allocated"
        and lim.get("over_cap") == "OutOfMemoryError"
        and unl.get("over_cap") == "allocated (NOT LIMITED)"
        and report.get("throughput_ratio", 1.0) <= 0.6
        and report["server_side"].get("ok") is True
    )
    return report


def check_mps_server_side(control: str, gpu: int) -> dict[str, Any]:
    """``mpsIsolation: per-container`` (docs/sharing-modes.md, "What MPS enforces"): a
    daemon of its own with the server defaults the device plugin sets (2048M on device 0,
    25 %); ``ok`` when a client with no MPS variables and one that raises them both fail
    past 2 GiB: the limit is held by the server, not by the client's env."""
    tmp = tempfile.mkdtemp(prefix="hami-mps-")
    pipe, logs = os.path.join(tmp, "pipe"), os.path.join(tmp, "log")
    os.makedirs(pipe)
    os.makedirs(logs)
    denv = dict(
        clean_env(),
        CUDA_VISIBLE_DEVICES=str(gpu),
        CUDA_MPS_PIPE_DIRECTORY=pipe,
        CUDA_MPS_LOG_DIRECTORY=logs,
    )
    report: dict[str, Any] = {}
    subprocess.run([control, "-d"], env=denv, check=True, timeout=60)
    try:
        for command in (
            "set_default_active_thread_percentage 25",
            "set_default_device_pinned_mem_limit 0 2048M",
        ):
            subprocess.run([control], input=command + "\n", text=True, env=denv, timeout=30)
        base = dict(clean_env(), CUDA_VISIBLE_DEVICES=str(gpu), CUDA_MPS_PIPE_DIRECTORY=pipe)
        report["no_env"] = child(MEMORY_CHILD, ["2048"], base)
        report["raised_env"] = child(
            MEMORY_CHILD,
            ["2048"],
            dict(
                base,
                CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="100",
                CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=65536M",
            ),
        )
    finally:
        subprocess.run([control], input="quit\n", text=True, env=denv, timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    report["ok"] = all(
        report[k].get("over_cap") == "OutOfMemoryError" for k in ("no_env", "raised_env")
    )
    return report


# --- dynamic MIG -------------------------------------------------------------------------


def single_strategy_view(lib: Any, gpu: int, made: Any, profile: Any) -> dict[str, Any]:
    """What the device plugin publishes for this GPU under ``migstrategy: single``
    (``hami_nvidia.migdevices.single_strategy_devices`` over the real NVML): ``ok`` when
    the instance is one device named by its MIG UUID, with the profile's memory, one
    sharer and its one placement."""
    from hami_nvidia.migdevices import single_strategy_devices

    from hami_core.model import DeviceInfo

    base = DeviceInfo(uuid=gpu_uuid(gpu), vendor="NVIDIA", index=gpu, mode="mig")
    devices = single_strategy_devices([(base, True)], lib)
    mine = [d for d in devices if d.uuid == made.mig_uuid]
    view = [
        {"id": d.uuid, "devmem": d.memory_mib, "count": d.split_count,
         "profile": d.mig_profiles[0].name}
        for d in devices
    ]  # fmt: skip
    ok = (
        len(mine) == 1
        and mine[0].memory_mib == profile.memory_mib
        and mine[0].split_count == 1
        and mine[0].mig_profiles[0].placements[0].start == made.start
    )
    return {"devices": view, "ok": ok}


def check_mig(gpu: int, enable: bool) -> dict[str, Any]:
    """Through hami-nvidia's own NVML MIG code (``hami_nvidia.nvml.PynvmlLibrary``: what the
    device plugin calls at Allocate and when the pod is gone)."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return {"skipped": "pynvml not installed (pip install nvidia-ml-py)"}
    sys.path.insert(0, str(SHIM.parent / "backends" / "hami-nvidia"))
    try:
        from hami_nvidia.nvml import PynvmlLibrary
    except ImportError as exc:
        return {"skipped": f"hami_nvidia not importable ({exc}); pip install -e the repo"}
    pynvml.nvmlInit()
    report: dict[str, Any] = {}
    enabled_here = False
    lib = PynvmlLibrary()
    made = None
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(h)
        except pynvml.NVMLError as exc:
            return {"skipped": f"GPU {gpu} is not MIG-capable ({exc})"}
        if current != pynvml.NVML_DEVICE_MIG_ENABLE:
            if not enable:
                return {"skipped": "MIG mode is off; rerun with --enable-mig (idle GPU, root)"}
            smi("-i", str(gpu), "-mig", "1")
            enabled_here = True
            current, _pending = pynvml.nvmlDeviceGetMigMode(h)
            if current != pynvml.NVML_DEVICE_MIG_ENABLE:
                return {"skipped": "MIG mode pending: the GPU needs a reset (nvidia-smi -r)"}
        profiles = lib.mig_profiles(gpu)
        report["profiles"] = [p.name for p in profiles]
        if not profiles:
            return {"ok": False, "error": "NVML lists no GPU instance profile"}
        # the smallest profile at its first placement, as the scheduler's fit prefers
        small = min(profiles, key=lambda p: (p.memory_mib, p.slice_count))
        start, size = small.placements[0]
        before = {i.gpu_instance_id for i in lib.mig_instances(gpu)}
        made = lib.create_mig_instance(gpu, small.profile_id, start, size)
        report["instance"] = {
            "profile": small.name,
            "memory_mib": small.memory_mib,
            "placement": [start, size],
            "gpu_instance_id": made.gpu_instance_id,
            "compute_instance_id": made.compute_instance_id,
            "mig_uuid": made.mig_uuid,
        }
        listed = {i.gpu_instance_id: i for i in lib.mig_instances(gpu)}
        report["listed_after_create"] = made.gpu_instance_id in listed
        cap = small.memory_mib
        out = child(
            MEMORY_CHILD,
            [str(cap)],
            dict(
                clean_env(),
                CUDA_VISIBLE_DEVICES=made.mig_uuid,
                NVIDIA_VISIBLE_DEVICES=made.mig_uuid,
            ),
        )
        report["child"] = out
        seen_total = (out.get("mem_get_info_mib") or [0, 0])[1]
        report["single_strategy"] = single_strategy_view(lib, gpu, made, small)
        lib.destroy_mig_instance(gpu, made.gpu_instance_id)
        made = None
        after = {i.gpu_instance_id for i in lib.mig_instances(gpu)}
        report["left_after_destroy"] = sorted(after - before)
        report["ok"] = bool(
            report["instance"]["mig_uuid"].startswith("MIG-")
            and report["listed_after_create"]
            and 0.85 * cap <= seen_total <= 1.02 * cap
            and out.get("under_cap") == "allocated"
            and out.get("over_cap") == "OutOfMemoryError"
            and not report["left_after_destroy"]
            and report["single_strategy"].get("ok", False)
        )
    finally:
        if made is not None:  # a failure above: leave nothing behind
            lib.destroy_mig_instance(gpu, made.gpu_instance_id)
        if enabled_here:
            smi("-i", str(gpu), "-mig", "0")
        pynvml.nvmlShutdown()
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", type=int, default=0, help="physical GPU index (default 0)")
    ap.add_argument("--only", default="oversub,mps,mig", help="comma list of oversub,mps,mig")
    ap.add_argument("--enable-mig", action="store_true", help="turn MIG mode on (and off after)")
    args = ap.parse_args()
    checks = {
        "oversub": lambda: check_oversub(args.gpu),
        "mps": lambda: check_mps(args.gpu),
        "mig": lambda: check_mig(args.gpu, args.enable_mig),
    }
    names = [n.strip() for n in args.only.split(",")]
    for name in names:
        if name not in checks:
            ap.error(f"--only: unknown check {name!r} (oversub, mps, mig)")
    if shutil.which("nvidia-smi") is None:
        print(json.dumps({"skipped": "no NVIDIA driver (nvidia-smi not found)"}))
        return 0
    report: dict[str, Any] = {}
    for name in names:
        try:
            report[name] = checks[name]()
        except Exception as exc:  # a report, not a traceback: the other checks still run
            report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(report, indent=2))
    failed = [n for n, r in report.items() if "skipped" not in r and not r.get("ok")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
