"""Webhook -> filter -> bind -> allocate for Ascend pods on an embedded cluster, with nodes
carrying the inventory HAMi's ascend-device-plugin writes (``hami.io/node-register-<x>``)."""

import json
import time

from hami_ascend import discover, plugin
from hami_ascend.models import settings

from hami_core.cluster import MemoryCluster
from hami_core.model import ContainerDevice
from hami_core.protocol import encode_inventory
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.simulate.pipeline import Pipeline
from hami_core.testing import section
from tests import builders
from tests.backends.support import only
from tests.builders import gpu
from tests.builders import node as nvidia_node

from .support import FakeNpuSmi

UUID0 = "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"


def ascend_node(name, vendor, devices_json, *, count_resource=None):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {f"hami.io/node-register-{vendor}": devices_json},
        },
        "status": {"allocatable": {count_resource or f"huawei.com/{vendor}": "32"}},
    }


def discovered_node(name="npu-1", layout="910b3"):
    """A node registered from our own discovery of the recorded npu-smi samples."""
    found = discover.discover(settings(section(plugin)), FakeNpuSmi(layout))
    assert found is not None
    vendor = found[0].vendor
    return ascend_node(name, vendor, encode_inventory(found))


#: Exactly what HAMi's ascend-device-plugin registers for two 910B3 chips in template
#: mode (register.go: Count = VDeviceCount, Devmem = memoryAllocatable, Devcore = AICore,
#: Type = CommonWord, customInfo.NetworkID; zero values omitted by encoding/json).
HAMI_910B3 = json.dumps(
    [
        {
            "id": "HAMI-B3-0",
            "count": 4,
            "devmem": 65536,
            "devcore": 20,
            "type": "Ascend910B3",
            "health": True,
            "customInfo": {"NetworkID": 0},
        },
        {
            "id": "HAMI-B3-1",
            "index": 1,
            "count": 4,
            "devmem": 65536,
            "devcore": 20,
            "type": "Ascend910B3",
            "health": True,
            "customInfo": {"NetworkID": 0},
        },
    ]
)


def ascend_pod(name, model="Ascend910B3", count=None, memory=None, cores=None, annotations=None):
    limits = {}
    if count is not None:
        limits[f"huawei.com/{model}"] = str(count)
    if memory is not None:
        limits[f"huawei.com/{model}-memory"] = str(memory)
    if cores is not None:
        limits[f"huawei.com/{model}-core"] = str(cores)
    main = {"name": "main", "image": "busybox", "resources": {"limits": limits}}
    return builders.pod(name, main, annotations=annotations)


def pipeline(*nodes, backends=("ascend",)):
    cluster = MemoryCluster()
    for n in nodes:
        cluster.add_node(n)
    return Pipeline(cluster, only(*backends))


def test_a_slice_is_admitted_placed_annotated_and_allocated(npu_smi):
    p = pipeline(discovered_node())
    out = p.submit(ascend_pod("infer", count=1, memory=10000))
    assert out.denied == "" and out.error == ""
    assert out.node == "npu-1"
    stored = p.cluster.get_pod("default", "infer")
    limits = stored["spec"]["containers"][0]["resources"]["limits"]
    assert limits["huawei.com/Ascend910B3-memory"] == "16384"  # rounded up to vir05_1c_16g
    assert stored["spec"]["schedulerName"] == "hami-scheduler"
    ann = stored["metadata"]["annotations"]
    # The device plugin's Allocator has answered the container: its entry is emptied.
    assert decode_pod_devices(ann["hami.io/Ascend910B3-devices-to-allocate"]) == ((),)
    [[chosen]] = decode_pod_devices(ann["hami.io/Ascend910B3-devices-allocated"])
    assert chosen == ContainerDevice(
        uuid=chosen.uuid, vendor="Ascend910B3", memory_mib=16384, cores_pct=0
    )
    assert ann["hami.io/bind-phase"] == "success"
    # what HAMi's Ascend device plugin reads in Allocate, written at bind
    assert json.loads(ann["huawei.com/Ascend910B3"]) == [
        {"UUID": chosen.uuid, "temp": "vir05_1c_16g", "memory": 16384}
    ]
    assert abs(int(ann["predicate-time"]) - time.time()) < 60  # unix seconds, as HAMi
    env = out.envs["main"]
    assert env["ASCEND_VNPU_SPECS"] == "vir05_1c_16g"
    # hami simulate knows only the inventory, not the physical ids: the UUID stands in.
    assert env["ASCEND_VISIBLE_DEVICES"] == chosen.uuid


