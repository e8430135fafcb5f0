"""Cambricon pods through the whole pipeline on a ``MemoryCluster``: webhook -> filter ->
bind -> allocate, on nodes carrying ``hami.io/node-mlu-register`` (the annotation HAMi's
Cambricon device plugin writes), next to an NVIDIA node."""

from __future__ import annotations

import pytest
from hami_cambricon import discover

from hami_core.model import ContainerDevice
from hami_core.protocol.devicelist import decode_pod_devices
from tests.builders import container as gpu_container
from tests.builders import gpu, pipeline
from tests.builders import node as gpu_node

from .helpers import X8_SAMPLE, config, container, node, pod

#: The cards of the X8 sample, as the device plugin registers them.
X8_DEVICES = discover.discover(config(), runner=lambda argv: X8_SAMPLE.read_text()) or []
X8_UUIDS = [d.uuid for d in X8_DEVICES]

#: HAMi's protocol document, verbatim: two MLU370-X4 in the legacy 9-field form; the first
#: card is unhealthy.
HAMI_DOC_REGISTER = (
    "MLU-45013011-2257-0000-0000-000000000000,10,23308,0,MLU-MLU370-X4,0,false,0,hami-core:"
    "MLU-54043011-2257-0000-0000-000000000000,10,23308,0,MLU-MLU370-X4,0,true,1,hami-core:"
)

#: Allocate takes card indices from the node's devices; cnmon is only run by discovery.
CONFIG = {"cambricon": {"cnmonCommand": f"cat {X8_SAMPLE}"}}


def mixed():
    return pipeline(
        node("mlu-1", X8_DEVICES),
        gpu_node("gpu-1", [gpu("GPU-A"), gpu("GPU-B", index=1)]),
        config=CONFIG,
    )


def test_a_slice_is_admitted_placed_annotated_and_allocated():
    p = mixed()
    out = p.submit(pod("infer", container("main", vmlu=1, vmemory=20, vcore=30)))
    assert out.scheduled and out.node == "mlu-1", out
    stored = p.cluster.get_pod("default", "infer")
    assert stored["spec"]["schedulerName"] == "hami-scheduler"
    assert stored["spec"]["containers"][0]["resources"]["requests"] == {
        "cambricon.com/vmlu": "1",
        "cambricon.com/mlu.smlu.vmemory": "20",
        "cambricon.com/mlu.smlu.vcore": "30",
    }
    ann = stored["metadata"]["annotations"]
    (slice_,) = out.allocation.devices["MLU"][0]
    assert slice_ == ContainerDevice(uuid=slice_.uuid, vendor="MLU", memory_mib=5120, cores_pct=30)
    assert ann["hami.io/cambricon-mlu-devices-allocated"] == f"{slice_.uuid},MLU,5120,30:;"
    assert decode_pod_devices(ann["hami.io/cambricon-mlu-devices-to-allocate"]) == ((),)
    assert ann["hami.io/bind-phase"] == "success"
    index = X8_UUIDS.index(slice_.uuid)
    assert out.envs["main"] == {"CAMBRICON_VISIBLE_DEVICES": str(index)}


def test_pods_never_land_on_another_vendors_devices():
    p = mixed()
    for i in range(3):
        out = p.submit(pod(f"mlu-{i}", container(vmlu=1, vmemory=8)))
        assert out.node == "mlu-1" and set(out.allocation.devices) == {"MLU"}
    out = p.submit(pod("cuda", gpu_container(gpu=1, gpumem=1000)))
    assert out.node == "gpu-1" and set(out.allocation.devices) == {"NVIDIA"}
    assert (
        "hami.io/cambricon-mlu-devices-allocated"
        not in p.cluster.get_pod("default", "cuda")["metadata"]["annotations"]
    )


def test_whole_cards_add_up_and_then_run_out():
    p = mixed()
    first = p.submit(pod("a", container("train", vmlu=2)))
    second = p.submit(pod("b", container("train", vmlu=2)))
    assert first.node == second.node == "mlu-1"
    taken = {d.uuid for c in (first, second) for d in c.allocation.devices["MLU"][0]}
    assert taken == set(X8_UUIDS)
    assert second.envs["train"]["CAMBRICON_VISIBLE_DEVICES"].count(",") == 1
    third = p.submit(pod("c", container(vmlu=1)))
    assert not third.scheduled
    assert third.filter.failed["mlu-1"] == "4/4 CardInsufficientMemory"
    assert third.filter.failed["gpu-1"].startswith("NodeInsufficientDevice")


def test_a_slice_too_big_for_any_card_is_explained():
    p = mixed()
    out = p.submit(pod("big", container(vmlu=1, vmemory=97)))
    assert not out.scheduled
    assert out.filter.failed["mlu-1"] == "4/4 CardInsufficientMemory"


def test_hamis_documented_legacy_inventory_is_read():
    p = pipeline(node("mlu-legacy", register_value=HAMI_DOC_REGISTER), config=CONFIG)
    out = p.submit(pod("p", container(vmlu=1, vmemory=91)))
    assert out.node == "mlu-legacy"
    assert out.allocation.devices["MLU"] == (
        (
            ContainerDevice(
                uuid="MLU-54043011-2257-0000-0000-000000000000",
                vendor="MLU",
                memory_mib=23296,
                cores_pct=100,
            ),
        ),
    )
    # Allocate takes the card index from the node's devices (HAMi's inventory: index 1)
    assert out.envs["main"] == {"CAMBRICON_VISIBLE_DEVICES": "1"}
    too_big = p.submit(pod("q", container(vmlu=1, vmemory=92)))
    assert too_big.filter.failed == {"mlu-legacy": "1/2 CardInsufficientMemory, 1/2 CardNotHealth"}


