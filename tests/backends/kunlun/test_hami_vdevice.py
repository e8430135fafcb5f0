"""HAMi 2.10 ``pkg/device/kunlun/vdevice_test.go`` and ``device_test.go`` cases with
HAMi's expected values (issue #15 item 11): the vXPU partition rule (``FitVXPU``), the
topology-aware vXPU sets (``graghSelect`` with ``FitVXPU``), the inventory, the device
lists written at bind and the usage a vXPU adds."""

from __future__ import annotations

import datetime as dt

import pytest

from hami_core.facts.nodes import read_node
from hami_core.model import DevicePolicy, DeviceUsage, NodeInfo, ReasonCode
from hami_core.plugin import BackendManager
from tests.backends.support import usage_of
from tests.builders import container as gpu_container
from tests.builders import pod as gpu_pod

from .helpers import P800_MIB, REGISTER, config, container, pod, xpu
from .test_fit import place, uuids
from .test_pipeline import HAMI_TEST_REGISTER, mixed

VDEVICE = "pkg/device/kunlun/vdevice_test.go"


def _usage(index, used=0, usedmem=0, *, healthy=True, total=P800_MIB):
    device = xpu(f"xpu-{index}", index=index, memory_mib=total, split=8, healthy=healthy)
    return DeviceUsage(
        device=device,
        used_count=used,
        used_memory_mib=usedmem,
        used_cores_pct=usedmem * 100 // P800_MIB,
    )


@pytest.mark.parametrize(
    ("case", "usage", "memory", "fits"),
    [
        ("would exceed total memory", _usage(0, 1, 90000), 20000, False),
        ("idle device always fits", _usage(0), 24576, True),
        ("shared device with matching average memory", _usage(0, 2, 49152), 24576, True),
        ("shared device with mismatched average memory", _usage(0, 1, 49152), 24576, False),
        ("unhealthy device is rejected", _usage(0, healthy=False), 24576, False),
    ],
)
def test_fit_vxpu_direct(case, usage, memory, fits):
    """``vdevice_test.go::Test_FitVXPU_direct``, the case named (HAMi's 20000 MiB is
    trimmed to the 24576 MiB quarter first here, as the webhook writes it; it still does
    not fit the 8304 MiB left)."""
    result = place(container(vxpu=1, vmem=memory), [usage.device], usage=(usage,))
    assert result.fits is fits, case


def test_a_mismatched_partition_is_card_type_mismatch():
    """``Test_FitVXPU_direct`` "shared device with mismatched average memory": the reason
    a half-cut XPU gives a quarter (the card's partition type differs)."""
    half = _usage(0, 1, 49152)
    result = place(container(vxpu=1, vmem=24576), [half.device], usage=(half,))
    assert result.device_reasons == {"xpu-0": ReasonCode.CARD_TYPE_MISMATCH}


def _eight(*held):
    """Eight P800 XPUs; ``held`` maps index -> (vXPUs, MiB) already there."""
    spec = dict(held)
    return tuple(_usage(i, *spec.get(i, (0, 0))) for i in range(8))


@pytest.mark.parametrize(
    ("case", "usage", "count", "want"),
    [
        ("full allocate with unused devices", _eight(), 8, [0, 1, 2, 3, 4, 5, 6, 7]),
        (
            "allocate with matching memory requirements",
            _eight((1, (1, 24576)), (3, (2, 49152)), (5, (1, 49152))),
            4,
            [0, 1, 2, 3],
        ),
        (
            "allocate with mixed memory requirements",
            _eight((1, (2, 49152)), (3, (1, 49152)), (5, (1, 24576))),
            4,
            [4, 5, 6, 7],
        ),
        (
            "no suitable devices due to memory mismatch",
            tuple(_usage(i, 1, 49152) for i in range(8)),
            2,
            [],
        ),
        (
            "allocate 2 cards with different memory requirements",
            _eight((1, (2, 49152)), (2, (1, 24576)), (3, (1, 49152)), (6, (1, 24576))),
            2,
            [0, 1],
        ),
    ],
)
def test_graph_select_vxpu(case, usage, count, want):
    """``device_test.go::Test_graphSelectVXPU``, the case named: quarter vXPUs on an
    8-XPU OAM node take HAMi's topology-aware set among the XPUs whose partition matches.
    With none matching HAMi answers ``NumaNotFit``; here every XPU says its own reason,
    ``CardTypeMismatch`` (see ``TestKunlunVDevices_Fit_NumaNotFit`` in
    docs/hami-go-tests.md)."""
    result = place(
        container(vxpu=count, vmem=24576), [u.device for u in usage], usage=usage, cfg=config()
    )
    assert sorted(d.device.index for d in usage if d.device.uuid in uuids(result)) == want, case
    if not want:
        assert set(result.device_reasons.values()) == {ReasonCode.CARD_TYPE_MISMATCH}


