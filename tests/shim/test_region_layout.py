"""shim/REGION.md is the single layout of the shared region: the C structures and
the Python reader (hami_nvidia.shared_region) must agree, and the reader must decode
what the library really wrote."""

from __future__ import annotations

import json
import struct

import pytest

from .support import GPU0, GPU1, GiB, MiB, read_until_ready, stop


def test_c_layout_matches_the_reader(shim, region_reader):
    c = json.loads(shim.run("region_layout", env=shim.env(LD_PRELOAD=None)).stdout)
    assert c["fields"] == {k: list(v) for k, v in region_reader.LAYOUT.items()}
    assert c["sizes"] == region_reader.SIZES
    assert c["constants"] == {
        "version": region_reader.VERSION,
        "max_devices": region_reader.MAX_DEVICES,
        "max_slots": region_reader.MAX_SLOTS,
        "header_size": region_reader.HEADER_SIZE,
        "uuid_len": region_reader.UUID_LEN,
        "reason_len": region_reader.REASON_LEN,
        "devices_offset": region_reader.DEVICES_OFFSET,
    }


def test_reader_decodes_what_the_library_wrote(shim, region_reader):
    holder = shim.popen(
        "probe",
        "init",
        "ctx",
        "0",
        "alloc",
        "300m",
        "ctx",
        "1",
        "alloc",
        "200m",
        "alloc",
        "50m",
        "ready",
        "wait",
        env=shim.env(CUDA_TASK_PRIORITY="1", CUDA_DEVICE_SM_LIMIT_1="25"),
    )
    try:
        assert [line["rc"] for line in read_until_ready(holder)] == [0] * 6
        region = region_reader.read_region(shim.region)
        assert region.version == 2 and not region.fenced and region.fence_reason == ""
        assert [
            (d.uuid, d.mem_limit_bytes, d.mem_total_bytes, d.sm_limit_percent, d.fenced)
            for d in region.devices
        ] == [
            (GPU0, 1024 * MiB, 80 * GiB, 0, False),
            (GPU1, 2048 * MiB, 80 * GiB, 25, False),
        ]
        (proc,) = region.processes
        assert proc.pid == holder.pid and proc.priority == 1 and proc.start_time_ticks > 0
        assert proc.devices[GPU0].used_bytes == 300 * MiB
        assert proc.devices[GPU1].used_bytes == 250 * MiB
        assert region.used_bytes(GPU1) == 250 * MiB
        assert region.process_used_bytes(holder.pid, GPU0) == 300 * MiB
    finally:
        stop(holder)


def test_reader_errors_are_named(tmp_path, region_reader):
    path = tmp_path / "r"
    path.write_bytes(b"")
    with pytest.raises(region_reader.RegionTruncatedError):
        region_reader.read_region(path)
    path.write_bytes(bytes(region_reader.FILE_SIZE))
    with pytest.raises(region_reader.RegionNotReadyError):
        region_reader.read_region(path)
    path.write_bytes(b"NOTVGPU!" + bytes(region_reader.FILE_SIZE - 8))
    with pytest.raises(region_reader.RegionFormatError):
        region_reader.read_region(path)
    header = struct.pack("<8sIIIIIIQ", b"HAMIVGPU", 7, 4096, 160, 16, 576, 1024, 593920)
    path.write_bytes(header + bytes(region_reader.FILE_SIZE - len(header)))
    with pytest.raises(region_reader.RegionVersionError) as err:
        region_reader.read_region(path)
    assert err.value.version == 7
    header = struct.pack("<8sIIIIIIQ", b"HAMIVGPU", 1, 4096, 160, 16, 576, 1024, 593920)
    path.write_bytes(header + bytes(5000))
    with pytest.raises(region_reader.RegionTruncatedError):
        region_reader.read_region(path)
    assert issubclass(region_reader.RegionVersionError, region_reader.RegionError)
