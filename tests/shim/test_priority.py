"""Task priority (issue #17 item 5): while a high-priority container (CUDA_TASK_PRIORITY
0) launches work on a GPU, low-priority containers (1) on the same GPU are held to
PRIORITY_LOW_SHARE (10 %) by the launch limiter, and get their share back within a
second after it stops.

Measured like the compute-limit tests: the stand-in driver simulates a GPU per process
and records when each kernel ran; throttle_probe reports the duty cycle it achieved per
250 ms window. The two containers meet only through the per-GPU board the device plugin
sets up (shim/src/priority.h): here a temporary directory with the same layout."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest

from .support import GPU0, GPU1, Shim

WAVE = {"STUB_WAVE_US": "2000"}  # 264 blocks on 132 SMs: 4 ms per kernel


def board_for(tmp: Path, *high: str) -> tuple[Path, Path]:
    """The device plugin's layout: <board>/<GPU>/<entry>/ per high-priority container,
    and the high container's own view <beat>/<GPU> of its entry."""
    board = tmp / "board"
    (board / GPU0).mkdir(parents=True)
    beat = tmp / "beat"
    beat.mkdir()
    for name in high:
        (board / GPU0 / name).mkdir()
    if high:
        (beat / GPU0).symlink_to(board / GPU0 / high[0])
    return board, beat


def container(build, tmp: Path, name: str, board: Path, beat: Path, **env: str) -> dict:
    shim = Shim(build, tmp / name)
    (tmp / name).mkdir(parents=True, exist_ok=True)
    shim.region = tmp / name / "vgpu.region"
    return shim.env(
        CUDA_DEVICE_MEMORY_SHARED_CACHE=str(shim.region),
        HAMI_SHIM_PRIORITY_DIR=str(board),
        HAMI_SHIM_PRIORITY_BEAT_DIR=str(beat),
        **WAVE,
        **env,
    )


def probe(shim_env: dict, build, seconds: float, report_ms: int = 0):
    import subprocess

    args = [build.program("throttle_probe"), "--seconds", str(seconds), "--warmup", "0"]
    args += ["--grid", "264"]
    if report_ms:
        args += ["--report-ms", str(report_ms)]
    return subprocess.Popen(
        args, env=shim_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc) -> tuple[list[dict], dict]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    return lines[:-1], lines[-1]


def test_low_priority_yields_while_high_runs_and_recovers(build, tmp_path):
    board, beat = board_for(tmp_path, "uid-high_main")
    low_env = container(build, tmp_path, "low", board, beat, CUDA_TASK_PRIORITY="1")
    high_env = container(build, tmp_path, "high", board, beat, CUDA_TASK_PRIORITY="0")
    low = probe(low_env, build, 4.0, report_ms=250)
    time.sleep(1.0)
    high = probe(high_env, build, 1.5)
    _, high_done = finish(high)
    windows, _ = finish(low)
    h0, h1 = high_done["t_start"], high_done["t_stop"]
    assert high_done["duty"] >= 0.9, "the high-priority container is not held back"
    # (the first window holds the process's start: context creation, first measurement)
    before = [w["duty"] for w in windows[1:] if w["t1"] <= h0]
    during = [w["duty"] for w in windows if w["t0"] >= h0 + 300_000_000 and w["t1"] <= h1]
    after = [w["duty"] for w in windows if w["t0"] >= h1 + 1_000_000_000]
    assert before and during and after, windows
    assert min(before) >= 0.85, f"alone, the low one has the GPU: {before}"
    assert max(during) <= 0.25, f"while the high one runs it keeps ~10 %: {during}"
    assert min(after) >= 0.85, f"within a second after, its share is back: {after}"
    beat_file = board / GPU0 / "uid-high_main" / "beat"
    (stamp,) = struct.unpack("<Q", beat_file.read_bytes()[:8])
    assert h0 <= stamp <= h1 + 50_000_000, "the beat is the high container's launch time"