def test_graph_select_vxpu_one_card():
    """``Test_graphSelectVXPU`` "allocate 1 card with matching memory": HAMi takes XPU 0,
    which already holds a quarter; a single vXPU goes by the device policy here, and
    binpack takes the same XPU (the fullest matching one, lowest index)."""
    usage = _eight((0, (1, 24576)), (1, (1, 24576)), (2, (1, 49152)), (5, (1, 24576)))
    result = place(
        container(vxpu=1, vmem=24576),
        [u.device for u in usage],
        usage=usage,
        policy=DevicePolicy.BINPACK,
    )
    assert uuids(result) == ["xpu-0"]


MANAGER = BackendManager.from_entry_points(disabled=[])


def _read(annotations):
    node = {"metadata": {"name": "n", "annotations": annotations}}
    info = read_node(
        node, MANAGER.device_types(), now=dt.datetime.now(dt.UTC), reader=MANAGER.node_devices
    )
    return [(d.uuid, d.vendor, d.memory_mib) for d in info.devices], dict(info.unregistered)


def test_get_node_devices():
    """``vdevice_test.go::Test_GetNodeDevices``: "valid devices get vendor tagged" (one
    XPU, vendor XPU, 98304 MiB); "annotation missing" and "empty device list" (HAMi's
    errors) leave the node without XPUs; "invalid json" marks only the XPUs of that node
    unregistered, naming the annotation."""
    assert _read({REGISTER: HAMI_TEST_REGISTER}) == ([("xpu-0", "XPU", 98304)], {})
    assert _read({}) == ([], {})
    assert _read({REGISTER: "[]"}) == ([], {})
    devices, unregistered = _read({REGISTER: "not-json"})
    assert devices == [] and REGISTER in unregistered["XPU"]


def test_patch_annotations():
    """``vdevice_test.go::Test_KunlunVDevices_PatchAnnotations``: "with devices" writes
    both device lists (``hami.io/xpu-devices-to-allocate`` / ``-allocated``); "no devices
    for this type" writes neither (a GPU pod next to the XPU node)."""
    p = mixed()
    assert p.submit(pod("v", container("main", vxpu=1, vmem=24576))).node == "xpu-oam"
    ann = p.cluster.get_pod("default", "v")["metadata"]["annotations"]
    assert ann["hami.io/xpu-devices-allocated"].endswith(",XPU,24576,25:;")
    assert "hami.io/xpu-devices-to-allocate" in ann
    assert p.submit(gpu_pod("g", gpu_container(gpu=1))).node == "gpu-1"
    ann = p.cluster.get_pod("default", "g")["metadata"]["annotations"]
    assert not {"hami.io/xpu-devices-allocated", "hami.io/xpu-devices-to-allocate"} & set(ann)


def test_add_resource_usage():
    """``vdevice_test.go::Test_KunlunVDevices_AddResourceUsage``: an XPU holding one vXPU
    (10 %, 1000 MiB) that takes one more of 20 %, 2000 MiB holds 2 vXPUs, 30 %, 3000 MiB."""
    device = xpu("xpu-0", split=8)
    assert usage_of("XPU", device, (1000, 10)) == (1, 1000, 10)
    assert usage_of("XPU", device, (1000, 10), (2000, 20)) == (2, 3000, 30)


def test_score_node_of_a_vxpu_is_the_cores():
    """``vdevice_test.go::Test_KunlunVDevices_ScoreNode``: HAMi's vXPU device adds no node
    score of its own (0); here a vXPU placement gets the core's binpack/spread score (the
    backend's ``hami_score`` answers None for it)."""
    from hami_core.model import ContainerDevice, NodePolicy

    node = NodeInfo(name="n", devices=(xpu("xpu-0"),))
    usage = (DeviceUsage(device=node.devices[0]),)
    half = (ContainerDevice(uuid="xpu-0", vendor="XPU", memory_mib=49152, cores_pct=50),)
    assert MANAGER.score("XPU", node, usage, half, policy=NodePolicy.BINPACK) is None


def test_a_tenant_partition_cannot_split_another_tenants_card():
    """Tenant abuse: a pod asking a half (49152 MiB) cannot land on an XPU cut in quarters
    by another tenant's vXPU, whatever memory it states: the webhook trims it to a
    template size and the partition rule refuses the mixed cut."""
    quarter = _usage(0, 1, 24576)
    for memory in (30000, 49152, 98304):
        result = place(container(vxpu=1, vmem=memory), [quarter.device], usage=(quarter,))
        assert not result.fits, memory