def test_four_slices_share_a_chip_and_a_whole_chip_goes_elsewhere(npu_smi):
    p = pipeline(discovered_node())
    for i in range(4):
        assert p.submit(ascend_pod(f"s{i}", count=1, memory=16384)).scheduled
    whole = p.submit(ascend_pod("train", count=1))
    assert whole.scheduled
    [[w]] = whole.allocation.devices["Ascend910B3"]
    assert (w.memory_mib, w.cores_pct) == (65536, 100)
    placed = {
        decode_pod_devices(
            p.cluster.get_pod("default", f"s{i}")["metadata"]["annotations"][
                "hami.io/Ascend910B3-devices-allocated"
            ]
        )[0][0].uuid
        for i in range(4)
    }
    assert w.uuid not in placed
    assert "ASCEND_VNPU_SPECS" not in whole.envs["main"]


def test_hami_registered_nodes_serve_slices_and_whole_chips(no_npu_smi):
    p = pipeline(ascend_node("hami-node", "Ascend910B3", HAMI_910B3))
    assert p.submit(ascend_pod("whole", count=1)).scheduled  # devcore 20 reads as 100 %
    for i in range(2):
        assert p.submit(ascend_pod(f"s{i}", count=1, memory=32768)).node == "hami-node"
    full = p.submit(ascend_pod("s3", count=1, memory=1000))
    assert not full.scheduled
    assert full.filter.failed == {"hami-node": "2/2 CardInsufficientMemory"}


def test_910c_request_of_one_takes_a_module(npu_smi):
    npu_smi.layout = "a3"
    p = pipeline(discovered_node("a3-node", "a3"))
    out = p.submit(ascend_pod("pair", model="Ascend910C", count=1))
    assert out.scheduled
    pair = out.allocation.devices["Ascend910C"][0]
    assert len(pair) == 2
    # the inventory has no physical ids, so the chips' UUIDs stand in (module 0 first)
    uuids = [d.uuid for d in discover.discover(settings(section(plugin)), FakeNpuSmi("a3"))]
    assert out.envs["main"]["ASCEND_VISIBLE_DEVICES"] == ",".join(uuids[:2])
    second = p.submit(ascend_pod("pair2", model="Ascend910C", count=1))
    assert second.envs["main"]["ASCEND_VISIBLE_DEVICES"] == ",".join(uuids[2:])
    odd = p.submit(ascend_pod("odd", model="Ascend910C", count=3))
    assert "multiple of 2" in odd.denied


def test_denials_name_the_cause(no_npu_smi):
    p = pipeline(ascend_node("hami-node", "Ascend910B3", HAMI_910B3))
    out = p.submit(ascend_pod("big", count=1, memory=70000))
    assert "70000 MiB is more than one Ascend910B3 chip holds" in out.denied


def test_ascend_pods_never_land_on_nvidia_nodes_and_back(no_npu_smi):
    p = pipeline(
        ascend_node("npu-node", "Ascend910B3", HAMI_910B3),
        nvidia_node("gpu-node", [gpu("GPU-A")]),
        backends=("ascend", "nvidia"),
    )
    npu = p.submit(ascend_pod("npu", count=1, memory=1000))
    assert npu.node == "npu-node"
    assert npu.filter.failed["gpu-node"].startswith("NodeInsufficientDevice")
    gpu_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu", "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        },
    }
    out = p.submit(gpu_pod)
    assert out.node == "gpu-node"
    assert out.envs["main"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-A"


def test_quota_on_ascend_memory_is_enforced(no_npu_smi):
    p = pipeline(ascend_node("hami-node", "Ascend910B3", HAMI_910B3))
    p.cluster.add_quota(
        {
            "metadata": {"name": "npu", "namespace": "default"},
            "spec": {"hard": {"limits.huawei.com/Ascend910B3-memory": "40000"}},
        }
    )
    assert p.submit(ascend_pod("a", count=1, memory=32768)).scheduled
    denied = p.submit(ascend_pod("b", count=1, memory=10000))
    # the quota is charged the template's memory, not the stated one
    assert "limits.huawei.com/Ascend910B3-memory 40000, used 32768, this pod 16384" in denied.denied
