"""The device plugin removes the task-priority board entries of pods that are gone
(``hami_release``), so the boards the low-priority shims read stay small."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from hami_nvidia import plugin, priority_board

from hami_core.model import DeviceInfo
from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config

GPU = "GPU-aaaa"
LIVE, GONE, DONE = "11111111-aaaa", "22222222-bbbb", "33333333-cccc"


def config(hook: Path):  # type: ignore[no-untyped-def]
    base = BackendManager.from_plugins({"nvidia": plugin})
    raw = {"version": "v1", "nvidia": {"hookPath": str(hook)}}
    return base.with_config(parse_config(raw, backends=base.infos)).vendor_config("nvidia")


def pod(uid: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid}, "status": {"phase": phase}}


def test_entries_of_gone_and_finished_pods_go_live_and_young_ones_stay(tmp_path):
    board = tmp_path / "priority" / GPU
    for uid in (LIVE, GONE, DONE):
        (board / f"{uid}_main").mkdir(parents=True)
        (board / f"{uid}_main" / "beat").write_bytes(bytes(8))
    host_file = tmp_path / "host-secret"
    host_file.write_text("keep me")
    (board / f"{GONE}_main" / "link").symlink_to(host_file)  # a tenant's leftover
    outside = tmp_path / "outside"
    outside.mkdir()
    (board / f"{GONE}_side").symlink_to(outside, target_is_directory=True)
    (board / ".gpu").write_text(GPU)
    devices = [DeviceInfo(uuid=GPU, vendor="NVIDIA", index=0, memory_mib=1, cores_pct=100)]
    pods = [pod(LIVE), pod(DONE, "Succeeded")]
    cfg = config(tmp_path)

    assert priority_board.release(pods, devices, cfg) == [], "young entries are kept"
    later = time.time() + priority_board.GRACE_S + 1
    freed = priority_board.release(pods, devices, cfg, clock=lambda: later)
    assert sorted(freed) == sorted(
        f"priority board entry {board}/{uid}_main (pod gone)" for uid in (GONE, DONE)
    )
    assert sorted(os.listdir(board)) == sorted([".gpu", f"{LIVE}_main", f"{GONE}_side"])
    assert host_file.read_text() == "keep me" and outside.is_dir()


def test_a_recent_beat_keeps_an_entry_whose_pod_is_not_listed_yet(tmp_path):
    board = tmp_path / "priority" / GPU
    (board / f"{GONE}_main").mkdir(parents=True)
    old = time.time() - 10 * priority_board.GRACE_S
    os.utime(board / f"{GONE}_main", (old, old))
    (board / f"{GONE}_main" / "beat").write_bytes(bytes(8))  # written just now
    devices = [DeviceInfo(uuid=GPU, vendor="NVIDIA", index=0, memory_mib=1, cores_pct=100)]
    assert priority_board.release([], devices, config(tmp_path)) == []
    assert (board / f"{GONE}_main").is_dir()


def test_the_backends_release_hook_includes_the_boards(tmp_path):
    board = tmp_path / "priority" / GPU
    (board / f"{GONE}_main").mkdir(parents=True)
    old = time.time() - 10 * priority_board.GRACE_S
    os.utime(board / f"{GONE}_main", (old, old))
    devices = [DeviceInfo(uuid=GPU, vendor="NVIDIA", index=0, memory_mib=1, cores_pct=100)]
    base = BackendManager.from_plugins({"nvidia": plugin})
    raw = {"version": "v1", "nvidia": {"hookPath": str(tmp_path)}}
    manager = base.with_config(parse_config(raw, backends=base.infos))
    assert manager.release("nvidia", [], devices) == (
        f"priority board entry {board}/{GONE}_main (pod gone)",
    )
    assert not (board / f"{GONE}_main").exists()


def test_a_deep_tree_in_an_entry_is_removed_over_rounds_and_never_fails_one(tmp_path):
    """Issue 24 item 16 (e): an entry a tenant made 1200 directories deep made
    ``shutil.rmtree`` raise (recursion, a descriptor per level) on every round, so
    ``hami_release`` failed every round and no entry was ever removed again. Removal is
    bounded per round, goes on, and the other gone entries are still removed."""
    from hami_core.backend import remove_tree
    from tests.monitor.test_monitor_tenant_faults import nest

    board = tmp_path / "priority" / GPU
    board.mkdir(parents=True)
    nest(board / f"{GONE}_deep", 1200)
    (board / f"{DONE}_main").mkdir()
    old = time.time() - 10 * priority_board.GRACE_S
    for name in (f"{GONE}_deep", f"{DONE}_main"):
        os.utime(board / name, (old, old))
    devices = [DeviceInfo(uuid=GPU, vendor="NVIDIA", index=0, memory_mib=1, cores_pct=100)]
    cfg = config(tmp_path)
    freed: list[str] = []
    try:
        for _ in range(20):
            freed += priority_board.release([], devices, cfg)
            if not os.listdir(board):
                break
    finally:
        left = os.listdir(board)
        fd = os.open(board, os.O_RDONLY | os.O_DIRECTORY)
        try:  # a deep tree left behind would break pytest's cleanup of later sessions
            for name in left:
                while not remove_tree(name, dir_fd=fd):
                    pass
        finally:
            os.close(fd)
    assert left == []
    assert sorted(freed) == sorted(
        f"priority board entry {board}/{n} (pod gone)" for n in (f"{GONE}_deep", f"{DONE}_main")
    )