def test_init_and_app_containers_share_a_card_by_the_max_of_init_and_sum_of_apps():
    p = pipeline(node("mlu-1", X8_DEVICES[:1]), config=CONFIG)
    out = p.submit(
        pod(
            "p",
            container("a", vmlu=1, vmemory=16, vcore=20),
            container("b", vmlu=1, vmemory=16, vcore=20),
            init=[container("init", vmlu=1, vmemory=40, vcore=10)],
        )
    )
    assert out.scheduled
    ann = p.cluster.get_pod("default", "p")["metadata"]["annotations"]
    u = X8_UUIDS[0]
    assert ann["hami.io/cambricon-mlu-devices-allocated"] == (
        f"{u},MLU,10240,10:;{u},MLU,4096,20:;{u},MLU,4096,20:;"
    )
    # 40 units (the init container) are held: 56 of 96 units are left
    assert p.submit(pod("q", container(vmlu=1, vmemory=56, vcore=0))).scheduled
    assert not p.submit(pod("r", container(vmlu=1, vmemory=1, vcore=0))).scheduled


def test_model_qualified_seed_example():
    """The handbook's seed example: cambricon.com/mlu370.smlu.vmemory / .vcore."""
    p = mixed()
    c = container(
        "serving",
        vmlu=1,
        res={"cambricon.com/mlu370.smlu.vmemory": 20, "cambricon.com/mlu370.smlu.vcore": 10},
    )
    out = p.submit(pod("mlu-inference", c))
    assert out.node == "mlu-1"
    assert out.allocation.devices["MLU"][0][0].memory_mib == 5120
    limits = p.cluster.get_pod("default", "mlu-inference")["spec"]["containers"][0]["resources"]
    assert limits["requests"]["cambricon.com/mlu370.smlu.vmemory"] == "20"
    other = p.submit(pod("mlu590", container(vmlu=1, res={"cambricon.com/mlu590.smlu.vmemory": 4})))
    assert other.filter.failed["mlu-1"] == "4/4 CardTypeMismatch"


@pytest.mark.parametrize(
    ("c", "text"),
    [
        (container("x", vmlu=1, vmemory="16Gi"), "'16Gi'"),
        (container("x", vmlu=2, vmemory=20), "exactly one MLU per container"),
        (container("x", vmlu=1, vcore=150), "cambricon.com/mlu.smlu.vcore"),
    ],
)
def test_invalid_requests_are_denied_at_admission(c, text):
    out = mixed().submit(pod("bad", c))
    assert out.denied and text in out.denied


def test_count_quota_is_enforced():
    p = mixed()
    p.cluster.add_quota(
        {
            "metadata": {"name": "mlu-quota", "namespace": "team"},
            "spec": {"hard": {"limits.cambricon.com/vmlu": "1"}},
        }
    )
    assert p.submit(pod("one", container(vmlu=1, vmemory=4), namespace="team")).scheduled
    out = p.submit(pod("two", container(vmlu=1, vmemory=4), namespace="team"))
    assert out.denied and "limits.cambricon.com/vmlu 1" in out.denied


def test_memory_quota_is_in_units_of_256_mib():
    p = mixed()
    p.cluster.add_quota(
        {
            "metadata": {"name": "mlu-mem", "namespace": "team"},
            "spec": {"hard": {"limits.cambricon.com/mlu.smlu.vmemory": "40"}},  # 10240 MiB
        }
    )
    assert p.submit(pod("a", container(vmlu=1, vmemory=20), namespace="team")).scheduled
    assert p.submit(pod("b", container(vmlu=1, vmemory=20), namespace="team")).scheduled
    out = p.submit(pod("c", container(vmlu=1, vmemory=1), namespace="team"))
    assert out.denied and "mlu-mem" in out.denied


def test_whole_card_request_against_a_memory_quota():
    """``pkg/device/cambricon/device_test.go::TestDevices_Fit_ResourceQuotaWholeCardRequest``:
    an MLU request without memory (the whole card) in a namespace whose
    ``limits.cambricon.com/mlu.smlu.vmemory`` is 50 (12800 MiB) is refused with
    ``ResourceQuotaNotFit``: the whole card's memory counts against the quota. A tenant
    cannot slip past the quota by leaving the memory out; a slice within it still fits."""
    p = mixed()
    p.cluster.add_quota(
        {
            "metadata": {"name": "mlu-quota", "namespace": "ns"},
            "spec": {"hard": {"limits.cambricon.com/mlu.smlu.vmemory": "50"}},
        }
    )
    whole = p.submit(pod("whole", container(vmlu=1, vcore=10), namespace="ns"))
    assert whole.node is None
    assert whole.filter.failed["mlu-1"].startswith("ResourceQuotaNotFit")
    assert p.submit(pod("slice", container(vmlu=1, vmemory=40, vcore=10), namespace="ns")).scheduled


def test_add_resource_usage():
    """``device_test.go::TestDevices_AddResourceUsage``: an MLU using 2000 MiB and 15 %
    that takes a container of 1024 MiB and 50 % holds one more sharer, 3024 MiB, 65 %."""
    from tests.backends.support import usage_of

    from .helpers import mlu

    assert usage_of("MLU", mlu("dev-0"), (2000, 15)) == (1, 2000, 15)
    assert usage_of("MLU", mlu("dev-0"), (2000, 15), (1024, 50)) == (2, 3024, 65)
