"""Memory limits: the boundary, the virtual device view, every allocation path,
UUID keying under CUDA_VISIBLE_DEVICES, contexts, and NVML reconciliation."""

from __future__ import annotations

import json

import pytest

from .support import GPU0, GPU1, OOM, GiB, MiB, read_until_ready, stop

VIAS = ["direct", "dlsym", "procaddr"]


@pytest.mark.parametrize("via", VIAS)
def test_limit_boundary_and_views(shim, via):
    """1024 MiB limit: 1024 MiB in total succeeds, one more byte fails with 2, and
    cuMemGetInfo / cuDeviceTotalMem / NVML v1 and v2 all show the 1024 MiB device."""
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "meminfo",
        "alloc",
        "512m",
        "alloc",
        "256m",
        "alloc",
        "256m",
        "alloc",
        "1",
        "meminfo",
        "totalmem",
        "0",
        "free",
        "1",
        "meminfo",
        "nvml",
        "0",
        via=via,
    )
    assert r.rcs("alloc") == [0, 0, 0, OOM]
    empty, full, after_free = r.ops("meminfo")
    assert (empty["total"], empty["free"]) == (1024 * MiB, 1024 * MiB)
    assert (full["total"], full["free"]) == (1024 * MiB, 0)
    assert (after_free["total"], after_free["free"]) == (1024 * MiB, 256 * MiB)
    assert r.op("totalmem")["total"] == 1024 * MiB
    nvml = r.op("nvml")
    assert nvml["uuid"] == GPU0
    assert nvml["v1"] == {"rc": 0, "total": 1024 * MiB, "free": 256 * MiB, "used": 768 * MiB}
    assert nvml["v2"] == {
        "rc": 0,
        "total": 1024 * MiB,
        "reserved": 0,
        "free": 256 * MiB,
        "used": 768 * MiB,
    }


def test_without_the_library_nothing_is_limited(shim):
    """Control: the same program without the preload allocates past the 'limit'."""
    r = shim.probe("init", "ctx", "0", "alloc", "1024m", "alloc", "1", "meminfo", LD_PRELOAD=None)
    assert r.rcs("alloc") == [0, 0]
    assert r.op("meminfo")["total"] == 80 * GiB


def test_usage_above_the_limit_reports_zero_free(shim):
    """A process with a larger limit (e.g. before a limit change) pushed usage past
    this process's limit: free is 0, never a wrapped huge number."""
    holder = shim.popen(
        "probe",
        "init",
        "ctx",
        "0",
        "alloc",
        "1536m",
        "ready",
        "wait",
        env=shim.env(CUDA_DEVICE_MEMORY_LIMIT_0="2048m"),
    )
    try:
        assert [line["rc"] for line in read_until_ready(holder)] == [0, 0, 0]
        r = shim.probe("init", "ctx", "0", "meminfo", "alloc", "1", "nvml", "0")
        assert (r.op("meminfo")["total"], r.op("meminfo")["free"]) == (1024 * MiB, 0)
        assert r.rcs("alloc") == [OOM]
        nvml = r.op("nvml")
        assert nvml["v1"]["free"] == 0 and nvml["v1"]["total"] == 1024 * MiB
        assert nvml["v1"]["used"] == 1536 * MiB
        assert nvml["v2"]["free"] == 0
    finally:
        holder.stdin.write("go\n")
        holder.stdin.close()
        holder.wait(timeout=10)


# Each path allocates 768 MiB of the 1024 MiB limit: a plain 512 MiB allocation must
# then fail (the path was charged) and succeed again once the item is freed.
PATHS = {
    "cuMemAlloc_v2": ["alloc", "768m"],
    "cuMemAllocPitch_v2": ["pitch", "1m", "768"],
    "cuMemAllocManaged": ["managed", "768m"],
    "cuMemAllocAsync": ["async", "768m"],
    "cuMemAllocFromPoolAsync": ["pool", "dev", "0", "poolalloc", "768m"],
    "cuMemCreate(device)": ["vmm", "dev", "0", "768m"],
    "cuArrayCreate_v2": ["array", "16384", "12288"],
    "cuArray3DCreate_v2": ["array3d", "1024", "1024", "192"],
}


@pytest.mark.parametrize("path", PATHS)
def test_every_allocation_path_is_charged_and_freed(shim, path):
    r = shim.probe("init", "ctx", "0", *PATHS[path], "alloc", "512m", "free", "0", "alloc", "512m")
    first = [
        line
        for line in r.lines
        if "id" in line and line["op"] not in ("init", "ctx", "pool", "free")
    ]
    assert first[0]["rc"] == 0, f"{path} itself failed: {r.lines}"
    assert [line["rc"] for line in first[1:]] == [OOM, 0], (
        f"{path} not charged or not returned: {r.lines}"
    )
    assert r.op("free")["rc"] == 0


def test_pitch_is_charged_by_the_pitch_the_driver_chose(shim):
    """Width 1000 bytes: the stand-in driver pads rows to 1024 (STUB_PITCH_ALIGN), so
    768 rows cost 768 KiB (not 750 KiB, not the library's 1024-aligned estimate)."""
    r = shim.probe(
        "init", "ctx", "0", "pitch", "1000", "786432", "meminfo", STUB_PITCH_ALIGN="1024"
    )
    assert r.op("pitch")["pitch"] == 1024
    assert r.op("meminfo")["free"] == 1024 * MiB - 1024 * 786432


