"""hami-nvidia's node side without a driver: inventory math, NUMA, MIG, unified memory,
XID health with recovery, link scores (a Python fake of the NVML interface)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hami_nvidia import plugin
from hami_nvidia.discover import device_infos, model_name, numa_node
from hami_nvidia.node import NvidiaNode
from hami_nvidia.nvml import (
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    NvmlGpu,
    XidEvent,
    normalise_bus_id,
)
from hami_nvidia.topology import link_scores

from hami_core.errors import ConfigError
from hami_core.protocol.config import VendorConfig
from hami_core.testing import section

from .pyfake import PyFakeNvml


def gpu(i: int, **kw) -> NvmlGpu:  # type: ignore[no-untyped-def]
    fields = {
        "index": i,
        "uuid": f"GPU-{i}",
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_mib": 81920,
        "bus_id": f"00000000:{0x10 + i:02X}:00.0",
    }
    fields.update(kw)
    return NvmlGpu(**fields)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CONFIG = section(plugin)


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"),
        ("Tesla V100-SXM2-32GB", "NVIDIA-Tesla V100-SXM2-32GB"),
        ("Quadro RTX 6000", "NVIDIA-Quadro RTX 6000"),
    ],
)
def test_model_names_get_the_nvidia_prefix(name, model):
    assert model_name(name) == model


def test_split_count_and_scaling_follow_the_config():
    config = section(plugin, split_count=7, memory_scaling=1.5, core_scaling=0.75)

    (d,) = device_infos([gpu(0, memory_mib=15109)], config)

    assert (d.split_count, d.memory_mib, d.cores_pct) == (7, 22663, 75)  # floors


def test_numa_node_comes_from_sysfs_by_bus_id(tmp_path: Path):
    dev = tmp_path / "bus" / "pci" / "devices"
    (dev / "0000:3b:00.0").mkdir(parents=True)
    (dev / "0000:3b:00.0" / "numa_node").write_text("1\n")
    (dev / "0000:5e:00.0").mkdir(parents=True)
    (dev / "0000:5e:00.0" / "numa_node").write_text("-1\n")

    assert normalise_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert numa_node("00000000:3B:00.0", sysfs_root=tmp_path) == 1
    assert numa_node("00000000:5E:00.0", sysfs_root=tmp_path) == 0  # no NUMA: 0, as HAMi
    assert numa_node("00000000:99:00.0", sysfs_root=tmp_path) == 0  # no entry


def test_mig_mode_is_reported():
    devices = device_infos([gpu(0, mig_enabled=True), gpu(1)], CONFIG)
    assert [d.mode for d in devices] == ["mig", "hami-core"]


def test_unified_memory_takes_the_configured_value():
    config = section(plugin, memory_scaling=1.0, options={"unifiedMemoryMiB": 98304})
    (d,) = device_infos([gpu(0, name="NVIDIA GB10", memory_mib=None)], config)
    assert d.memory_mib == 98304


def test_unified_memory_without_a_value_says_what_to_set():
    with pytest.raises(ConfigError) as err:
        device_infos([gpu(0, name="NVIDIA GB10", memory_mib=None)], CONFIG)
    assert str(err.value) == (
        "GPU 0 GPU-0 (NVIDIA GB10) reports no device memory (unified memory): set "
        "nvidia.unifiedMemoryMiB in the hami configuration to the MiB this GPU may hand out"
    )


def xid(uuid: str | None, number: int, kind: int = EVENT_XID_CRITICAL) -> XidEvent:
    return XidEvent(uuid=uuid, event_type=kind, xid=number)


def node_with(nvml: PyFakeNvml, clock: Clock) -> NvidiaNode:
    n = NvidiaNode(nvml, sysfs_root="/nonexistent", clock=clock)
    n.discover(CONFIG)
    return n


def health(n: NvidiaNode, config: VendorConfig = CONFIG) -> list[bool]:
    return [d.healthy for d in n.discover(config) or []]


def test_critical_xid_makes_one_gpu_unhealthy_and_app_errors_do_not():
    nvml, clock = PyFakeNvml([gpu(0), gpu(1)]), Clock()
    n = node_with(nvml, clock)
    nvml.events += [xid("GPU-1", 13), xid("GPU-1", 43), xid("GPU-1", 79)]

    assert n.watch_health(CONFIG, 0.01) == []  # 13: graphics engine exception
    assert n.watch_health(CONFIG, 0.01) == []  # 43: GPU stopped processing
    assert n.watch_health(CONFIG, 0.01) == ["GPU-1"]  # 79: fallen off the bus
    assert health(n) == [True, False]


def test_double_bit_ecc_counts_single_bit_does_not():
    nvml, clock = PyFakeNvml([gpu(0)]), Clock()
    n = node_with(nvml, clock)
    nvml.events += [xid("GPU-0", 0, EVENT_SINGLE_BIT_ECC), xid("GPU-0", 0, EVENT_DOUBLE_BIT_ECC)]

    assert n.watch_health(CONFIG, 0.01) == []
    assert n.watch_health(CONFIG, 0.01) == ["GPU-0"]


def test_an_event_without_a_device_makes_every_gpu_unhealthy():
    nvml, clock = PyFakeNvml([gpu(0), gpu(1)]), Clock()
    n = node_with(nvml, clock)
    nvml.events.append(xid(None, 48))

    assert sorted(n.watch_health(CONFIG, 0.01) or []) == ["GPU-0", "GPU-1"]
    assert health(n) == [False, False]


def test_ignored_xids_come_from_the_config():
    nvml, clock = PyFakeNvml([gpu(0)]), Clock()
    n = node_with(nvml, clock)
    nvml.events.append(xid("GPU-0", 79))

    assert n.watch_health(section(plugin, options={"ignoredXids": [79]}), 0.01) == []


def test_a_gpu_recovers_after_a_quiet_period_when_it_answers_again():
    nvml, clock = PyFakeNvml([gpu(0), gpu(1)]), Clock()
    n = node_with(nvml, clock)
    config = section(plugin, options={"healthRecoverySeconds": 30})
    nvml.events.append(xid("GPU-1", 79))
    n.watch_health(config, 0.01)
    nvml.dead.add("GPU-1")

    clock.now += 29
    assert n.watch_health(config, 0.01) == []  # too early
    clock.now += 2
    assert n.watch_health(config, 0.01) == []  # quiet, but NVML does not answer
    nvml.dead.clear()
    assert n.watch_health(config, 0.01) == ["GPU-1"]
    assert health(n, config) == [True, True]


def test_a_new_fault_restarts_the_quiet_period():
    nvml, clock = PyFakeNvml([gpu(0)]), Clock()
    n = node_with(nvml, clock)
    config = section(plugin, options={"healthRecoverySeconds": 30})
    nvml.events.append(xid("GPU-0", 79))
    n.watch_health(config, 0.01)
    clock.now += 20
    nvml.events.append(xid("GPU-0", 79))
    n.watch_health(config, 0.01)
    clock.now += 20

    assert n.watch_health(config, 0.01) == []
    clock.now += 11
    assert n.watch_health(config, 0.01) == ["GPU-0"]


def test_recovery_zero_keeps_a_gpu_unhealthy():
    nvml, clock = PyFakeNvml([gpu(0)]), Clock()
    n = node_with(nvml, clock)
    config = section(plugin, options={"healthRecoverySeconds": 0})
    nvml.events.append(xid("GPU-0", 79))
    n.watch_health(config, 0.01)
    clock.now += 10**6

    assert n.watch_health(config, 0.01) == []
    assert health(n, config) == [False]


def test_a_gpu_nvml_stops_answering_stays_listed_unhealthy():
    nvml, clock = PyFakeNvml([gpu(0), gpu(1)]), Clock()
    n = node_with(nvml, clock)
    nvml.list = [gpu(0), NvmlGpu(index=1, uuid="GPU-1", error="GPU is lost")]

    devices = n.discover(CONFIG) or []

    assert [(d.uuid, d.memory_mib, d.healthy) for d in devices] == [
        ("GPU-0", 81920, True),
        ("GPU-1", 81920, False),  # last good record, unhealthy
    ]


def test_a_gpu_never_seen_answering_is_not_advertised():
    nvml = PyFakeNvml([gpu(0), NvmlGpu(index=1, uuid="", error="GPU is lost")])
    n = NvidiaNode(nvml, sysfs_root="/nonexistent", clock=Clock())
    assert [d.uuid for d in n.discover(CONFIG) or []] == ["GPU-0"]


def test_link_scores_prefer_nvlink_then_the_closest_pcie_ancestor():
    gpus = [gpu(i) for i in range(4)]
    levels = {(0, 1): 0, (0, 2): 10, (0, 3): 20, (1, 2): 30, (1, 3): 40, (2, 3): 50}
    peers = {0: {normalise_bus_id(gpus[1].bus_id): 3}}

    scores = link_scores(
        gpus,
        common_ancestor=lambda a, b: levels[(min(a, b), max(a, b))],
        nvlink_peers=lambda i: peers.get(i, {}),
    )

    assert scores["GPU-0"] == {"GPU-1": 300, "GPU-2": 50, "GPU-3": 40}
    assert scores["GPU-1"] == {"GPU-0": 300, "GPU-2": 30, "GPU-3": 20}
    assert scores["GPU-3"] == {"GPU-0": 40, "GPU-1": 20, "GPU-2": 10}
