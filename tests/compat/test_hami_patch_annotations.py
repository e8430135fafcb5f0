"""``Test_PatchAnnotations`` of HAMi 2.10's vendors: the pod annotations written at bind,
with HAMi's expected strings (issue #15 item 11)."""

from __future__ import annotations

import pytest

from hami_core.model import ContainerDevice, DeviceInfo, NodeInfo
from hami_core.plugin import BackendManager
from hami_core.protocol import encode_pod_devices
from tests.builders import pipeline

MANAGER = BackendManager.from_entry_points(disabled=[])
POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}}


def _mlu_node():
    dev = DeviceInfo(
        uuid="device-0",
        vendor="MLU",
        model="MLU370",
        index=0,
        split_count=10,
        memory_mib=512000,
        cores_pct=100,
    )
    return NodeInfo(name="n", devices=(dev,))


SLICE = ContainerDevice(uuid="device-0", vendor="MLU", memory_mib=256000, cores_pct=1)


@pytest.mark.parametrize(
    ("case", "devices", "device_list"),
    [
        ("exist device", ((SLICE,),), "device-0,MLU,256000,1:;"),
        ("leading container without device", ((), (SLICE,)), ";device-0,MLU,256000,1:;"),
    ],
)
def test_cambricon_patch_annotations(case, devices, device_list):
    """``pkg/device/cambricon/device_test.go::Test_PatchAnnotations``, the case named:
    ``CAMBRICON_DSMLU_ASSIGNED: "false"``, ``CAMBRICON_DSMLU_PROFILE: "0_1_1000"`` (index
    0, 1 % cores, 256000 MiB / 256) and the device lists."""
    extra = MANAGER.bind_annotations("MLU", POD, _mlu_node(), devices)
    assert extra == {"CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "0_1_1000"}, (
        case
    )
    assert encode_pod_devices(devices) == device_list


def test_cambricon_patch_annotations_no_device():
    """``Test_PatchAnnotations`` "no device": nothing written."""
    assert MANAGER.bind_annotations("MLU", POD, _mlu_node(), ((),)) == {}


def test_a_bound_mlu_pod_carries_the_dsmlu_profile():
    """Through admission, filter and bind: the profile names the card's index, the
    cores and the memory units the pod got (20 units, 30 %)."""
    from tests.backends.cambricon.helpers import container, mlu, node, pod

    card = mlu("MLU-x", index=3)
    p = pipeline(node("mlu-1", [card]))
    out = p.submit(pod("p", container(vmlu=1, vmemory=20, vcore=30)))
    assert out.scheduled, out
    ann = p.cluster.get_pod("default", "p")["metadata"]["annotations"]
    assert ann["CAMBRICON_DSMLU_PROFILE"] == "3_30_20"
    assert ann["CAMBRICON_DSMLU_ASSIGNED"] == "false"


@pytest.mark.parametrize(
    ("source", "vendor"),
    [("biren", "Biren"), ("vastai", "Vastai"), ("hygon", "DCU"), ("amd", "AMD")],
)
def test_device_lists_of_a_one_device_pod(source, vendor):
    """``pkg/device/<source>/device_test.go::Test_PatchAnnotations`` "exist device" (AMD:
    its one case, ``EncodePodSingleDevice``): both annotations carry
    ``test1,<vendor>,2048,1:;``."""
    devices = ((ContainerDevice(uuid="test1", vendor=vendor, memory_mib=2048, cores_pct=1),),)
    assert encode_pod_devices(devices) == f"test1,{vendor},2048,1:;"
    dev = DeviceInfo(
        uuid="test1",
        vendor=vendor,
        model=vendor,
        index=0,
        split_count=10,
        memory_mib=4096,
        cores_pct=100,
    )
    extra = MANAGER.bind_annotations(vendor, POD, NodeInfo(name="n", devices=(dev,)), devices)
    if source != "amd":  # HAMi's DeepEqual: nothing but the two device lists
        assert extra == {}


def test_iluvatar_device_list():
    """``pkg/device/iluvatar/device_test.go::TestPatchAnnotations`` "With devices":
    ``k8s-gpu-iluvatar-0,MR-V100,0,0:;``."""
    devices = (
        (ContainerDevice(uuid="k8s-gpu-iluvatar-0", vendor="MR-V100", memory_mib=0, cores_pct=0),),
    )
    assert encode_pod_devices(devices) == "k8s-gpu-iluvatar-0,MR-V100,0,0:;"


def test_mthreads_patch_annotations():
    """``pkg/device/mthreads/device_test.go::Test_PatchAnnotations`` "exist device": the
    device list ``test1,Mthreads,1000,1:;`` and ``mthreads.com/gpu-index: "0"``;
    ``mthreads.com/predicate-node`` names the node bound to (HAMi's test pod has none, so
    its value there is empty)."""
    dev = DeviceInfo(
        uuid="test1",
        vendor="Mthreads",
        model="MTT S4000",
        index=0,
        split_count=10,
        memory_mib=49152,
        cores_pct=16,
    )
    devices = ((ContainerDevice(uuid="test1", vendor="Mthreads", memory_mib=1000, cores_pct=1),),)
    extra = MANAGER.bind_annotations(
        "Mthreads", POD, NodeInfo(name="node-1", devices=(dev,)), devices
    )
    assert encode_pod_devices(devices) == "test1,Mthreads,1000,1:;"
    assert extra["mthreads.com/gpu-index"] == "0"
    assert extra["mthreads.com/predicate-node"] == "node-1"
