"""The node monitor against a tenant (issue 24 item 16): what a pod's author can leave
in its directory, put in its region or do to /metrics must never break the scrape of
the node, grow the monitor without bound, or push Prometheus past its timeout."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from hami_core.backend import remove_tree
from hami_core.model import ContainerUsage, ProcessDeviceSample, ProcessSample, RegionDevice
from hami_core.monitor import NodeMonitor
from hami_core.servers.monitor import create_monitor_app

from .support import NODE, Served, pod

UID_A = "0a0a0a0a-0000-4000-8000-00000000000a"
UID_GONE = "0c0c0c0c-0000-4000-8000-00000000000c"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _no_deep_tree_left(tmp_path):
    """A tree a test left 1200 deep would break pytest's own cleanup of old temporary
    directories (``shutil.rmtree`` recursion) for every later session on the machine."""
    yield
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in os.listdir(fd):
            while not remove_tree(name, dir_fd=fd):
                pass
    finally:
        os.close(fd)


def nest(top: Path, depth: int) -> Path:
    """A chain of ``depth`` directories under ``top`` (built by relative steps: the
    whole path would pass PATH_MAX), with a file at the bottom."""
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        with open(os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as f:
            f.write(b"x")
    finally:
        os.close(fd)
    return top


class FakeUsage:
    """A backend manager whose one backend reads ``usage.bin`` as whatever ``usage``
    holds for that directory (the tenant decides what its region says)."""

    def __init__(self) -> None:
        self.usage: dict[str, ContainerUsage] = {}
        self.scans = 0
        self.delay_s = 0.0

    class _Record:
        name = "fake"

    @property
    def backends(self) -> list[Any]:
        return [self._Record()]

    def usage_files(self, backend: str) -> dict[str, tuple[int, ...]]:
        return {"usage.bin": (16,)}

    def parse_usage(self, backend: str, name: str, data: bytes) -> ContainerUsage | None:
        time.sleep(self.delay_s)
        return self.usage.get(data.decode().strip())

    def host_devices(self, backend: str) -> list[Any]:
        self.scans += 1
        return []

    def device_types(self) -> tuple[Any, ...]:
        return ()


def region_claiming(uuids: list[str], pid: int, start: int) -> ContainerUsage:
    return ContainerUsage(
        devices=tuple(
            RegionDevice(index=i, uuid=u, memory_limit_bytes=1 << 30, cores_limit_pct=100)
            for i, u in enumerate(uuids)
        ),
        processes=(
            ProcessSample(
                pid=pid,
                start_time_ticks=start,
                devices={u: ProcessDeviceSample(buffer_bytes=1 << 20) for u in uuids},
            ),
        ),
    )


def fake_proc(tmp: Path, pid: int, start: int) -> Path:
    proc = tmp / "proc"
    (proc / str(pid)).mkdir(parents=True)
    fields = ["S"] + ["0"] * 18 + [str(start)] + ["0"] * 10
    (proc / str(pid) / "stat").write_text(f"{pid} (python) " + " ".join(fields))
    (proc / str(pid) / "status").write_text(f"Name:\tpython\nNSpid:\t{pid}\n")
    return proc


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# -- (a) a deep directory, a malformed entry, a broken scan ----------------------------


def test_a_gone_pods_directory_nested_1200_deep_is_removed_and_never_fails_the_scrape(
    tmp_path,
):
    """HAMi issue-24 item 16 (a): ``shutil.rmtree`` recursed once per level (and held a
    descriptor per level), so a directory 1200 deep raised on every scan and every
    /metrics answered 500 for good. The removal is bounded per scan, resumes, and ends."""
    root = tmp_path / "containers"
    root.mkdir()
    nest(root / f"{UID_GONE}_main", 1200)
    clock = Clock()
    monitor = NodeMonitor(
        FakeUsage(), root=str(root), node_name=NODE, pods=lambda: [], grace_s=0, clock=clock
    )
    served = Served(create_monitor_app(monitor, scan_max_age_s=0))
    try:
        for _ in range(200):
            status, body = get(served.url)
            assert status == 200, body[-2000:]
            status, _ = get(served.url.replace("/metrics", "/healthz"))
            assert status == 200
            if not (root / f"{UID_GONE}_main").exists():
                break
            clock.now += 1
        assert not (root / f"{UID_GONE}_main").exists()
        assert os.listdir(root) == []
        assert (
            b"hami_monitor_directories_removed_total 1.0" in body
            or monitor.stats.removed_directories == 1
        )
    finally:
        served.close()


def test_remove_tree_is_bounded_in_descriptors_and_work_and_never_follows_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("host file")
    top = nest(tmp_path / "t", 3000)
    (top / "link").symlink_to(outside, target_is_directory=True)
    os.mkfifo(top / "fifo")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        rounds = 0
        while not remove_tree("t", dir_fd=fd, max_depth=16, max_entries=500):
            rounds += 1
            assert rounds < 100
        assert rounds >= 3, "the budget bounds one call's work"
    finally:
        os.close(fd)
    assert not top.exists() and (outside / "keep").read_text() == "host file"


def test_a_malformed_pod_or_entry_is_skipped_and_counted_and_the_rest_is_served(tmp_path):
    root = tmp_path / "containers"
    (root / f"{UID_A}_main").mkdir(parents=True)
    (root / f"{UID_A}_main" / "usage.bin").write_text("a".ljust(16))
    proc = fake_proc(tmp_path, 41, 7)
    usage = FakeUsage()
    usage.usage["a"] = region_claiming(["GPU-1"], 41, 7)
    bad = {"metadata": {"uid": UID_A, "name": "x"}, "spec": {"containers": "not-a-list"}}
    good_uid = "0d0d0d0d-0000-4000-8000-00000000000d"
    (root / f"{good_uid}_main").mkdir()
    (root / f"{good_uid}_main" / "usage.bin").write_text("a".ljust(16))
    pods = [bad, pod(good_uid, "fine", "main")]
    monitor = NodeMonitor(
        usage, root=str(root), node_name=NODE, pods=lambda: pods, proc_root=str(proc)
    )
    fams = {f.name: f for f in monitor.collect()}
    assert [s[0][1] for s in fams["hami_vgpu_memory_used_bytes"].samples] == ["fine"]
    errors = dict(fams["hami_monitor_scan_errors_total"].samples)
    assert errors == {("pod",): 1.0, ("container",): 1.0}
    assert (root / f"{UID_A}_main").exists(), "a malformed pod still owns its directory"


def test_a_broken_scan_serves_metrics_and_fails_healthz_until_it_scans_again(tmp_path):
    root = tmp_path / "containers"
    root.mkdir()
    broken = {"on": True}

    def pods() -> list[Any]:
        if broken["on"]:
            raise RuntimeError("informer exploded")
        return []

    monitor = NodeMonitor(FakeUsage(), root=str(root), node_name=NODE, pods=pods)
    served = Served(create_monitor_app(monitor, scan_max_age_s=0))
    try:
        status, body = get(served.url)
        assert status == 200
        assert b'hami_monitor_scan_errors_total{part="scan"} 1.0' in body
        status, body = get(served.url.replace("/metrics", "/healthz"))
        assert status == 503 and b"informer exploded" in body
        broken["on"] = False
        assert get(served.url)[0] == 200
        assert get(served.url.replace("/metrics", "/healthz"))[0] == 200
    finally:
        served.close()


# -- (b) rotating device UUIDs ---------------------------------------------------------


def test_rotating_device_uuids_keep_the_monitors_state_and_series_bounded(tmp_path):
    """A tenant's region names new device UUIDs on every scan (and more devices than a
    region holds): the per-series state of devices no longer named is dropped, and a
    container never has more than ``MAX_SERIES_PER_CONTAINER`` series; the rest are
    dropped and counted."""
    root = tmp_path / "containers"
    (root / f"{UID_A}_main").mkdir(parents=True)
    (root / f"{UID_A}_main" / "usage.bin").write_text("a".ljust(16))
    proc = fake_proc(tmp_path, 41, 7)
    usage = FakeUsage()
    pods = [pod(UID_A, "evil", "main")]
    clock = Clock()
    monitor = NodeMonitor(
        usage, root=str(root), node_name=NODE, pods=lambda: pods, proc_root=str(proc), clock=clock
    )
    cap = NodeMonitor.MAX_SERIES_PER_CONTAINER
    for scan in range(50):
        usage.usage["a"] = region_claiming([f"GPU-{scan}-{i}" for i in range(cap + 5)], 41, 7)
        fams = {f.name: f for f in monitor.collect()}
        clock.now += 1
        assert len(fams["hami_vgpu_memory_used_bytes"].samples) == cap
    assert monitor.state_size() <= 2 * cap
    dropped = dict(fams["hami_monitor_series_dropped_total"].samples)
    assert dropped == {(): 50.0 * 5}


# -- (c) one client looping /metrics ---------------------------------------------------


def test_a_client_looping_metrics_shares_one_scan_and_prometheus_stays_fast(tmp_path):
    """Every request was a full scan under one lock: a tenant looping /metrics queued
    Prometheus behind its scans. Requests within ``scan_max_age_s`` share the last scan,
    and concurrent requests wait for one scan rather than each making its own."""
    root = tmp_path / "containers"
    (root / f"{UID_A}_main").mkdir(parents=True)
    (root / f"{UID_A}_main" / "usage.bin").write_text("a".ljust(16))
    usage = FakeUsage()
    usage.delay_s = 0.4  # a slow scan (a large node)
    pods = [pod(UID_A, "p", "main")]
    monitor = NodeMonitor(usage, root=str(root), node_name=NODE, pods=lambda: pods)
    served = Served(create_monitor_app(monitor, scan_max_age_s=5))
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):  # a connection the server's guard refused
                get(served.url)

    hammer = [threading.Thread(target=loop) for _ in range(4)]
    try:
        for t in hammer:
            t.start()
        time.sleep(0.5)
        started = time.monotonic()
        status, _ = get(served.url)
        elapsed = time.monotonic() - started
        assert status == 200
        assert elapsed < 1.0, elapsed
        assert usage.scans <= 2, usage.scans
    finally:
        stop.set()
        for t in hammer:
            t.join()
        served.close()


def test_concurrent_requests_wait_for_one_scan(tmp_path):
    root = tmp_path / "containers"
    root.mkdir()
    usage = FakeUsage()
    monitor = NodeMonitor(usage, root=str(root), node_name=NODE, pods=lambda: [])
    results: list[Any] = []
    threads = [
        threading.Thread(target=lambda: results.append(monitor.latest(max_age_s=60)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert usage.scans == 1
    assert len({id(r) for r in results}) == 1


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_bad_cache_age_is_refused(tmp_path, bad):
    monitor = NodeMonitor(FakeUsage(), root=str(tmp_path), node_name=NODE, pods=lambda: [])
    with pytest.raises(ValueError, match="max_age_s"):
        monitor.latest(max_age_s=bad)


# -- (d) the node's disk ---------------------------------------------------------------


def test_a_region_grown_past_its_size_is_cut_back_every_scan(tmp_path):
    """The region file is a container's one writable host path; writing past its end
    still takes the node's disk. Every scan cuts it back to its format's largest size,
    counts it, and the region is read as before."""
    root = tmp_path / "containers"
    (root / f"{UID_A}_main").mkdir(parents=True)
    region = root / f"{UID_A}_main" / "usage.bin"
    region.write_text("a".ljust(16))
    proc = fake_proc(tmp_path, 41, 7)
    usage = FakeUsage()
    usage.usage["a"] = region_claiming(["GPU-1"], 41, 7)
    pods = [pod(UID_A, "p", "main")]
    monitor = NodeMonitor(
        usage, root=str(root), node_name=NODE, pods=lambda: pods, proc_root=str(proc)
    )
    with region.open("ab") as f:
        f.write(b"z" * (1 << 20))
    fams = {f.name: f for f in monitor.collect()}
    assert region.stat().st_size == 16
    assert fams["hami_monitor_files_truncated_total"].samples == [((), 1.0)]
    assert fams["hami_monitor_truncated_bytes_total"].samples == [((), float(1 << 20))]
    assert len(fams["hami_vgpu_memory_used_bytes"].samples) == 1
    outside = tmp_path / "host-file"
    outside.write_bytes(b"h" * 100)
    region.unlink()
    region.symlink_to(outside)
    monitor.collect()
    assert outside.read_bytes() == b"h" * 100, "a link is never followed to truncate"


def test_the_real_shim_uses_the_region_the_device_plugin_made_and_sized(build, tmp_path):
    """The shim attaches to the file Allocate created (zero-filled, sparse, 0666) as to
    one it made itself: the region the monitor reads is the same."""
    from hami_nvidia.shared_region import FILE_SIZE

    from hami_core.deviceplugin.allocator import make_shared_file
    from hami_core.plugin import BackendManager
    from tests.shim.support import stop

    from .support import GPU0, Container

    root = tmp_path / "containers"
    root.mkdir()
    ctr = Container(build, root, UID_A, "main", tmp_path)
    make_shared_file(str(ctr.shim.region), FILE_SIZE)
    before = ctr.shim.region.stat()
    proc = ctr.hold("init", "ctx", "0", "alloc", "64m")
    try:
        after = ctr.shim.region.stat()
        assert after.st_ino == before.st_ino and after.st_size == before.st_size
        pods = [pod(UID_A, "trainer", "main")]
        monitor = NodeMonitor(
            BackendManager.from_entry_points(), root=str(root), node_name=NODE, pods=lambda: pods
        )
        fams = {f.name: f for f in monitor.collect()}
        used = fams["hami_vgpu_memory_used_bytes"].samples
        assert used == [(("team-a", "trainer", "main", "0", GPU0), 64 << 20)]
    finally:
        stop(proc)
