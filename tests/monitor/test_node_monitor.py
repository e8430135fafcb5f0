"""The node monitor over region files written by the real shim (libvgpu.so under the
stand-in driver): exact values and HAMi's labels on /metrics, only live processes,
hostile files skipped without blocking, directories of gone pods removed."""

from __future__ import annotations

import logging
import os
import struct

import pytest

from hami_core.monitor import NodeMonitor
from hami_core.plugin import BackendManager
from hami_core.servers.monitor import create_monitor_app
from tests.shim.support import stop

from .support import GPU0, GPU1, NODE, Container, Served, pod, scrape, value

MiB = 1 << 20
UID_A = "0a0a0a0a-0000-4000-8000-00000000000a"
UID_B = "0b0b0b0b-0000-4000-8000-00000000000b"
UID_GONE = "0c0c0c0c-0000-4000-8000-00000000000c"


@pytest.fixture
def manager() -> BackendManager:
    return BackendManager.from_entry_points()


@pytest.fixture
def root(tmp_path):
    path = tmp_path / "containers"
    path.mkdir()
    return path


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_region_of_the_real_shim_appears_with_exact_values_and_labels(
    build, region_reader, manager, root, tmp_path
):
    """A container's process allocates 3000 MiB on GPU0 and 512 MiB on GPU1 through the
    shim; /metrics shows exactly that, with the limits, under HAMi's names and labels.
    Once the process is killed (its slot stays in the file), it counts no more."""
    ctr = Container(build, root, UID_A, "main", tmp_path)
    proc = ctr.hold(
        "init",
        "ctx",
        "0",
        "alloc",
        "3000m",
        "ctx",
        "1",
        "alloc",
        "512m",
        CUDA_DEVICE_MEMORY_LIMIT_0="4096m",
    )
    pods = [pod(UID_A, "trainer", "main")]
    monitor = NodeMonitor(manager, root=str(root), node_name=NODE, pods=lambda: pods)
    served = Served(create_monitor_app(monitor, scan_max_age_s=0))  # every scrape scans
    try:
        m = scrape(served.url)
        base = {"namespace": "team-a", "pod": "trainer", "container": "main"}
        gpu0 = {**base, "vdevice_index": "0", "device_uuid": GPU0}
        gpu1 = {**base, "vdevice_index": "1", "device_uuid": GPU1}
        for name in (
            "hami_vgpu_memory_used_bytes",
            "hami_container_device_memory_bytes",
            "hami_vgpu_memory_usage_bytes",
            "hami_vgpu_memory_buffer_bytes",
        ):
            assert value(m, name, **gpu0) == 3000 * MiB, name
            assert value(m, name, **gpu1) == 512 * MiB, name
        assert value(m, "hami_vgpu_memory_limit_bytes", **gpu0) == 4096 * MiB
        assert value(m, "hami_vgpu_memory_limit_bytes", **gpu1) == 2048 * MiB
        assert value(m, "hami_vgpu_memory_context_bytes", **gpu0) == 0
        labels = next(lab for lab, _ in m["hami_vgpu_memory_used_bytes"])
        assert sorted(labels) == ["container", "device_uuid", "namespace", "pod", "vdevice_index"]

        stop(proc)  # SIGKILL: the shim cannot return its slot
        region = region_reader.read_region(ctr.shim.region)
        assert proc.pid in [p.pid for p in region.processes], (
            "the dead process's slot is still there"
        )
        m = scrape(served.url)
        assert value(m, "hami_vgpu_memory_used_bytes", **gpu0) == 0
        assert value(m, "hami_vgpu_memory_used_bytes", **gpu1) == 0
        assert value(m, "hami_vgpu_memory_limit_bytes", **gpu0) == 4096 * MiB
    finally:
        served.close()
        stop(proc)


