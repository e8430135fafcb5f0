"""The example backend of ``docs/writing-a-backend.md`` (``examples/backend-example``)
passes the conformance kit and places a pod through the whole pipeline, without being
installed: its directory is put on ``sys.path`` and its plugin module registered directly."""

import importlib
import sys
from pathlib import Path

import hami_nvidia.plugin

from hami_core.cluster import MemoryCluster
from hami_core.model import ContainerDevice, DeviceInfo
from hami_core.plugin import BackendManager
from hami_core.protocol import encode_inventory
from hami_core.simulate.pipeline import Pipeline
from hami_core.testing import BackendConformance
from tests.builders import gpu
from tests.builders import node as nvidia_node

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "backend-example"
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))
example_plugin = importlib.import_module("hami_example.plugin")


class TestExampleBackend(BackendConformance):
    backend_name = "example"
    plugin = example_plugin


def example_node(name, devices):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-register-example": encode_inventory(devices)},
        },
        "status": {"allocatable": {"example.com/vdevice": str(10 * len(devices))}},
    }


def example_device(uuid, index=0):
    return DeviceInfo(
        uuid=uuid,
        vendor="EXAMPLE",
        model="Example X1",
        index=index,
        split_count=10,
        memory_mib=8192,
        cores_pct=100,
    )


def test_a_pod_is_placed_on_an_example_node_and_allocated():
    cluster = MemoryCluster()
    cluster.add_node(nvidia_node("gpu-1", [gpu("GPU-A")]))
    cluster.add_node(example_node("ex-1", [example_device("EX-0"), example_device("EX-1", 1)]))
    manager = BackendManager.from_plugins({"nvidia": hami_nvidia.plugin, "example": example_plugin})
    pipeline = Pipeline(cluster, manager)
    limits = {"example.com/vdevice": "1", "example.com/vdevice-memory": "2048"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ex", "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]
        },
    }
    out = pipeline.submit(pod)
    assert out.denied == "" and out.error == ""
    assert out.node == "ex-1"
    (slice_,) = out.allocation.devices["EXAMPLE"][0]
    assert slice_ == ContainerDevice(uuid="EX-0", vendor="EXAMPLE", memory_mib=2048, cores_pct=0)
    stored = cluster.get_pod("default", "ex")
    assert stored["spec"]["containers"][0]["resources"]["requests"] == limits
    assert "hami.io/example-devices-allocated" in stored["metadata"]["annotations"]
    assert out.envs["main"] == {
        "EXAMPLE_VISIBLE_DEVICES": "EX-0",
        "EXAMPLE_DEVICE_MEMORY_LIMIT": "2048m",
    }
    # too much memory for any EXAMPLE device: unschedulable, never moved to the GPU node
    big = {**pod, "metadata": {"name": "big", "namespace": "default"}}
    big["spec"] = {
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {
                    "limits": {"example.com/vdevice": "1", "example.com/vdevice-memory": "9000"}
                },
            }
        ]
    }
    miss = pipeline.submit(big)
    assert not miss.scheduled
    assert "CardInsufficientMemory" in str(miss.filter.failed["ex-1"])
    assert "gpu-1" in miss.filter.failed
