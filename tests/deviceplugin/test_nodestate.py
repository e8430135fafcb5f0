"""The device plugin's ``NodeState`` (``FileNodeState`` under ``--state-dir``): the
only place a backend keeps records between Allocate calls (``hami_allocate``'s
``state``)."""

from __future__ import annotations

import json
import os

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin.nodestate import FileNodeState
from hami_core.model import ContainerDevice, DeviceInfo, MemoryNodeState, ScopedNodeState
from hami_core.plugin import BackendManager
from hami_core.servers.deviceplugin_main import DevicePluginOptions, DevicePluginProcess


@pytest.mark.parametrize("make", [FileNodeState, lambda _: MemoryNodeState()])
def test_records_round_trip_and_bad_names_are_refused(tmp_path, make):
    state = make(tmp_path)
    assert state.read("cu-masks") == {}
    state.write("cu-masks", {"p/c": {"GPU-0": [0, 75]}})
    assert state.read("cu-masks") == {"p/c": {"GPU-0": [0, 75]}}
    for bad in ("", "../x", "a/b", "A", ".hidden"):
        with pytest.raises(ValueError, match="node state record name"):
            state.write(bad, {})
    assert sorted(os.listdir(tmp_path)) == (["cu-masks.json"] if make is FileNodeState else [])


def test_a_record_survives_a_restart_and_a_broken_file_reads_empty(tmp_path):
    FileNodeState(tmp_path / "state").write("r", {"k": 1})
    assert FileNodeState(tmp_path / "state").read("r") == {"k": 1}
    assert (tmp_path / "state" / "r.json").stat().st_mode & 0o777 == 0o644
    (tmp_path / "state" / "r.json").write_text("{not json")
    assert FileNodeState(tmp_path / "state").read("r") == {}
    (tmp_path / "state" / "r.json").write_text(json.dumps([1, 2]))
    assert FileNodeState(tmp_path / "state").read("r") == {}


def test_a_link_planted_at_a_record_is_replaced_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "r.json").symlink_to(target)
    FileNodeState(tmp_path / "state").write("r", {"k": 1})
    assert target.read_text() == "keep"
    assert not (tmp_path / "state" / "r.json").is_symlink()


def test_each_backend_sees_only_its_own_records():
    shared = MemoryNodeState()
    amd, other = ScopedNodeState(shared, "amd"), ScopedNodeState(shared, "other")
    amd.write("cu-masks", {"a": 1})
    assert other.read("cu-masks") == {} and amd.read("cu-masks") == {"a": 1}
    assert shared.read("amd.cu-masks") == {"a": 1}


def test_the_device_plugin_keeps_amd_cu_ranges_under_state_dir(tmp_path):
    """The real process wiring: ``--state-dir`` is where the AMD backend's CU ranges go,
    through the manager's ``hami_allocate`` call."""
    manager = BackendManager.from_entry_points(disabled=[])
    opts = DevicePluginOptions(
        node_name="n1",
        backend="amd",
        state_dir=str(tmp_path / "s"),
        pod_resources_socket=str(tmp_path / "no-pod-resources.sock"),  # never the host's
    )
    process = DevicePluginProcess(opts, store=MemoryCluster(), manager=manager)
    state = process.allocator.state
    assert isinstance(state, FileNodeState) and state.root == tmp_path / "s"
    gpu = manager.device_type("AMD")
    devices = [
        DeviceInfo(
            uuid="GPU-0", vendor=gpu.vendor, model="MI300X", memory_mib=196592, cores_pct=304
        )
    ]
    slice_ = (ContainerDevice(uuid="GPU-0", vendor="AMD", memory_mib=1024, cores_pct=76),)
    pod = {"metadata": {"uid": "u1"}}
    res = manager.allocate("AMD", pod, {"name": "c"}, slice_, node_devices=devices, state=state)
    assert res.envs["HSA_CU_MASK"] == "0:0-75"
    assert json.loads((tmp_path / "s" / "amd.cu-masks.json").read_text()) == {
        "u1/c": {"GPU-0": [0, 75]}
    }
    # A pod that finished frees its range at the next release round (the loop's
    # hami_release, run between Allocate calls), and the next pod takes it.
    u2 = {"metadata": {"uid": "u2"}}
    manager.allocate("AMD", u2, {"name": "c"}, slice_, node_devices=devices, state=state)
    done = {"metadata": {"uid": "u1"}, "status": {"phase": "Succeeded"}}
    assert process.allocator.release([done, u2], devices) == ("the CU ranges of u1/c",)
    assert process.allocator.release([done, u2], devices) == ()
    assert set(json.loads((tmp_path / "s" / "amd.cu-masks.json").read_text())) == {"u2/c"}
    u3 = {"metadata": {"uid": "u3"}}
    res = manager.allocate("AMD", u3, {"name": "c"}, slice_, node_devices=devices, state=state)
    assert res.envs["HSA_CU_MASK"] == "0:0-75"
    assert process.loop.allocator is process.allocator
