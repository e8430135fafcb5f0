"""NVIDIA fit checks beyond the issue's cases: filters and their aliases, cordon,
health, NUMA binding, topology-aware and binpack choices."""

import pytest
from hami_nvidia.fit import fit, type_matches

from hami_core.model import DevicePolicy, DeviceRequest, DeviceUsage, NodeInfo, ReasonCode
from tests.builders import gpu


def usage(*devices, cordoned=(), used=None):
    used = used or {}
    return tuple(
        DeviceUsage(device=d, cordoned=d.uuid in cordoned, **used.get(d.uuid, {})) for d in devices
    )


def pod(**ann):
    return {"metadata": {"name": "p", "annotations": ann}}


REQ = DeviceRequest(vendor="NVIDIA", count=1, memory_mib=1000)
TWO = (gpu("GPU-0", index=0), gpu("GPU-1", index=1))


@pytest.mark.parametrize(
    ("model", "token", "matches"),
    [
        ("NVIDIA A10", "A10", True),
        ("NVIDIA A100-SXM4-80GB", "A10", False),
        ("NVIDIA A100-SXM4-80GB", "a100", True),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4", True),
        ("NVIDIA-Tesla V100-PCIE-32GB", "V100", True),
        ("NVIDIA-Tesla V100-PCIE-32GB", "Tesla", True),
        ("NVIDIA H100 80GB HBM3", "H100", True),
        ("NVIDIA H100 80GB HBM3", "H10", False),
    ],
)
def test_type_tokens_match_whole_words(model, token, matches):
    assert type_matches(model, token) is matches


@pytest.mark.parametrize(
    ("annotations", "chosen", "reason"),
    [
        ({"nvidia.com/use-gpuuuid": "GPU-1"}, "GPU-1", ReasonCode.CARD_UUID_MISMATCH),
        ({"hami.io/gpu-uuid-include": "GPU-1"}, "GPU-1", ReasonCode.CARD_UUID_MISMATCH),
        ({"hami.io/gpu-uuid-white-list": "GPU-1"}, "GPU-1", ReasonCode.CARD_UUID_MISMATCH),
        ({"nvidia.com/nouse-gpuuuid": "GPU-0"}, "GPU-1", ReasonCode.CARD_UUID_MISMATCH),
        ({"hami.io/gpu-uuid-exclude": "GPU-0"}, "GPU-1", ReasonCode.CARD_UUID_MISMATCH),
        ({"hami.io/gpu-type": "T4"}, "GPU-1", ReasonCode.CARD_TYPE_MISMATCH),
        ({"nvidia.com/nouse-gputype": "A100"}, "GPU-1", ReasonCode.CARD_TYPE_MISMATCH),
    ],
)
def test_filters_and_handbook_aliases(annotations, chosen, reason):
    devices = (
        gpu("GPU-0", index=0, model="NVIDIA A100-PCIE-40GB"),
        gpu("GPU-1", index=1, model="NVIDIA Tesla T4"),
    )
    result = fit(
        REQ,
        NodeInfo(name="n", devices=devices),
        usage(*devices),
        pod(**annotations),
        DevicePolicy.SPREAD,
    )
    assert [d.uuid for d in result.devices] == [chosen]
    two = DeviceRequest(vendor="NVIDIA", count=2, memory_mib=1000)
    miss = fit(
        two,
        NodeInfo(name="n", devices=devices),
        usage(*devices),
        pod(**annotations),
        DevicePolicy.SPREAD,
    )
    assert not miss.fits and reason in miss.device_reasons.values()
    assert miss.node_reason is ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST
    assert miss.summary(2) == f"AllocatedCardsInsufficientRequest, 1/2 {reason.value}"