def _duty_alone(build, env: dict) -> float:
    _, done = finish(probe(env, build, 1.0))
    return done["duty"]


def test_the_tenants_env_cannot_make_it_high(build, tmp_path):
    """The limits file says low (1); the container's own env says 0. It stays low: it
    writes no beat (other low containers do not yield to it) and yields itself."""
    board, beat = board_for(tmp_path, "uid-high_main", "uid-fake_main")
    limits = tmp_path / "limits"
    limits.write_text(
        f"NVIDIA_VISIBLE_DEVICES={GPU0},{GPU1}\nCUDA_DEVICE_MEMORY_LIMIT_0=1024m\n"
        f"CUDA_TASK_PRIORITY=1\nHAMI_SHIM_PRIORITY_DIR={board}\n"
        # its own entry, as if the device plugin had mounted one (it does not for low)
        f"HAMI_SHIM_PRIORITY_BEAT_DIR={tmp_path / 'fake-beat'}\n"
    )
    (tmp_path / "fake-beat").mkdir()
    (tmp_path / "fake-beat" / GPU0).symlink_to(board / GPU0 / "uid-fake_main")
    fake = container(
        build,
        tmp_path,
        "fake",
        board,
        beat,
        HAMI_SHIM_LIMITS_FILE=str(limits),
        CUDA_TASK_PRIORITY="0",
    )
    other = container(build, tmp_path, "other", board, beat, CUDA_TASK_PRIORITY="1")
    procs = [probe(fake, build, 1.0), probe(other, build, 1.0)]
    (_, f), (_, o) = finish(procs[0]), finish(procs[1])
    assert not (board / GPU0 / "uid-fake_main" / "beat").exists()
    assert o["duty"] >= 0.85 and f["duty"] >= 0.85, (f, o)

    # With a real high container active, the "fake" one yields like any low one.
    high_env = container(build, tmp_path, "high", board, beat, CUDA_TASK_PRIORITY="0")
    high = probe(high_env, build, 1.5)
    time.sleep(0.3)
    _, f = finish(probe(fake, build, 0.8))
    finish(high)
    assert f["duty"] <= 0.25, f


@pytest.mark.parametrize("plant", ["future", "stale", "symlink", "fifo", "short"])
def test_forged_beats_make_nobody_yield(build, tmp_path, plant):
    """What a tenant could leave in its entry (or an entry of a pod long gone): a time
    in the future, an old one, a link to some always-changing host file, a FIFO (an
    open that would block), a short file. None makes a low container yield."""
    board, beat = board_for(tmp_path, "uid-evil_main")
    target = board / GPU0 / "uid-evil_main" / "beat"
    now = time.monotonic_ns()
    if plant == "future":
        target.write_bytes(struct.pack("<Q", now + 3600 * 10**9))
    elif plant == "stale":
        target.write_bytes(struct.pack("<Q", now - 5 * 10**9))
    elif plant == "symlink":
        host = tmp_path / "host-file"
        host.write_bytes(struct.pack("<Q", now + 10**9))
        target.symlink_to(host)
    elif plant == "fifo":
        os.mkfifo(target)
    else:
        target.write_bytes(b"\x01\x02")
    low = container(build, tmp_path, "low", board, beat, CUDA_TASK_PRIORITY="1")
    assert _duty_alone(build, low) >= 0.85


def test_without_a_priority_nothing_changes(build, tmp_path):
    """No CUDA_TASK_PRIORITY: neither beats nor yields (and launches stay unthrottled)."""
    board, beat = board_for(tmp_path, "uid-high_main")
    high_env = container(build, tmp_path, "high", board, beat, CUDA_TASK_PRIORITY="0")
    plain = container(build, tmp_path, "plain", board, beat)
    high = probe(high_env, build, 1.5)
    time.sleep(0.3)
    duty = _duty_alone(build, plain)
    finish(high)
    assert duty >= 0.85
