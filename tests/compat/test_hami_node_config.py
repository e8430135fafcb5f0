"""HAMi 2.10's per-node device plugin config works unchanged (issue item 9)."""

from __future__ import annotations

import json
import logging

import pytest
from hami_nvidia.node import NvidiaNode
from hami_nvidia.nvml import NvmlGpu

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import NodeAgent, load_node_overrides
from hami_core.deviceplugin.state import DeviceState
from hami_core.errors import ConfigError
from hami_core.protocol.nodeconfig import parse_node_overrides
from tests.deviceplugin.conftest import gpu_uuid, nvidia_manager
from tests.deviceplugin.pyfake import PyFakeNvml, installed

NODE = "gpu-node-1"

#: HAMi 2.10's chart default (``charts/hami/values.yaml``
#: ``devicePlugin.nodeConfiguration.config``), with the node's name filled in.
CHART_DEFAULT = {
    "nodeconfig": [
        {
            "name": NODE,
            "operatingmode": "hami-core",
            "devicememoryscaling": 1,
            "devicesplitcount": 10,
            "preconfigureddevicememory": 0,
            "enablenumatopology": False,
            "migstrategy": "none",
            "filterdevices": {"uuid": [], "index": []},
            "enablegetpreferredallocation": False,
        }
    ]
}


def test_the_chart_default_nodeconfig_is_accepted(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CHART_DEFAULT))
    o = load_node_overrides(path, node=NODE)
    assert (o.split_count, o.memory_scaling, o.numa_topology) == (10, 1.0, False)
    assert o.preconfigured_memory_mib == 0


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("enablenumatopology", "yes", "enablenumatopology: expected true or false"),
        ("enablegetpreferredallocation", 1, "enablegetpreferredallocation: expected true"),
        ("preconfigureddevicememory", -1, "preconfigureddevicememory: must be >= 0"),
        ("preconfigureddevicememory", "16Gi", "preconfigureddevicememory: expected a number"),
        ("nosuchkey", 1, "nosuchkey: unknown key"),
    ],
)
def test_bad_values_name_the_key(key, value, words):
    doc = {"nodeconfig": [{"name": NODE, key: value}]}
    with pytest.raises(ConfigError, match=words):
        parse_node_overrides(doc, node=NODE)


def test_unapplied_keys_are_said(caplog):
    doc = {"nodeconfig": [{"name": NODE, "libcudaloglevel": "3"}]}
    with caplog.at_level(logging.INFO, logger="hami_core.protocol.nodeconfig"):
        parse_node_overrides(doc, node=NODE)
        parse_node_overrides(CHART_DEFAULT, node=NODE)
    text = caplog.text
    assert "libcudaloglevel: not applied" in text
    assert "enablegetpreferredallocation: false is not applied" in text


def test_preconfigured_memory_fills_a_device_that_reports_none(tmp_path):
    """HAMi ``pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go``: a GPU whose
    memory query is not supported is registered with ``preconfigureddevicememory`` MiB."""
    nvml = PyFakeNvml(
        [
            NvmlGpu(index=0, uuid=gpu_uuid(0), name="GB10", memory_mib=0, bus_id=""),
            NvmlGpu(index=1, uuid=gpu_uuid(1), name="T4", memory_mib=15360, bus_id=""),
        ]
    )
    cluster = MemoryCluster()
    cluster.add_node({"metadata": {"name": NODE}})
    overrides = parse_node_overrides(
        {
            "nodeconfig": [
                {"name": NODE, "preconfigureddevicememory": 8192, "devicememoryscaling": 2}
            ]
        },
        node=NODE,
    )
    with installed(NvidiaNode(nvml, sysfs_root="/nonexistent", clock=lambda: 0.0)):
        a = NodeAgent(
            cluster,
            nvidia_manager(tmp_path),
            backend="nvidia",
            vendor="NVIDIA",
            node=NODE,
            overrides=overrides,
        )
        devices = {d.uuid: d.memory_mib for d in a.discover()}
    assert devices == {gpu_uuid(0): 16384, gpu_uuid(1): 30720}


def test_numa_topology_off_sends_no_numa_to_kubelet():
    from hami_core.model import DeviceInfo

    dev = DeviceInfo(uuid="GPU-1", vendor="NVIDIA", split_count=2, memory_mib=1, numa=1)
    on, off = DeviceState(), DeviceState(numa_topology=False)
    on.update([dev])
    off.update([dev])
    assert {d.numa for d in on.wait_newer(0, 0)[1]} == {1}
    assert {d.numa for d in off.wait_newer(0, 0)[1]} == {None}
