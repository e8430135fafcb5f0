"""Memory oversubscription (issue #17 item 4): with ``CUDA_OVERSUBSCRIBE=true`` an
allocation within the container's limit that the GPU cannot hold is served from
host-backed managed memory (cuMemAllocManaged, advised to prefer the host), charged to
the limit, returned at its free, and reported apart in the region (version 2).

The stand-in GPU has 1 GiB (``STUB_GPU_MEM``) and the container a 1536 MiB limit, as
a node with ``deviceMemoryScaling: 1.5`` hands out."""

from __future__ import annotations

import os
import struct

import pytest

from .support import GPU0, GPU1, OOM, MiB, read_until_ready, stop

HOST = -1  # the stand-in's "preferred location: host" (CU_DEVICE_CPU)
SMALL = {
    "STUB_GPU_MEM": "1g",
    "CUDA_DEVICE_MEMORY_LIMIT_0": "1536m",
}


def test_past_the_gpu_but_within_the_limit_comes_from_host_memory(shim, region_reader):
    holder = shim.popen(
        "probe",
        *("init", "ctx", "0", "alloc", "768m", "alloc", "512m", "where", "0", "where", "1"),
        *("physused", "0", "meminfo", "alloc", "512m", "ready", "wait"),
        *("free", "1", "alloc", "256m", "where", "3", "physused", "0", "ready", "wait"),
        env=shim.env(**SMALL, CUDA_OVERSUBSCRIBE="true"),
    )
    try:
        lines = read_until_ready(holder)
        rcs = [line["rc"] for line in lines if line["op"] == "alloc"]
        assert rcs == [0, 0, OOM], "the third passes the limit: refused as before"
        where = [line for line in lines if line["op"] == "where"]
        assert where[0]["managed"] == 0, "what fits on the GPU stays device memory"
        assert (where[1]["managed"], where[1]["preferred"], where[1]["accessed_by"]) == (1, HOST, 0)
        phys = next(line for line in lines if line["op"] == "physused")
        assert (phys["device"], phys["managed"]) == (768 * MiB, 512 * MiB)
        info = next(line for line in lines if line["op"] == "meminfo")
        assert (info["total"], info["free"]) == (1536 * MiB, 256 * MiB)
        region = region_reader.read_region(shim.region)
        assert region.used_bytes(GPU0) == 1280 * MiB, "charged to the limit"
        assert region.oversubscribed_bytes(GPU0) == 512 * MiB, "reported apart"

        holder.stdin.write("go\n")
        holder.stdin.flush()
        lines = read_until_ready(holder)
        assert [line["rc"] for line in lines if line["op"] in ("free", "alloc")] == [0, 0]
        assert lines[2]["managed"] == 0, "with the GPU free again, device memory"
        assert (lines[3]["device"], lines[3]["managed"]) == (1024 * MiB, 0)
        region = region_reader.read_region(shim.region)
        assert region.used_bytes(GPU0) == 1024 * MiB
        assert region.oversubscribed_bytes(GPU0) == 0, "the free returned the host part"
    finally:
        stop(holder)


@pytest.mark.parametrize("via", ["direct", "procaddr-ptds"])
def test_stream_ordered_allocations_too_and_their_free_takes_cuMemFree(shim, region_reader, via):
    """cuMemAllocAsync (PyTorch's cudaMallocAsync backend): past the GPU it gets managed
    memory too; its cuMemFreeAsync (which the stand-in driver refuses for managed memory)
    is carried out as cuMemFree after the stream's work (the per-thread stream for _ptsz)."""
    holder = shim.popen(
        "probe",
        *("--via", via, "init", "ctx", "0", "async", "768m", "async", "512m", "where", "1"),
        *("ready", "wait", "free", "1", "free", "0", "physused", "0", "ready", "wait"),
        env=shim.env(**SMALL, CUDA_OVERSUBSCRIBE="true"),
    )
    try:
        lines = read_until_ready(holder)
        assert [line["rc"] for line in lines if line["op"] == "async"] == [0, 0]
        assert lines[-1]["managed"] == 1
        assert region_reader.read_region(shim.region).oversubscribed_bytes(GPU0) == 512 * MiB
        holder.stdin.write("go\n")
        holder.stdin.flush()
        lines = read_until_ready(holder)
        assert [line["rc"] for line in lines if line["op"] == "free"] == [0, 0]
        assert (lines[-1]["device"], lines[-1]["managed"]) == (0, 0), "both really freed"
        region = region_reader.read_region(shim.region)
        assert (region.used_bytes(GPU0), region.oversubscribed_bytes(GPU0)) == (0, 0)
    finally:
        stop(holder)


def test_without_the_variable_the_gpu_is_the_limit(shim):
    r = shim.probe(
        *("init", "ctx", "0", "meminfo", "alloc", "768m", "alloc", "512m", "physused", "0"),
        **SMALL,
    )
    assert r.rcs("alloc") == [0, OOM], "the driver's out of memory, as before"
    assert (r.op("meminfo")["total"], r.op("meminfo")["free"]) == (1024 * MiB, 1024 * MiB)
    assert r.op("physused")["managed"] == 0


