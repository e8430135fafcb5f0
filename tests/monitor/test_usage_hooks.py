"""The monitor's hooks through the BackendManager: contract checks, and the NVIDIA
backend's decoding of region files (what hami_parse_usage answers for each kind)."""

from __future__ import annotations

import pytest

from hami_core.errors import BackendError, InvalidInputError
from hami_core.model import ContainerUsage, HostDevice
from hami_core.plugin import BackendManager, hookimpl
from tests.toy_backend import ToyBackend


def toy(**overrides):
    plugin = ToyBackend()
    for name, fn in overrides.items():
        setattr(plugin, name, hookimpl(fn))
    return plugin


@pytest.mark.parametrize(
    "bad",
    [
        {"a/b": 10},
        {"..": 10},
        {"f": 0},
        {"f": True},
        {"": 5},
        {"f": "10"},
        {"f": ()},
        {"f": (10, 0)},
        {"f": (10, "20")},
    ],
)
def test_hami_usage_files_must_name_plain_files_with_positive_sizes(bad):
    manager = BackendManager.from_plugins({"toy": toy(hami_usage_files=lambda: bad)})
    with pytest.raises(BackendError, match="hami_usage_files"):
        manager.usage_files("toy")


def test_a_backend_without_monitor_hooks_names_no_files_and_no_devices():
    manager = BackendManager.from_plugins({"toy": toy()})
    assert manager.usage_files("toy") == {}
    assert manager.host_devices("toy") is None
    assert manager.parse_usage("toy", "x", b"") is None


def test_hami_host_devices_must_answer_host_devices():
    manager = BackendManager.from_plugins({"toy": toy(hami_host_devices=lambda: ["GPU-1"])})
    with pytest.raises(BackendError, match="hami_host_devices"):
        manager.host_devices("toy")
    dev = HostDevice(index=0, uuid="T-1", device_type="TOY")
    manager = BackendManager.from_plugins({"toy": toy(hami_host_devices=lambda: [dev])})
    assert manager.host_devices("toy") == [dev]


def test_hami_parse_usage_errors_reach_the_monitor_as_invalid_input():
    def parse(file_name, data):
        raise InvalidInputError(f"{file_name}: bad magic")

    manager = BackendManager.from_plugins({"toy": toy(hami_parse_usage=parse)})
    with pytest.raises(InvalidInputError, match="bad magic"):
        manager.parse_usage("toy", "f", b"x")

    def crash(file_name, data):
        raise IndexError("oops")

    manager = BackendManager.from_plugins({"toy": toy(hami_parse_usage=crash)})
    with pytest.raises(BackendError, match="IndexError"):
        manager.parse_usage("toy", "f", b"x")


def test_nvidia_names_its_region_and_decodes_it(build, shim, region_reader):
    manager = BackendManager.from_entry_points()
    assert manager.usage_files("nvidia") == {
        "vgpu.cache": (region_reader.FILE_SIZE, region_reader.FILE_SIZE_V1)
    }
    shim.probe("init", "ctx", "0", "alloc", "100m", "meminfo")
    usage = manager.parse_usage("nvidia", "vgpu.cache", shim.region.read_bytes())
    assert isinstance(usage, ContainerUsage)
    assert [d.uuid for d in usage.devices] == ["GPU-00000000-1111-2222-3333-000000000000"]
    assert usage.devices[0].memory_limit_bytes == 1024 << 20
    assert manager.parse_usage("nvidia", "other", b"") is None
    assert (
        manager.parse_usage("nvidia", "vgpu.cache", bytes(region_reader.FILE_SIZE))
        == ContainerUsage()
    )
    with pytest.raises(InvalidInputError, match="magic"):
        manager.parse_usage("nvidia", "vgpu.cache", b"y" * region_reader.FILE_SIZE)
