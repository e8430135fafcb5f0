"""Kunlunxin pods through the whole pipeline on a ``MemoryCluster``: webhook -> filter ->
bind -> allocate, on nodes carrying ``hami.io/node-register-xpu`` (the annotation HAMi's
vXPU device plugin writes), next to an NVIDIA node."""

from __future__ import annotations

import pytest
from hami_kunlun import discover

from hami_core.model import ContainerDevice
from hami_core.protocol.devicelist import decode_pod_devices
from tests.builders import container as gpu_container
from tests.builders import gpu, pipeline
from tests.builders import node as gpu_node

from .helpers import P800_SAMPLE, REGISTER, config, container, node, pod

P800 = discover.discover(config(), runner=lambda argv: P800_SAMPLE.read_text()) or []
IDS = [d.uuid for d in P800]

#: On the node, allocate maps device ids to DevIDs by running xpu-smi: here, the sample.
CONFIG = {"kunlun": {"xpuSmiCommand": f"cat {P800_SAMPLE}"}}

#: HAMi's own test inventory (``pkg/device/kunlun/vdevice_test.go``), verbatim.
HAMI_TEST_REGISTER = (
    '[{"id":"xpu-0","index":0,"count":1,"devmem":98304,"devcore":100,"type":"XPU","health":true}]'
)


def mixed(**config):
    return pipeline(
        node("xpu-oam", P800),
        gpu_node("gpu-1", [gpu("GPU-A"), gpu("GPU-B", index=1)]),
        config={**CONFIG, **config},
    )


def test_a_vxpu_is_admitted_trimmed_placed_annotated_and_allocated():
    p = mixed()
    out = p.submit(pod("infer", container("main", vxpu=1, vmem=30000)))
    assert out.node == "xpu-oam", out
    stored = p.cluster.get_pod("default", "infer")
    assert stored["spec"]["schedulerName"] == "hami-scheduler"
    assert stored["spec"]["containers"][0]["resources"]["limits"] == {
        "kunlunxin.com/vxpu": "1",
        "kunlunxin.com/vxpu-memory": "49152",
    }
    (slice_,) = out.allocation.devices["XPU"][0]
    assert slice_ == ContainerDevice(uuid=slice_.uuid, vendor="XPU", memory_mib=49152, cores_pct=50)
    ann = stored["metadata"]["annotations"]
    assert ann["hami.io/xpu-devices-allocated"] == f"{slice_.uuid},XPU,49152,50:;"
    assert decode_pod_devices(ann["hami.io/xpu-devices-to-allocate"]) == ((),)  # answered
    assert ann["hami.io/bind-phase"] == "success"
    assert out.envs["main"] == {
        "CXPU_VISIBLE_DEVICES": str(IDS.index(slice_.uuid)),
        "CXPU_CONTAINER_MEMORY_LIMIT": str(49152 * 2**20),
    }


def test_whole_card_groups_fill_the_oam_module():
    p = mixed()
    first = p.submit(pod("a", container("t", xpu=4)))
    second = p.submit(pod("b", container("t", xpu=4)))
    assert [d.uuid for d in first.allocation.devices["XPU"][0]] == IDS[:4]
    assert [d.uuid for d in second.allocation.devices["XPU"][0]] == IDS[4:]
    assert first.envs["t"] == {"CXPU_VISIBLE_DEVICES": "0,1,2,3"}
    assert second.envs["t"] == {"CXPU_VISIBLE_DEVICES": "4,5,6,7"}
    third = p.submit(pod("c", container(xpu=1)))
    assert third.filter.failed["xpu-oam"] == "8/8 CardInsufficientMemory"


def test_a_pair_keeps_the_other_group_whole():
    p = mixed()
    p.submit(pod("one", container(xpu=1)))  # takes XPU 0
    pair = p.submit(pod("pair", container(xpu=2)))
    # group 0 has three free (1, 2, 3), group 1 four: the tighter group 0
    assert [d.uuid for d in pair.allocation.devices["XPU"][0]] == IDS[1:3]
    quad = p.submit(pod("quad", container(xpu=4)))
    assert [d.uuid for d in quad.allocation.devices["XPU"][0]] == IDS[4:]


def test_pods_never_land_on_another_vendors_devices():
    p = mixed()
    for i in range(3):
        out = p.submit(pod(f"x{i}", container(vxpu=1, vmem=1000)))
        assert out.node == "xpu-oam" and set(out.allocation.devices) == {"XPU"}
    out = p.submit(pod("cuda", gpu_container(gpu=1)))
    assert out.node == "gpu-1" and set(out.allocation.devices) == {"NVIDIA"}


def test_quarters_pack_with_binpack_and_halves_go_elsewhere():
    p = mixed(defaultSchedulerPolicy={"gpuSchedulerPolicy": "binpack"})
    for i in range(4):
        out = p.submit(pod(f"q{i}", container(vxpu=1, vmem=20000)))
        assert out.allocation.devices["XPU"][0][0].uuid == IDS[0]
    half = p.submit(pod("half", container(vxpu=1, vmem=40000)))
    assert half.allocation.devices["XPU"][0][0].uuid == IDS[1]
    quarter = p.submit(pod("q4", container(vxpu=1, vmem=1)))
    # card 0 is full (4 quarters); card 1 is cut in halves: the quarter goes to card 2
    assert quarter.allocation.devices["XPU"][0][0].uuid == IDS[2]


def test_hamis_test_inventory_is_read():
    p = pipeline(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "xpu-hami", "annotations": {REGISTER: HAMI_TEST_REGISTER}},
            "status": {"allocatable": {"kunlunxin.com/vxpu": "1"}},
        },
        config=CONFIG,
    )
    out = p.submit(pod("a", container(vxpu=1, vmem=24576)))
    assert out.allocation.devices["XPU"] == (
        (ContainerDevice(uuid="xpu-0", vendor="XPU", memory_mib=24576, cores_pct=25),),
    )
    second = p.submit(pod("b", container(vxpu=1, vmem=24576)))
    assert second.filter.failed == {"xpu-hami": "1/1 CardTimeSlicingExhausted"}


@pytest.mark.parametrize(
    ("c", "text"),
    [
        (container("x", xpu=1, vmem=4000), "asks for whole cards"),
        (container("x", vxpu=1, vmem="16Gi"), "'16Gi'"),
    ],
)
def test_invalid_requests_are_denied_at_admission(c, text):
    out = mixed().submit(pod("bad", c))
    assert out.denied and text in out.denied


def test_memory_quota_charges_the_trimmed_size():
    p = mixed()
    p.cluster.add_quota(
        {
            "metadata": {"name": "xpu-mem", "namespace": "team"},
            "spec": {"hard": {"limits.kunlunxin.com/vxpu-memory": "50000"}},
        }
    )
    assert p.submit(pod("a", container(vxpu=1, vmem=30000), namespace="team")).scheduled
    out = p.submit(pod("b", container(vxpu=1, vmem=1), namespace="team"))
    assert out.denied and "used 49152, this pod 24576" in out.denied
