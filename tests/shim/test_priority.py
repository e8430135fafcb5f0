"""Task priority (issue #17 item 5): while a high-priority container (CUDA_TASK_PRIORITY
0) launches work on a GPU, low-priority containers (1) on the same GPU are held to
PRIORITY_LOW_SHARE (10 %) by the launch limiter, and get their share back within a
second after it stops.

Measured like the compute-limit tests: the stand-in driver simulates a GPU per process
and records when each kernel ran; throttle_probe reports the duty cycle it achieved per
250 ms window. The two containers meet only through the per-GPU board the device plugin
sets up (shim/src/priority.h): here a temporary directory with the same layout.

Robust on a loaded machine without loosening the limits: a probe's duty can fall short
of what the shim allows by the time it waited for a CPU (``run_delay_ns``, see
test_throttle), so "has the GPU" checks the duty had it never waited, and "yields" the
plain duty (load only lowers it). Runs are ordered by events (the low one's first
windows, the high one's beat on the board) and ended by a stop file, not by sleeps
that a slow start on a busy machine outlasts."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest

from .support import GPU0, GPU1, Shim, duty_range

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


def probe(shim_env: dict, build, seconds: float, report_ms: int = 0, stop: Path | None = None):
    import subprocess

    args = build.command("throttle_probe", "--seconds", str(seconds), "--warmup", "0")
    args += ["--grid", "264"]
    if report_ms:
        args += ["--report-ms", str(report_ms)]
    if stop is not None:
        args += ["--stop-file", str(stop)]
    return subprocess.Popen(
        args, env=shim_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


#: Longest a probe ended by its stop file may run: a bound, never reached when it passes.
UNTIL_STOPPED = 60.0


def finish(proc, read: list[dict] | None = None) -> tuple[list[dict], dict]:
    """``(windows, final result)``; ``read``: window lines already taken from stdout."""
    out, err = proc.communicate(timeout=UNTIL_STOPPED + 30)
    assert proc.returncode == 0, err
    lines = (read or []) + [json.loads(line) for line in out.splitlines() if line.strip()]
    return lines[:-1], lines[-1]


def next_window(proc) -> dict:
    line = proc.stdout.readline()
    assert line, f"the probe ended early: {proc.stderr.read()}"
    return json.loads(line)


def had_it(r: dict) -> float:
    """The duty of a window or result had the probe never waited for a CPU."""
    return duty_range(r)[1]


def wait_for_beat(beat_file: Path, timeout: float = 30.0) -> None:
    """Until the high container's beat is on the board and fresh (its launches have
    begun): the event a low one yields to."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            (stamp,) = struct.unpack("<Q", beat_file.read_bytes()[:8])
            if time.monotonic_ns() - stamp < 100_000_000:
                return
        except (FileNotFoundError, struct.error):
            pass
        time.sleep(0.01)
    raise AssertionError(f"no fresh beat in {beat_file} within {timeout} s")


def test_low_priority_yields_while_high_runs_and_recovers(build, tmp_path):
    board, beat = board_for(tmp_path, "uid-high_main")
    low_env = container(build, tmp_path, "low", board, beat, CUDA_TASK_PRIORITY="1")
    high_env = container(build, tmp_path, "high", board, beat, CUDA_TASK_PRIORITY="0")
    stop_low = tmp_path / "stop-low"
    low = probe(low_env, build, UNTIL_STOPPED, report_ms=250, stop=stop_low)
    # (the first window holds the process's start: context creation, first measurement)
    read = [next_window(low) for _ in range(4)]
    high = probe(high_env, build, 1.5)
    _, high_done = finish(high)
    h0, h1 = high_done["t_start"], high_done["t_stop"]
    while read[-1]["t0"] < h1 + 1_500_000_000:  # two whole windows past the second after
        read.append(next_window(low))
    stop_low.touch()
    windows, _ = finish(low, read)
    assert had_it(high_done) >= 0.9, f"the high-priority container is held back: {high_done}"
    before = [w for w in windows[1:] if w["t1"] <= h0]
    during = [w for w in windows if w["t0"] >= h0 + 300_000_000 and w["t1"] <= h1]
    after = [w for w in windows if w["t0"] >= h1 + 1_000_000_000]
    assert before and during and after, windows
    assert min(map(had_it, before)) >= 0.85, f"alone, the low one has the GPU: {before}"
    assert max(w["duty"] for w in during) <= 0.25, f"while the high one runs, ~10 %: {during}"
    assert min(map(had_it, after)) >= 0.85, f"within a second after, its share is back: {after}"
    beat_file = board / GPU0 / "uid-high_main" / "beat"
    (stamp,) = struct.unpack("<Q", beat_file.read_bytes()[:8])
    assert h0 <= stamp <= h1 + 50_000_000, "the beat is the high container's launch time"


def _duty_alone(build, env: dict) -> float:
    _, done = finish(probe(env, build, 1.0))
    return had_it(done)


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
    assert had_it(o) >= 0.85 and had_it(f) >= 0.85, (f, o)

    # With a real high container active (from its first beat until the fake one is
    # done), the "fake" one yields like any low one.
    high_env = container(build, tmp_path, "high", board, beat, CUDA_TASK_PRIORITY="0")
    stop_high = tmp_path / "stop-high"
    high = probe(high_env, build, UNTIL_STOPPED, stop=stop_high)
    wait_for_beat(board / GPU0 / "uid-high_main" / "beat")
    _, f = finish(probe(fake, build, 0.8))
    stop_high.touch()
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
    stop_high = tmp_path / "stop-high"
    high = probe(high_env, build, UNTIL_STOPPED, stop=stop_high)
    wait_for_beat(board / GPU0 / "uid-high_main" / "beat")  # a high one is active
    duty = _duty_alone(build, plain)
    stop_high.touch()
    finish(high)
    assert duty >= 0.85
