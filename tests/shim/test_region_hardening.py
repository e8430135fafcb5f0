"""The shared region against a hostile tenant (issue #12 item 4): no symlink is
followed, no file but a regular one is used, only a file the shim created is chmod-ed,
usage sums saturate, a slot above the device's total and a shrunk file fail closed, and
the host process never dies of SIGBUS."""

from __future__ import annotations

import os
import stat
import struct
import time

from .support import GPU0, OOM, MiB, read_json_line, read_until_ready, stop

HEADER = 4096
SLOT = 576  # 64 + 32 x 16 devices (shim/src/region_layout.h)
DEV_USED = 64  # offset of dev[0].used_bytes in a slot


def test_a_symlink_at_the_region_path_is_refused_and_its_target_untouched(shim, tmp_path):
    target = tmp_path / "victim"
    target.write_bytes(b"someone else's data")
    target.chmod(0o600)
    shim.region.symlink_to(target)
    r = shim.probe("init", "ctx", "0", "alloc", "1m", LIBCUDA_LOG_LEVEL="1")
    assert r.rcs("alloc") == [OOM]
    assert "symbolic link" in r.stderr
    assert target.read_bytes() == b"someone else's data"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # never fchmod-ed to 0666


def test_a_fifo_or_directory_at_the_region_path_is_refused_without_hanging(shim):
    os.mkfifo(shim.region)
    start = time.monotonic()
    r = shim.probe("init", "ctx", "0", "alloc", "1m", LIBCUDA_LOG_LEVEL="1")
    assert r.rcs("alloc") == [OOM] and "not a regular file" in r.stderr
    assert time.monotonic() - start < 10
    shim.region.unlink()
    shim.region.mkdir()
    assert shim.probe("init", "ctx", "0", "alloc", "1m").rcs("alloc") == [OOM]


def test_only_a_file_the_shim_created_is_made_world_writable(shim):
    created = shim.probe("init", "ctx", "0", "alloc", "1m")
    assert created.rcs("alloc") == [0]
    assert stat.S_IMODE(shim.region.stat().st_mode) == 0o666
    shim.region.unlink()
    shim.region.touch(mode=0o640)  # an empty file someone else made
    shim.region.chmod(0o640)
    assert shim.probe("init", "ctx", "0", "alloc", "1m").rcs("alloc") == [0]
    assert stat.S_IMODE(shim.region.stat().st_mode) == 0o640


def _holders(shim, n):
    procs = [
        shim.popen("probe", "init", "ctx", "0", "alloc", "1m", "ready", "wait", "alloc", "100m")
        for _ in range(n)
    ]
    for p in procs:
        read_until_ready(p)
    return procs


def test_two_hostile_slots_cannot_wrap_the_usage_sum(shim):
    """Before: two slots of 2^63 bytes summed to 0 (mod 2^64) and let allocations in."""
    a, b = _holders(shim, 2)
    try:
        with open(shim.region, "r+b") as f:
            for slot in (0, 1):
                f.seek(HEADER + slot * SLOT + DEV_USED)
                f.write(struct.pack("<Q", 2**63))
        r = shim.probe("init", "ctx", "0", "alloc", "1m", "meminfo", LIBCUDA_LOG_LEVEL="1")
        assert r.rcs("alloc") == [OOM]
        assert r.op("meminfo")["free"] == 0
        assert "corrupt" in r.stderr
    finally:
        stop(a)
        stop(b)


def test_a_slot_above_the_devices_total_fails_closed(shim):
    (a,) = _holders(shim, 1)
    try:
        with open(shim.region, "r+b") as f:
            f.seek(HEADER + DEV_USED)
            f.write(struct.pack("<Q", 81 * 1024 * MiB))  # more than the 80 GiB device
        r = shim.probe("init", "ctx", "0", "alloc", "1m", LIBCUDA_LOG_LEVEL="1")
        assert r.rcs("alloc") == [OOM] and "corrupt" in r.stderr
    finally:
        stop(a)