def test_cordoned_and_unhealthy_devices_are_skipped_with_reasons():
    devices = (gpu("GPU-0", index=0), gpu("GPU-1", index=1, healthy=False), gpu("GPU-2", index=2))
    result = fit(
        REQ,
        NodeInfo(name="n", devices=devices),
        usage(*devices, cordoned={"GPU-0"}),
        pod(),
        DevicePolicy.SPREAD,
    )
    assert [d.uuid for d in result.devices] == ["GPU-2"]
    three = DeviceRequest(vendor="NVIDIA", count=3, memory_mib=1000)
    miss = fit(
        three,
        NodeInfo(name="n", devices=devices),
        usage(*devices, cordoned={"GPU-0"}),
        pod(),
        DevicePolicy.SPREAD,
    )
    assert miss.device_reasons == {
        "GPU-0": ReasonCode.CARD_CORDONED,
        "GPU-1": ReasonCode.CARD_NOT_HEALTH,
    }


def test_numa_bind_keeps_a_container_on_one_numa_node():
    devices = (
        gpu("GPU-0", index=0, numa=0),
        gpu("GPU-1", index=1, numa=1),
        gpu("GPU-2", index=2, numa=1),
    )
    two = DeviceRequest(vendor="NVIDIA", count=2, memory_mib=1000)
    node = NodeInfo(name="n", devices=devices)
    bound = fit(
        two, node, usage(*devices), pod(**{"nvidia.com/numa-bind": "true"}), DevicePolicy.SPREAD
    )
    assert [d.uuid for d in bound.devices] == ["GPU-1", "GPU-2"]
    full = usage(*devices, used={"GPU-2": {"used_count": 10}})
    miss = fit(two, node, full, pod(**{"nvidia.com/numa-bind": "true"}), DevicePolicy.SPREAD)
    assert miss.node_reason is ReasonCode.NUMA_NOT_FIT
    # without the annotation the numa policy is a preference, not a requirement
    assert fit(two, node, full, pod(), DevicePolicy.NUMA).fits


def test_topology_aware_picks_the_best_linked_set_and_keeps_it_for_pairs():
    devices = tuple(gpu(f"GPU-{i}", index=i) for i in range(4))
    scores = {
        "GPU-0": {"GPU-1": 200, "GPU-2": 20, "GPU-3": 20},
        "GPU-1": {"GPU-0": 200, "GPU-2": 20, "GPU-3": 20},
        "GPU-2": {"GPU-3": 100, "GPU-0": 20, "GPU-1": 20},
        "GPU-3": {"GPU-2": 100, "GPU-0": 20, "GPU-1": 20},
    }
    node = NodeInfo(name="n", devices=devices, link_scores=scores)
    pair = fit(
        DeviceRequest(vendor="NVIDIA", count=2, memory_mib=1000),
        node,
        usage(*devices),
        pod(),
        DevicePolicy.TOPOLOGY_AWARE,
    )
    assert [d.uuid for d in pair.devices] == ["GPU-0", "GPU-1"]
    single = fit(REQ, node, usage(*devices), pod(), DevicePolicy.TOPOLOGY_AWARE)
    assert [d.uuid for d in single.devices] == ["GPU-2"]  # least linked: keeps the NVLink pair free


def test_binpack_fills_the_busiest_device_and_spread_the_emptiest():
    used = {"GPU-1": {"used_count": 1, "used_memory_mib": 4000}}
    node = NodeInfo(name="n", devices=TWO)
    assert (
        fit(REQ, node, usage(*TWO, used=used), pod(), DevicePolicy.BINPACK).devices[0].uuid
        == "GPU-1"
    )
    assert (
        fit(REQ, node, usage(*TWO, used=used), pod(), DevicePolicy.SPREAD).devices[0].uuid
        == "GPU-0"
    )


def test_memory_percentage_too_small_for_a_device_is_insufficient_memory():
    tiny = (gpu("GPU-0", memory_mib=50),)
    req = DeviceRequest(vendor="NVIDIA", count=1, memory_pct=1)
    result = fit(req, NodeInfo(name="n", devices=tiny), usage(*tiny), pod(), DevicePolicy.SPREAD)
    assert result.device_reasons == {"GPU-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}
