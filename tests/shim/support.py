"""Helpers of the libvgpu.so tests: running programs in a fresh "container"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "shim"


@dataclass(frozen=True)
class Cross:
    """Another machine's build of the shim's tests, run under QEMU user-mode: Debian's
    cross compiler and C library (``sysroot``) and ``qemu-<machine>-static``, invoked
    directly with ``-L sysroot`` (no binfmt_misc registration needed)."""

    machine: str
    cc: str
    qemu: str
    sysroot: str


CROSS = {
    "aarch64": Cross(
        "aarch64", "aarch64-linux-gnu-gcc", "qemu-aarch64-static", "/usr/aarch64-linux-gnu"
    ),
}
#: ``HAMI_SHIM_ARCH=aarch64``: build the stand-ins and programs for that machine and run
#: every program under QEMU (tests/packaging runs the suite so on the aarch64 wheel's
#: library, named by ``HAMI_SHIM_LIB``); unset: this machine, natively.
ARCH = os.environ.get("HAMI_SHIM_ARCH", "")
TARGET = CROSS[ARCH] if ARCH else None
BUILD = SHIM / (f"build-{ARCH}" if ARCH else "build")
READER = ROOT / "backends" / "hami-nvidia" / "hami_nvidia" / "shared_region.py"

GPU0 = "GPU-00000000-1111-2222-3333-000000000000"
GPU1 = "GPU-00000000-1111-2222-3333-000000000001"
MiB = 1 << 20
GiB = 1 << 30
OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY

# Variables of the host environment that must not leak into the programs under test.
_SCRUB = ("CUDA_", "NVIDIA_", "STUB_", "HAMI_", "LIBCUDA_", "GPU_CORE_")


@dataclass
class Build:
    lib: Path
    stubs: Path
    programs: Path
    #: what runs a program of this build: nothing natively, QEMU for a cross build
    runner: tuple[str, ...] = ()

    def program(self, name: str) -> str:
        return str(self.programs / name)

    def command(self, name: str, *args: str) -> list[str]:
        """The argv that runs test program ``name`` (under QEMU for a cross build)."""
        return [*self.runner, self.program(name), *args]


class Shim:
    """Runs programs in a fresh "container": its own region file and environment.

    Defaults: two stand-in GPUs (GPU0, GPU1, 80 GiB each), the container owns both
    (NVIDIA_VISIBLE_DEVICES), limits 1024 MiB on GPU0 and 2048 MiB on GPU1.
    """

    def __init__(self, build: Build, tmp: Path):
        self.build = build
        self.tmp = tmp
        self.region = tmp / "vgpu.region"
        self.base = {
            k: v for k, v in os.environ.items() if not k.startswith(_SCRUB) and k != "LD_PRELOAD"
        }
        self.base.update(
            {
                "LD_PRELOAD": str(build.lib),
                "LD_LIBRARY_PATH": f"{build.stubs}:{build.programs}",
                "CUDA_DEVICE_MEMORY_SHARED_CACHE": str(self.region),
                "NVIDIA_VISIBLE_DEVICES": f"{GPU0},{GPU1}",
                "STUB_GPUS": f"{GPU0},{GPU1}",
                "CUDA_DEVICE_MEMORY_LIMIT_0": "1024m",
                "CUDA_DEVICE_MEMORY_LIMIT_1": "2048m",
            }
        )

    def env(self, **overrides: str | None) -> dict[str, str]:
        """The default environment with overrides; a value of None removes the variable."""
        env = dict(self.base)
        for k, v in overrides.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
        return env

    def run(
        self,
        program: str,
        *args: str,
        env: dict[str, str] | None = None,
        timeout: float = 60,
        check: bool = True,
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            self.build.command(program, *args),
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{program} {' '.join(args)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def probe(
        self,
        *ops: str,
        via: str = "direct",
        env: dict[str, str] | None = None,
        **overrides: str | None,
    ) -> ProbeResult:
        """Runs shim/tests/programs/probe.c; returns its JSON lines and stderr."""
        proc = self.run("probe", "--via", via, *ops, env=env or self.env(**overrides))
        return ProbeResult(
            [json.loads(line) for line in proc.stdout.splitlines() if line.strip()], proc.stderr
        )

    def popen(
        self, program: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen:
        return subprocess.Popen(
            self.build.command(program, *args),
            env=env or self.env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


class ProbeResult:
    def __init__(self, lines: list[dict], stderr: str):
        self.lines = lines
        self.stderr = stderr

    def ops(self, name: str) -> list[dict]:
        return [line for line in self.lines if line["op"] == name]

    def op(self, name: str, index: int = -1) -> dict:
        return self.ops(name)[index]

    def rcs(self, name: str) -> list[int]:
        return [line["rc"] for line in self.ops(name)]


def read_json_line(proc: subprocess.Popen, timeout: float = 30) -> dict:
    """Next JSON line of a running program, waiting at most `timeout` seconds.

    Reads the pipe's descriptor directly (unbuffered), so lines that arrive together
    are not hidden in a Python buffer from the next select()."""
    import select
    import time

    buf = proc.__dict__.setdefault("_line_buf", b"")
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        if not ready:
            proc.kill()
            raise AssertionError(f"no output within {timeout}s; stderr: {proc.stderr.read()}")
        chunk = os.read(fd, 4096)
        if not chunk:
            raise AssertionError(
                f"process ended early (rc={proc.wait()}); stderr: {proc.stderr.read()}"
            )
        buf += chunk
    line, buf = buf.split(b"\n", 1)
    proc.__dict__["_line_buf"] = buf
    return json.loads(line)


def read_until_ready(proc: subprocess.Popen, timeout: float = 30) -> list[dict]:
    """JSON lines of a running probe up to its "ready" operation (excluded)."""
    lines = []
    while True:
        line = read_json_line(proc, timeout)
        if line.get("op") == "ready":
            return lines
        lines.append(line)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def duty_range(result: dict) -> tuple[float, float]:
    """``(duty, duty had the probe never waited for a CPU)`` of a throttle_probe result
    (``window_s``) or window line (``t0``, ``t1``): GPU time ÷ the span, and ÷ the span
    less the launching thread's run-queue wait (``run_delay_ns``), capped at 1.

    The simulated GPU idles only while nobody feeds it, so on a loaded machine the duty
    falls short of what the shim allows by at most that wait: the shim's share lies in
    the range. Checking a limit against it from both sides keeps the check exact on an
    idle machine (no wait, no widening) and never lets an unthrottled probe pass (load
    only lowers the low end)."""
    span = result["t1"] - result["t0"] if "t1" in result else result["window_s"] * 1e9
    busy = result["duty"] * span
    return result["duty"], min(1.0, busy / max(span - result["run_delay_ns"], 1.0))


def near(r: tuple[float, float], target: float, tolerance: float) -> bool:
    """``target`` within ``tolerance`` of the range ``r`` (``duty_range``)."""
    return r[0] - tolerance <= target <= r[1] + tolerance