def test_a_region_shrunk_under_a_live_process_fails_closed_without_sigbus(shim):
    p = shim.popen(
        "probe",
        "init",
        "ctx",
        "0",
        "alloc",
        "1m",
        "ready",
        "wait",
        "meminfo",
        "alloc",
        "1m",
        env=shim.env(LIBCUDA_LOG_LEVEL="1"),
    )
    try:
        read_until_ready(p)
        os.truncate(shim.region, 0)
        p.stdin.write("go\n")
        p.stdin.flush()
        meminfo = read_json_line(p)
        alloc = read_json_line(p)
        assert meminfo["op"] == "meminfo" and meminfo["free"] == 0
        assert alloc["op"] == "alloc" and alloc["rc"] == OOM
        p.stdin.close()
        assert p.wait(timeout=20) == 0, "the process survived (no SIGBUS)"
        assert "shrunk or corrupted" in p.stderr.read()
    finally:
        if p.poll() is None:
            stop(p)
    assert p.returncode != -7  # SIGBUS


def test_the_device_plugin_makes_the_container_directory_sticky(tmp_path):
    from hami_core.deviceplugin.allocator import make_shared_dir

    d = tmp_path / "containers" / "uid_main"
    make_shared_dir(str(d))
    mode = d.stat().st_mode
    assert stat.S_IMODE(mode) == 0o1777 and mode & stat.S_ISVTX


# -- issue #12 item 1: the limits file wins over the container's own env -------------


def test_the_limits_file_wins_over_the_containers_env(shim, tmp_path):
    limits = tmp_path / "limits"
    # the region path too: without it the shim uses the machine-wide default under /tmp,
    # which another build's region (another size) may hold
    limits.write_text(
        f"NVIDIA_VISIBLE_DEVICES={GPU0}\nCUDA_DEVICE_MEMORY_LIMIT_0=512m\nCUDA_DEVICE_SM_LIMIT=30\n"
        f"CUDA_DEVICE_MEMORY_SHARED_CACHE={shim.region}\n"
    )
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "meminfo",
        "alloc",
        "600m",
        "alloc",
        "500m",
        HAMI_SHIM_LIMITS_FILE=str(limits),
        CUDA_DEVICE_MEMORY_LIMIT_0="16384m",  # the tenant's own env
        CUDA_DISABLE_CONTROL="true",
    )
    assert r.op("meminfo")["total"] == 512 * MiB
    assert r.rcs("alloc") == [OOM, 0]


def test_a_limit_missing_from_the_file_is_not_taken_from_env(shim, tmp_path):
    limits = tmp_path / "limits"
    limits.write_text(
        f"NVIDIA_VISIBLE_DEVICES={GPU0}\nCUDA_DEVICE_MEMORY_SHARED_CACHE={shim.region}\n"
    )
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "alloc",
        "1m",
        HAMI_SHIM_LIMITS_FILE=str(limits),
        CUDA_DEVICE_MEMORY_LIMIT_0="16384m",
        CUDA_DEVICE_MEMORY_LIMIT="16384m",
    )
    assert r.rcs("alloc") == [OOM]  # fail closed: no limit stated by the device plugin


def test_tuning_knobs_in_env_do_not_weaken_a_limits_file(shim, tmp_path):
    """Issue #12 item 1, its whole kind: HAMI_SHIM_RECONCILE_MS=-1 in a tenant's env
    would stop charging the memory NVML sees beyond the hooks (a context of 128 MiB
    here); with a limits file the knob is read from the file only (defaults)."""
    limits = tmp_path / "limits"
    limits.write_text(
        f"NVIDIA_VISIBLE_DEVICES={GPU0}\nCUDA_DEVICE_MEMORY_LIMIT_0=1024m\n"
        f"CUDA_DEVICE_MEMORY_SHARED_CACHE={shim.region}\n"
    )
    env = dict(STUB_CTX_BYTES="128m", HAMI_SHIM_LIMITS_FILE=str(limits))
    r = shim.probe(
        "init", "ctx", "0", "alloc", "512m", "meminfo", HAMI_SHIM_RECONCILE_MS="-1", **env
    )
    assert r.op("meminfo")["free"] == (1024 - 512 - 128) * MiB
    # without a limits file (a process started by hand, outside the device plugin) the
    # environment still tunes it, as the shim's own tests use it
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "alloc",
        "512m",
        "meminfo",
        STUB_CTX_BYTES="128m",
        HAMI_SHIM_RECONCILE_MS="-1",
    )
    assert r.op("meminfo")["free"] == (1024 - 512) * MiB