# ---- the whole-XPU node score (device_test.go::Test_ScoreNode, topo.go calcscore) -----


@pytest.mark.parametrize(
    ("case", "indices", "want"),
    [
        ("empty", (), 1),
        ("all left, full group of 4", (0, 1, 2, 3), 1),
        ("single left device", (0,), 3),
        ("single right device", (4,), 3),
        ("two left devices", (0, 1), 2),
    ],
)
def test_count_bubble(case, indices, want):
    """``topo_test.go::TestCountbubble`` (and ``TestGetvalue``: a half holding 4, 1, 0,
    2, 3 XPUs has 0, 2, 1, 1, 1 bubbles), the case named."""
    from hami_kunlun.score import bubbles

    assert bubbles(indices) == want, case


@pytest.mark.parametrize(
    ("case", "prev", "cur", "hami"),
    [
        ("cur decreases fragmentation by 1", (0,), (0, 1), 3000),
        ("cur unchanged", (0,), (4,), 2000),
        ("cur increases fragmentation by 1", (0, 1), (0,), 1000),
        ("cur increases fragmentation by 2", (0, 1, 2, 3), (0,), 0),
    ],
)
def test_calc_score(case, prev, cur, hami):
    """``topo_test.go::TestCalcscore``, the case named: HAMi's 3000 / 2000 / 1000 / 0 are
    the bands 3 / 2 / 1 / 0 here."""
    from hami_kunlun.score import band

    assert band(prev, cur) * 1000 == hami, case


def _whole(uuids, usage):
    from hami_core.model import ContainerDevice

    memory = {u.device.uuid: u.device.memory_mib for u in usage}
    return tuple(
        ContainerDevice(uuid=u, vendor="XPU", memory_mib=memory[u], cores_pct=100) for u in uuids
    )


@pytest.mark.parametrize(
    ("case", "used", "placed", "band_"),
    [
        # prev XPUs 0-3 in use (one bubble), the pod's 0-7 (none): HAMi 3000
        ("Scenario 1", (0, 1, 2, 3), tuple(range(8)), 3),
        # nothing in use (one bubble), the pod's XPU 0 (three): HAMi 0
        ("Scenario 2", (), (0,), 0),
    ],
)
def test_score_node(case, used, placed, band_):
    """``device_test.go::Test_ScoreNode``, the scenario named, through the backend's
    ``hami_score`` under binpack: the band decides (25 points each), the core's binpack
    score places the node inside it."""
    from hami_core.model import NodePolicy

    usage = tuple(_usage(i, 1, P800_MIB) if i in used else _usage(i) for i in range(8))
    node = NodeInfo(name="n", devices=tuple(u.device for u in usage))
    got = MANAGER.score(
        "XPU", node, usage, _whole([f"xpu-{i}" for i in placed], usage), policy=NodePolicy.BINPACK
    )
    assert band_ * 25 <= got <= band_ * 25 + 25, case


def test_the_band_decides_the_node():
    """Two nodes for a whole XPU: one with XPUs 0-2 in use (the pod's XPU 3 completes the
    left half: HAMi 3000), one empty (a lone XPU: 0). Binpack prefers the first, as
    HAMi's (the bubble step outweighs its default score); spread the second, as HAMi's
    (it takes the lowest total under spread); a vXPU slice keeps the core's score."""
    from hami_core.model import ContainerDevice, NodePolicy

    busy = tuple(_usage(i, 1, P800_MIB) if i < 3 else _usage(i) for i in range(8))
    empty = tuple(_usage(i) for i in range(8))

    def scored(usage, uuid, policy):
        node = NodeInfo(name="n", devices=tuple(u.device for u in usage))
        return MANAGER.score("XPU", node, usage, _whole([uuid], usage), policy=policy)

    assert scored(busy, "xpu-3", NodePolicy.BINPACK) > scored(empty, "xpu-0", NodePolicy.BINPACK)
    assert scored(busy, "xpu-3", NodePolicy.SPREAD) < scored(empty, "xpu-0", NodePolicy.SPREAD)
    quarter = (ContainerDevice(uuid="xpu-0", vendor="XPU", memory_mib=24576, cores_pct=25),)
    node = NodeInfo(name="n", devices=tuple(u.device for u in empty))
    assert MANAGER.score("XPU", node, empty, quarter, policy=NodePolicy.BINPACK) is None