def test_oversubscribed_memory_is_shown_apart(build, manager, root, tmp_path):
    """CUDA_OVERSUBSCRIBE on a 1 GiB stand-in GPU with a 1536 MiB limit: 768 MiB fit on
    the device, the next 512 MiB come from host memory. /metrics counts all 1280 MiB as
    used (they are charged to the limit) and the 512 MiB host part in its own series."""
    ctr = Container(build, root, UID_A, "main", tmp_path)
    proc = ctr.hold(
        *("init", "ctx", "0", "alloc", "768m", "alloc", "512m"),
        STUB_GPU_MEM="1g",
        CUDA_DEVICE_MEMORY_LIMIT_0="1536m",
        CUDA_OVERSUBSCRIBE="true",
    )
    pods = [pod(UID_A, "trainer", "main")]
    monitor = NodeMonitor(manager, root=str(root), node_name=NODE, pods=lambda: pods)
    served = Served(create_monitor_app(monitor))
    try:
        m = scrape(served.url)
        gpu0 = {"pod": "trainer", "container": "main", "vdevice_index": "0", "device_uuid": GPU0}
        assert value(m, "hami_vgpu_memory_used_bytes", **gpu0) == 1280 * MiB
        assert value(m, "hami_vgpu_memory_oversubscribed_bytes", **gpu0) == 512 * MiB
        assert value(m, "hami_vgpu_memory_limit_bytes", **gpu0) == 1536 * MiB
    finally:
        served.close()
        stop(proc)


def test_two_processes_of_one_container_add_up_and_unknown_pods_are_not_served(
    build, manager, root, tmp_path
):
    ctr = Container(build, root, UID_A, "main", tmp_path)
    stranger = Container(build, root, UID_GONE, "main", tmp_path)
    procs = [
        ctr.hold("init", "ctx", "0", "alloc", "300m"),
        ctr.hold("init", "ctx", "0", "alloc", "200m"),
        stranger.hold("init", "ctx", "0", "alloc", "100m"),
    ]
    try:
        pods = [pod(UID_A, "trainer", "main")]
        monitor = NodeMonitor(manager, root=str(root), node_name=NODE, pods=lambda: pods)
        fams = {f.name: f for f in monitor.collect()}
        used = fams["hami_vgpu_memory_used_bytes"].samples
        assert used == [(("team-a", "trainer", "main", "0", GPU0), 500 * MiB)]
    finally:
        for p in procs:
            stop(p)


def test_kernel_time_shows_as_utilization_and_last_kernel(build, manager, root, tmp_path):
    """Launches under a compute limit between two scrapes give a non-zero utilization
    and a last-kernel age of 0; before any launch there is no last-kernel series."""
    ctr = Container(build, root, UID_A, "main", tmp_path)
    idle = ctr.hold(
        "init",
        "ctx",
        "0",
        "alloc",
        "10m",
        CUDA_DEVICE_SM_LIMIT="50",
        GPU_CORE_UTILIZATION_POLICY="force",
    )
    clock = Clock()
    pods = [pod(UID_A, "trainer", "main")]
    monitor = NodeMonitor(manager, root=str(root), node_name=NODE, pods=lambda: pods, clock=clock)
    busy = None
    try:
        first = {f.name: f for f in monitor.collect()}
        assert first["hami_container_last_kernel_elapsed_seconds"].samples == []
        busy = ctr.hold(
            "init",
            "ctx",
            "0",
            "launch",
            "40",
            "64",
            CUDA_DEVICE_SM_LIMIT="50",
            GPU_CORE_UTILIZATION_POLICY="force",
        )
        clock.now += 1.0
        second = {f.name: f for f in monitor.collect()}
        [(labels, util)] = second["hami_container_device_utilization_ratio"].samples
        assert labels == ("team-a", "trainer", "main", "0", GPU0)
        assert 0 < util <= 100
        assert second["hami_container_last_kernel_elapsed_seconds"].samples == [(labels, 0.0)]
        clock.now += 5.0
        third = {f.name: f for f in monitor.collect()}
        assert third["hami_container_last_kernel_elapsed_seconds"].samples == [(labels, 5.0)]
        assert third["hami_container_device_utilization_ratio"].samples == [(labels, 0.0)]
    finally:
        stop(idle)
        if busy is not None:
            stop(busy)


# 40 launches of one 2 ms wave each: 80 ms of GPU time (the stand-in's kernels take
# ceil(grid / SMs) x STUB_WAVE_US).
_WORK = ("init", "ctx", "0", "alloc", "10m", "launch", "40", "64")
_WORK_NS = 40 * 2_000_000
_UNTHROTTLED = {
    "memory_only": {},
    "policy_disable": {"CUDA_DEVICE_SM_LIMIT": "50", "GPU_CORE_UTILIZATION_POLICY": "disable"},
    "policy_default_alone": {"CUDA_DEVICE_SM_LIMIT": "50"},
}