def test_the_tenants_own_env_cannot_turn_it_on(shim, tmp_path):
    """The limits file the device plugin writes decides (it has the variable only when
    the node's memory scaling is above 1); the container's env copy is ignored."""
    limits = tmp_path / "limits"
    limits.write_text(f"NVIDIA_VISIBLE_DEVICES={GPU0},{GPU1}\nCUDA_DEVICE_MEMORY_LIMIT_0=1536m\n")
    r = shim.probe(
        *("init", "ctx", "0", "alloc", "768m", "alloc", "512m"),
        HAMI_SHIM_LIMITS_FILE=str(limits),
        CUDA_OVERSUBSCRIBE="true",
        **SMALL,
    )
    assert r.rcs("alloc") == [0, OOM]
    limits.write_text(limits.read_text() + "CUDA_OVERSUBSCRIBE=true\n")
    r = shim.probe(
        *("init", "ctx", "0", "alloc", "768m", "alloc", "512m"),
        HAMI_SHIM_LIMITS_FILE=str(limits),
        **SMALL,
    )
    assert r.rcs("alloc") == [0, 0]


def test_a_driver_without_managed_memory_still_says_out_of_memory(shim, region_reader):
    holder = shim.popen(
        "probe",
        *("init", "ctx", "0", "alloc", "768m", "alloc", "512m", "ready", "wait"),
        env=shim.env(**SMALL, CUDA_OVERSUBSCRIBE="true", STUB_MANAGED="0"),
    )
    try:
        assert [line["rc"] for line in read_until_ready(holder)] == [0, 0, 0, OOM]
        region = region_reader.read_region(shim.region)
        assert region.used_bytes(GPU0) == 768 * MiB, "the failed one was rolled back"
        assert region.oversubscribed_bytes(GPU0) == 0
    finally:
        stop(holder)


def test_advice_falls_back_to_cuMemAdvise_before_cuda_12_2(shim):
    r = shim.probe(
        *("init", "ctx", "0", "alloc", "768m", "alloc", "512m", "where", "1"),
        **SMALL,
        CUDA_OVERSUBSCRIBE="true",
        STUB_ADVISE_V2="0",
    )
    assert r.rcs("alloc") == [0, 0]
    assert (r.op("where")["managed"], r.op("where")["preferred"]) == (1, HOST)


def test_destroying_the_context_returns_the_host_part(shim, region_reader):
    holder = shim.popen(
        "probe",
        *("init", "newctx", "0", "alloc", "768m", "alloc", "512m", "destroyctx"),
        *("ctx", "0", "alloc", "1g", "ready", "wait"),
        env=shim.env(**SMALL, CUDA_OVERSUBSCRIBE="true"),
    )
    try:
        lines = read_until_ready(holder)
        assert [line["rc"] for line in lines] == [0] * len(lines)
        region = region_reader.read_region(shim.region)
        assert region.used_bytes(GPU0) == 1024 * MiB
        assert region.oversubscribed_bytes(GPU0) == 0
    finally:
        stop(holder)


def test_two_processes_share_the_limit_and_the_gpu(shim, tmp_path, region_reader):
    """The second process finds the GPU full (the first holds 768 MiB of it) and gets
    host memory; together they still stop at the container's limit."""
    env = shim.env(**SMALL, CUDA_OVERSUBSCRIBE="true", STUB_STATE_FILE=str(tmp_path / "gpu"))
    first = shim.popen("probe", "init", "ctx", "0", "alloc", "768m", "ready", "wait", env=env)
    try:
        read_until_ready(first)
        r = shim.probe(
            *("init", "ctx", "0", "alloc", "512m", "where", "0", "alloc", "512m"), env=env
        )
        assert r.rcs("alloc") == [0, OOM]
        assert r.op("where")["managed"] == 1
    finally:
        stop(first)


def test_a_version_1_region_is_upgraded_in_place(shim, region_reader):
    """A container whose older processes wrote a version-1 region: a new process extends
    it to version 2 (nothing of version 1 moves), keeping the older process's charge."""
    holder = shim.popen("probe", "init", "ctx", "0", "alloc", "200m", "ready", "wait")
    try:
        read_until_ready(holder)
        with open(shim.region, "r+b") as f:  # what a version-1 library leaves
            f.seek(8)
            f.write(struct.pack("<I", 1))
            f.seek(32)
            f.write(struct.pack("<Q", region_reader.FILE_SIZE_V1))
            f.truncate(region_reader.FILE_SIZE_V1)
        old = region_reader.read_region(shim.region)
        assert old.version == 1 and old.used_bytes(GPU0) == 200 * MiB
        r = shim.probe("init", "ctx", "0", "alloc", "900m", "alloc", "800m")
        assert r.rcs("alloc") == [OOM, 0], "the older process's 200 MiB still count"
        assert os.path.getsize(shim.region) == region_reader.FILE_SIZE
        new = region_reader.read_region(shim.region)
        assert new.version == 2 and new.used_bytes(GPU0) == 200 * MiB
    finally:
        stop(holder)


@pytest.mark.parametrize("size", ["FILE_SIZE", "FILE_SIZE_V1"])
def test_the_monitor_reads_both_versions(size, region_reader):
    from hami_nvidia import monitor

    assert getattr(region_reader, size) in monitor.usage_files()["vgpu.cache"]
