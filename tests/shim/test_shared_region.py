"""One limit shared by a container's processes: atomic reservation under races,
crash recovery (SIGKILL mid-allocation, a lock holder dying), dead-slot reclamation
with PID reuse, bounded waits, and a damaged region file failing closed."""

from __future__ import annotations

import json
import mmap
import os
import struct
import time
from pathlib import Path

import pytest

from .support import GPU0, OOM, MiB, read_until_ready, stop


def test_two_processes_never_pass_the_shared_limit(shim, tmp_path):
    """Two processes race random allocations (64-320 MiB) against one 1024 MiB
    limit, many rounds. The stand-in driver records the devices' physical usage
    across processes: its peak must never pass the limit, though it gets close."""
    state = tmp_path / "gpu.state"
    limit = 1024 * MiB
    for round_no in range(4):
        go = tmp_path / f"go{round_no}"
        env = shim.env(STUB_STATE_FILE=str(state))
        racers = [
            shim.popen(
                "stress",
                "--seed",
                str(round_no * 2 + k + 1),
                "--ops",
                "1500",
                "--min-mb",
                "64",
                "--max-mb",
                "320",
                "--go",
                str(go),
                env=env,
            )
            for k in range(2)
        ]
        time.sleep(0.2)  # both have opened their contexts and wait on the barrier
        go.touch()
        results = []
        for p in racers:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            results.append(json.loads(out))
        # stub_state: int64 used[16], then int64 peak[16] (shim/tests/stubs/stub_config.h)
        raw = state.read_bytes()
        used, peak = struct.unpack_from("<q", raw, 0)[0], struct.unpack_from("<q", raw, 16 * 8)[0]
        assert used == 0, "every allocation was freed"
        assert peak <= limit, (
            f"round {round_no}: physical peak {peak / MiB:.0f} MiB passed the limit"
        )
        assert peak >= limit - 320 * MiB, f"round {round_no}: the limit was never approached"
        for r in results:
            assert r["other"] == 0, results
            assert r["ok"] > 100 and r["oom"] > 10, results


def test_sigkill_mid_allocation_is_reclaimed(shim, region_reader):
    """A process is killed while the driver is inside an allocation (its reservation
    already counted). Its usage is reclaimed: the next process gets the full limit."""
    victim = shim.popen(
        "probe",
        "init",
        "ctx",
        "0",
        "alloc",
        "400m",
        "ready",
        "alloc",
        "600m",
        env=shim.env(STUB_ALLOC_DELAY_US="1000000"),
    )
    try:
        assert [line["rc"] for line in read_until_ready(victim)] == [0, 0, 0]
        time.sleep(0.3)  # now inside the second, slow, driver call
        before = region_reader.read_region(shim.region)
        assert before.process_used_bytes(victim.pid, GPU0) == 1000 * MiB
    finally:
        stop(victim)
    r = shim.probe("init", "ctx", "0", "alloc", "1024m", "meminfo")
    assert r.rcs("alloc") == [0]
    after = region_reader.read_region(shim.region)
    assert victim.pid not in [p.pid for p in after.processes]


def _own_start_time() -> int:
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


