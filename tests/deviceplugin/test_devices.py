"""Fake IDs, kubelet's device list, preferred IDs and the versioned device state."""

from __future__ import annotations

import threading

import attrs
import pytest

from hami_core.deviceplugin import DeviceState, fake_ids, kubelet_devices, physical_uuid
from hami_core.deviceplugin.devices import preferred_allocation
from hami_core.errors import InvalidInputError
from hami_core.model import DeviceInfo


def dev(uuid: str, *, split: int = 3, numa: int = 0, healthy: bool = True) -> DeviceInfo:
    return DeviceInfo(uuid=uuid, vendor="NVIDIA", split_count=split, numa=numa, healthy=healthy)


def test_each_gpu_is_advertised_split_count_times():
    assert fake_ids(dev("GPU-a")) == ("GPU-a-0", "GPU-a-1", "GPU-a-2")
    assert physical_uuid("GPU-9a1b-77-2") == "GPU-9a1b-77"


@pytest.mark.parametrize("bad", ["GPU-a", "GPU-a-x", "-3", "GPU"])
def test_ids_without_an_index_are_refused(bad):
    with pytest.raises(InvalidInputError, match="is not <UUID>-<index>"):
        physical_uuid(bad)


def test_an_id_longer_than_kubelet_allows_is_refused():
    with pytest.raises(InvalidInputError, match="longer than 63 characters"):
        fake_ids(dev("GPU-" + "x" * 58, split=10))


def test_kubelet_devices_carry_health_and_numa():
    devices = kubelet_devices([dev("GPU-a", split=2, numa=1), dev("GPU-b", split=1, healthy=False)])

    assert [(d.id, d.health, d.numa) for d in devices] == [
        ("GPU-a-0", "Healthy", 1),
        ("GPU-a-1", "Healthy", 1),
        ("GPU-b-0", "Unhealthy", 0),
    ]
    assert kubelet_devices([dev("GPU-c", split=1, numa=-1)])[0].numa is None


def test_preferred_ids_take_must_include_then_wanted_then_distinct_gpus():
    available = ["A-0", "A-1", "B-0", "B-1", "C-0"]

    assert preferred_allocation(available, [], 1, wanted_uuids=["B"]) == ["B-0"]
    assert preferred_allocation(available, [], 2) == ["A-0", "B-0"]
    assert preferred_allocation(available, ["A-1"], 3) == ["A-1", "B-0", "C-0"]
    assert preferred_allocation(available, [], 4) == ["A-0", "B-0", "C-0", "A-1"]
    assert preferred_allocation(["A-0"], [], 2) == ["A-0"]  # never invents IDs


def test_the_state_versions_changes_and_wakes_waiters():
    state = DeviceState()
    assert state.update([dev("GPU-a")]) is True
    assert state.update([dev("GPU-a")]) is False  # same list: no new version
    version = state.version
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(state.wait_newer(version, 5)))
    waiter.start()

    state.update([attrs.evolve(dev("GPU-a"), healthy=False)])
    waiter.join(5)

    (newer,) = got
    assert newer is not None
    assert newer[0] == version + 1
    assert {d.health for d in newer[1]} == {"Unhealthy"}
    assert state.known_ids() == {"GPU-a-0", "GPU-a-1", "GPU-a-2"}


def test_closing_the_state_ends_waits():
    state = DeviceState()
    state.update([dev("GPU-a")])
    state.close()
    assert state.wait_newer(state.version, 5) is None


def test_marking_unhealthy_keeps_the_ids():
    state = DeviceState()
    state.update([dev("GPU-a"), dev("GPU-b")])
    assert state.mark_unhealthy() is True
    assert [d.healthy for d in state.devices] == [False, False]
    assert len(state.known_ids()) == 6