@pytest.mark.parametrize("case", sorted(_UNTHROTTLED))
def test_unthrottled_containers_show_their_kernel_time(build, manager, root, tmp_path, case):
    """Issue 24 item 10: a container without a compute limit (the common memory-only
    pod), or whose limit is off, shows the GPU time its kernels took, like a throttled
    one; before, the shim counted busy time only on its throttled path and these read 0."""
    ctr = Container(build, root, UID_A, "main", tmp_path)
    env = {"STUB_WAVE_US": "2000", **_UNTHROTTLED[case]}
    idle = ctr.hold("init", "ctx", "0", "alloc", "10m", **env)
    clock = Clock()
    pods = [pod(UID_A, "trainer", "main")]
    monitor = NodeMonitor(manager, root=str(root), node_name=NODE, pods=lambda: pods, clock=clock)
    busy = None
    try:
        monitor.collect()
        busy = ctr.hold(*_WORK, **env)
        clock.now += 1.0
        second = {f.name: f for f in monitor.collect()}
        [(labels, util)] = second["hami_container_device_utilization_ratio"].samples
        assert labels == ("team-a", "trainer", "main", "0", GPU0)
        # 80 ms in a 1 s window is 8 %; sampling may miss the last few in flight.
        assert 0.5 * _WORK_NS / 1e7 <= util <= 1.1 * _WORK_NS / 1e7, util
        assert second["hami_container_last_kernel_elapsed_seconds"].samples == [(labels, 0.0)]
    finally:
        stop(idle)
        if busy is not None:
            stop(busy)


@pytest.mark.parametrize("case", ["memory_only", "throttled"])
def test_kernel_time_of_a_process_that_exited_still_counts(build, manager, root, tmp_path, case):
    """A process that ran its kernels and exited between two scans: its GPU time stays
    in the container's total (the region keeps what exited processes ran), so the
    interval shows it instead of a drop to 0."""
    ctr = Container(build, root, UID_A, "main", tmp_path)
    env = {"STUB_WAVE_US": "2000"}
    if case == "throttled":
        env.update(CUDA_DEVICE_SM_LIMIT="50", GPU_CORE_UTILIZATION_POLICY="force")
    idle = ctr.hold("init", "ctx", "0", "alloc", "10m", **env)
    clock = Clock()
    pods = [pod(UID_A, "trainer", "main")]
    monitor = NodeMonitor(manager, root=str(root), node_name=NODE, pods=lambda: pods, clock=clock)
    try:
        monitor.collect()
        ctr.shim.run("probe", *_WORK, env=ctr.shim.env(**env))
        clock.now += 1.0
        second = {f.name: f for f in monitor.collect()}
        [(_, util)] = second["hami_container_device_utilization_ratio"].samples
        assert 0.5 * _WORK_NS / 1e7 <= util <= 1.1 * _WORK_NS / 1e7, util
        clock.now += 1.0
        third = {f.name: f for f in monitor.collect()}
        assert third["hami_container_device_utilization_ratio"].samples[0][1] == 0.0
    finally:
        stop(idle)


def test_hostile_and_corrupt_files_are_skipped_counted_and_logged_once(
    build, region_reader, manager, root, tmp_path, caplog
):
    """Tenants own their directory: a symlink to a host file, a FIFO (an open that would
    block), a file of the wrong size, a foreign file of the right size, a region of an
    unknown version, a symlinked directory. Each is skipped with one log line however
    often it is scraped, and counted; the honest container next to them is served."""
    good = Container(build, root, UID_A, "main", tmp_path)
    proc = good.hold("init", "ctx", "0", "alloc", "64m")
    size = region_reader.FILE_SIZE
    secret = tmp_path / "host-secret"
    secret.write_bytes(b"s" * size)
    names = ["link", "fifo", "small", "foreign", "future"]
    for name in names:
        (root / f"{UID_B}_{name}").mkdir()
    (root / f"{UID_B}_link" / "vgpu.cache").symlink_to(secret)
    os.mkfifo(root / f"{UID_B}_fifo" / "vgpu.cache")
    (root / f"{UID_B}_small" / "vgpu.cache").write_bytes(b"\0" * 4096)
    (root / f"{UID_B}_foreign" / "vgpu.cache").write_bytes(b"x" * size)
    future = bytearray(good.shim.region.read_bytes())
    struct.pack_into("<I", future, region_reader.LAYOUT["region_header.version"][0], 3)
    (root / f"{UID_B}_future" / "vgpu.cache").write_bytes(bytes(future))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "vgpu.cache").write_bytes(good.shim.region.read_bytes())
    (root / f"{UID_B}_dirlink").symlink_to(outside, target_is_directory=True)
    pods = [pod(UID_A, "trainer", "main"), pod(UID_B, "evil", *names, "dirlink")]
    monitor = NodeMonitor(manager, root=str(root), node_name=NODE, pods=lambda: pods)
    try:
        with caplog.at_level(logging.WARNING, logger="hami_core.monitor.node"):
            for _ in range(3):
                fams = {f.name: f for f in monitor.collect()}
        skipped = dict(
            (labels[0], v) for labels, v in fams["hami_monitor_usage_files_skipped_total"].samples
        )
        assert skipped == {"symlink": 6, "not-regular": 3, "size": 3, "corrupt": 6}
        warnings = [
            r.getMessage() for r in caplog.records if "skipped a usage file" in r.getMessage()
        ]
        assert len(warnings) == 6, warnings
        assert any("version 3" in w for w in warnings)
        used = fams["hami_vgpu_memory_used_bytes"].samples
        assert used == [(("team-a", "trainer", "main", "0", GPU0), 64 * MiB)]
        assert secret.read_bytes() == b"s" * size
    finally:
        stop(proc)