@pytest.mark.parametrize("start_matches", [False, True])
def test_slot_identity_is_pid_plus_start_time(shim, region_reader, start_matches):
    """A slot whose pid is alive but whose start time differs belongs to a dead
    process whose pid was reused: it is reclaimed. With the right start time it is a
    live process and keeps its 1024 MiB."""
    shim.probe("init", "ctx", "0", "meminfo")  # creates the region, registers GPU0
    layout = region_reader.LAYOUT
    slot = region_reader.HEADER_SIZE + 5 * region_reader.SLOT_SIZE
    with open(shim.region, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        struct.pack_into(
            "<Q",
            m,
            slot + layout["region_slot.start_time"][0],
            _own_start_time() if start_matches else 12345,
        )
        struct.pack_into(
            "<Q", m, slot + layout["region_slot.dev"][0], 1024 * MiB
        )  # dev[0].used_bytes
        struct.pack_into("<i", m, slot + layout["region_slot.pid"][0], os.getpid())
        struct.pack_into("<I", m, layout["region_header.slot_hwm"][0], 6)
    assert region_reader.read_region(shim.region).used_bytes(GPU0) == 1024 * MiB
    r = shim.probe("init", "ctx", "0", "alloc", "1m")
    assert r.rcs("alloc") == ([OOM] if start_matches else [0])
    pids = [p.pid for p in region_reader.read_region(shim.region).processes]
    assert (os.getpid() in pids) == start_matches


def test_lock_waits_are_bounded_and_a_dead_holder_releases_it(shim):
    """While another process holds the region's lock, an allocation gives up after
    HAMI_SHIM_LOCK_TIMEOUT_MS (OOM, no hang). Once the holder is SIGKILLed the
    kernel releases the lock and the next allocation recovers."""
    shim.probe("init", "ctx", "0", "meminfo")
    holder = shim.popen("lock_holder", str(shim.region))
    try:
        assert holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        r = shim.probe(
            "init",
            "ctx",
            "0",
            "alloc",
            "1m",
            HAMI_SHIM_LOCK_TIMEOUT_MS="300",
            LIBCUDA_LOG_LEVEL="1",
        )
        assert r.rcs("alloc") == [OOM]
        assert time.monotonic() - t0 < 10
        assert "not taken within 300 ms" in r.stderr
    finally:
        stop(holder)
    r = shim.probe("init", "ctx", "0", "alloc", "1024m", LIBCUDA_LOG_LEVEL="2")
    assert r.rcs("alloc") == [0]
    assert "died holding the lock" in r.stderr


def _region_with(path, version: int, size: int) -> None:
    data = bytearray(size)
    struct.pack_into("<8sIIIIIIQ", data, 0, b"HAMIVGPU", version, 4096, 160, 16, 576, 1024, 593920)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("version", "size", "error", "message"),
    [
        (99, 593920, "RegionVersionError", "unsupported region version 99"),
        (1, 1000, "RegionTruncatedError", "region truncated"),
    ],
)
def test_damaged_region_fails_closed(shim, region_reader, version, size, error, message):
    """An unknown version or a truncated file is neither overwritten nor trusted:
    the library refuses GPU memory (and says why when asked); the reader raises."""
    _region_with(shim.region, version, size)
    r = shim.probe("init", "ctx", "0", "meminfo", "alloc", "1m", LIBCUDA_LOG_LEVEL="1")
    assert r.rcs("alloc") == [OOM]
    assert (r.op("meminfo")["total"], r.op("meminfo")["free"]) == (0, 0)
    assert message in r.stderr
    assert shim.region.stat().st_size == size, "the file was left as it was"
    with pytest.raises(getattr(region_reader, error)):
        region_reader.read_region(shim.region)


def test_exited_process_returns_its_slot(shim, region_reader):
    holder = shim.popen("probe", "init", "ctx", "0", "alloc", "100m", "ready", "wait")
    try:
        read_until_ready(holder)
        assert [p.pid for p in region_reader.read_region(shim.region).processes] == [holder.pid]
    finally:
        holder.stdin.write("go\n")
        holder.stdin.close()
        assert holder.wait(timeout=10) == 0
    assert region_reader.read_region(shim.region).processes == ()


def test_concurrent_first_use_creates_one_region(shim, tmp_path):
    """Eight processes start at once on a region that does not exist yet: one
    creates it, all share it, and together they get exactly the limit."""
    procs = [
        shim.popen("probe", "init", "ctx", "0", "fill", "64m", "ready", "wait") for _ in range(8)
    ]
    try:
        counts = [read_until_ready(p)[-1]["count"] for p in procs]
        assert sum(counts) == 1024 // 64
    finally:
        for p in procs:
            stop(p)


def test_exec_takes_over_the_slot_of_its_previous_image(shim, region_reader):
    """exec() keeps the pid and start time but the driver frees the old image's
    memory: the new image must not stay charged for it."""
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "alloc",
        "1000m",
        "exec",
        "init",
        "ctx",
        "0",
        "alloc",
        "1000m",
        "meminfo",
    )
    assert r.rcs("alloc") == [0, 0]
    assert r.op("meminfo")["free"] == 24 * MiB