@pytest.mark.parametrize("what", ["vmm", "pool"])
def test_host_located_memory_is_not_charged(shim, what):
    """cuMemCreate / memory pools located on the host use no GPU memory: 2 GiB of it
    fit in a 1 GiB GPU limit, and the full GPU limit stays available."""
    ops = ["vmm", "host", "0", "2g"] if what == "vmm" else ["pool", "host", "0", "poolalloc", "2g"]
    r = shim.probe("init", "ctx", "0", *ops, "meminfo", "alloc", "1024m")
    assert [line["rc"] for line in r.lines if line["op"] in ("vmm", "pool", "poolalloc")][-1] == 0
    assert r.op("meminfo")["free"] == 1024 * MiB
    assert r.rcs("alloc") == [0]


def test_usage_is_keyed_by_uuid_under_cuda_visible_devices(shim, region_reader):
    """CUDA_VISIBLE_DEVICES=1,0 makes CUDA ordinal 0 the container's second device
    (GPU1, limit 2048 MiB): usage and limits follow the UUID, not the ordinal."""
    holder = shim.popen(
        "probe",
        "init",
        "ctx",
        "0",
        "alloc",
        "1536m",
        "meminfo",
        "ctx",
        "1",
        "alloc",
        "1025m",
        "alloc",
        "1000m",
        "meminfo",
        "ready",
        "wait",
        env=shim.env(CUDA_VISIBLE_DEVICES="1,0"),
    )
    try:
        lines = read_until_ready(holder)
        rcs = [line["rc"] for line in lines if line["op"] == "alloc"]
        assert rcs == [0, OOM, 0], lines  # 1536 fits GPU1's 2048; 1025 does not fit GPU0's 1024
        meminfo = [line for line in lines if line["op"] == "meminfo"]
        assert (meminfo[0]["total"], meminfo[0]["free"]) == (2048 * MiB, 512 * MiB)
        assert (meminfo[1]["total"], meminfo[1]["free"]) == (1024 * MiB, 24 * MiB)
        region = region_reader.read_region(shim.region)
        assert region.used_bytes(GPU1) == 1536 * MiB
        assert region.used_bytes(GPU0) == 1000 * MiB
        # A process without the reordering sees the same usage on the same devices.
        r = shim.probe("init", "ctx", "0", "meminfo", "ctx", "1", "meminfo")
        assert [m["free"] for m in r.ops("meminfo")] == [24 * MiB, 512 * MiB]
    finally:
        stop(holder)


def test_destroyed_context_returns_its_charge(shim):
    """Destroying a context (or resetting the primary one) frees its memory without
    cuMemFree; the charge must go with it."""
    r = shim.probe(
        "init",
        "newctx",
        "0",
        "alloc",
        "1024m",
        "destroyctx",
        "ctx",
        "0",
        "alloc",
        "1024m",
        "reset",
        "0",
        "ctx",
        "0",
        "alloc",
        "1024m",
        "meminfo",
    )
    assert r.rcs("alloc") == [0, 0, 0]
    assert r.op("meminfo")["free"] == 0


def test_nvml_only_process_sees_the_container(shim, region_reader):
    """nvidia-smi-like process (NVML only, never allocates): sees the limit and the
    container's usage, and takes no slot in the region."""
    holder = shim.popen("probe", "init", "ctx", "0", "alloc", "300m", "ready", "wait")
    try:
        assert [line["rc"] for line in read_until_ready(holder)] == [0, 0, 0]
        proc = shim.run("probe", "nvml", "0", "nvml", "1")
        gpu0, gpu1 = (json.loads(line) for line in proc.stdout.splitlines())
        assert gpu0["v1"] == {"rc": 0, "total": 1024 * MiB, "free": 724 * MiB, "used": 300 * MiB}
        assert gpu1["v1"] == {"rc": 0, "total": 2048 * MiB, "free": 2048 * MiB, "used": 0}
        assert [p.pid for p in region_reader.read_region(shim.region).processes] == [holder.pid]
    finally:
        stop(holder)


def test_reconciliation_counts_what_nvml_sees_beyond_the_hooks(shim, region_reader):
    """NVML reports 128 MiB more for the process than it allocated (its context):
    that memory counts against the limit too."""
    env = shim.env(STUB_CTX_BYTES="128m", HAMI_SHIM_RECONCILE_MS="0")
    holder = shim.popen(
        "probe",
        "init",
        "ctx",
        "0",
        "alloc",
        "512m",
        "meminfo",
        "alloc",
        "512m",
        "alloc",
        "384m",
        "ready",
        "wait",
        env=env,
    )
    try:
        lines = read_until_ready(holder)
        assert lines[3]["free"] == (1024 - 512 - 128) * MiB
        assert [line["rc"] for line in lines if line["op"] == "alloc"] == [0, OOM, 0]
        usage = region_reader.read_region(shim.region).processes[0].devices[GPU0]
        assert (usage.used_bytes, usage.untracked_bytes) == (896 * MiB, 128 * MiB)
    finally:
        stop(holder)


@pytest.mark.parametrize("value", ["1073741824", "1048576k", "1024m", "1024M", "1g", "1G"])
def test_size_suffixes_are_binary(shim, value):
    r = shim.probe("init", "ctx", "0", "meminfo", CUDA_DEVICE_MEMORY_LIMIT_0=value)
    assert r.op("meminfo")["total"] == 1024 * MiB


def test_all_device_default_and_handbook_names(shim):
    """CUDA_DEVICE_MEMORY_LIMIT (no index) applies to devices without their own."""
    r = shim.probe(
        "init",
        "ctx",
        "0",
        "meminfo",
        "ctx",
        "1",
        "meminfo",
        CUDA_DEVICE_MEMORY_LIMIT_0=None,
        CUDA_DEVICE_MEMORY_LIMIT="300m",
    )
    assert [m["total"] for m in r.ops("meminfo")] == [300 * MiB, 2048 * MiB]