def test_directories_of_gone_pods_are_removed_after_the_grace_period(manager, root, tmp_path):
    clock = Clock()
    keep = root / f"{UID_A}_main"
    gone = root / f"{UID_GONE}_main"
    other = root / "not-a-container-dir"
    for d in (keep, gone, other):
        d.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("host file")
    (gone / "vgpu.cache").symlink_to(outside)
    pods: list | None = None
    monitor = NodeMonitor(
        manager, root=str(root), node_name=NODE, pods=lambda: pods, grace_s=60, clock=clock
    )
    monitor.collect()
    clock.now += 3600
    monitor.collect()
    assert gone.exists(), "nothing is removed while the node's pods are not known"

    pods = [pod(UID_A, "trainer", "main")]
    monitor.collect()
    clock.now += 59
    monitor.collect()
    assert gone.exists(), "kept during the grace period"
    clock.now += 1
    fams = {f.name: f for f in monitor.collect()}
    assert not gone.exists()
    assert keep.exists() and other.exists()
    assert outside.read_text() == "host file", "links inside are removed, not followed"
    assert fams["hami_monitor_directories_removed_total"].samples == [((), 1.0)]


def test_a_pod_that_comes_back_within_the_grace_period_keeps_its_directory(manager, root):
    clock = Clock()
    d = root / f"{UID_A}_main"
    d.mkdir()
    pods: list = []
    monitor = NodeMonitor(
        manager, root=str(root), node_name=NODE, pods=lambda: pods, grace_s=60, clock=clock
    )
    monitor.collect()
    clock.now += 30
    pods.append(pod(UID_A, "trainer", "main"))
    monitor.collect()
    pods.clear()
    clock.now += 45  # 75 s after first seen missing, but only 45 s since it was missing again
    monitor.collect()
    assert d.exists()


def test_the_limit_comes_from_the_schedulers_allocation_not_from_the_tenants_region(
    build, manager, root, tmp_path
):
    """The region's limit is written from inside the container; a tenant that runs with
    a forged 99999 MiB limit still shows the 4096 MiB the scheduler allocated (the
    ``-allocated`` annotation only the scheduler may write). Without an allocation the
    region's own limit is shown."""
    ctr = Container(build, root, UID_A, "main", tmp_path)
    proc = ctr.hold("init", "ctx", "0", "alloc", "3000m", CUDA_DEVICE_MEMORY_LIMIT_0="99999m")
    allocated = pod(UID_A, "trainer", "main")
    allocated["metadata"]["annotations"] = {
        "hami.io/vgpu-devices-allocated": f"{GPU0},NVIDIA,4096,30:;"
    }
    try:
        pods = [allocated]
        monitor = NodeMonitor(manager, root=str(root), node_name=NODE, pods=lambda: pods)
        fams = {f.name: f for f in monitor.collect()}
        labels = ("team-a", "trainer", "main", "0", GPU0)
        assert fams["hami_vgpu_memory_limit_bytes"].samples == [(labels, 4096 * MiB)]
        assert fams["hami_vgpu_memory_used_bytes"].samples == [(labels, 3000 * MiB)]
        pods = [pod(UID_A, "trainer", "main")]
        fams = {f.name: f for f in monitor.collect()}
        assert fams["hami_vgpu_memory_limit_bytes"].samples == [(labels, 99999 * MiB)]
    finally:
        stop(proc)
