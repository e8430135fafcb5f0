"""Cambricon nodes run by the vendor's device plugin are read from node capacity
(issue item 10): HAMi 2.10 ``pkg/device/cambricon/device.go`` ``GetNodeDevices``."""

import datetime as dt

from hami_core.facts.nodes import read_node
from hami_core.plugin import BackendManager
from hami_core.protocol import encode_inventory
from tests.backends.cambricon.helpers import mlu
from tests.builders import pipeline, pod

VCORE, VMEM, COUNT = (
    "cambricon.com/mlu.smlu.vcore",
    "cambricon.com/mlu.smlu.vmemory",
    "cambricon.com/vmlu",
)


def _node(name, capacity, annotations=None):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations or {}},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _devices(node):
    m = BackendManager.from_entry_points(disabled=[])
    return read_node(node, m.device_types(), now=dt.datetime.now(dt.UTC), reader=m.node_devices)


def test_hami_get_node_devices_value():
    """HAMi ``pkg/device/cambricon/device_test.go::Test_GetNodeDevices``: capacity vcore 1,
    vmemory 1 on node ``test`` -> one card ``test-cambricon-mlu-0``, 100 slices, 25600 MiB,
    100 cores, NUMA 0, healthy."""
    info = _devices(_node("test", {VCORE: "1", VMEM: "1"}))
    (d,) = info.devices_of("MLU")
    assert (d.uuid, d.index, d.split_count, d.memory_mib, d.cores_pct, d.numa, d.healthy) == (
        "test-cambricon-mlu-0",
        0,
        100,
        25600,
        100,
        0,
        True,
    )


def test_cards_from_capacity_and_a_pod_is_placed_on_them():
    # two cards of 24 GiB: vcore 200, vmemory 2 x 96 units of 256 MiB
    n = _node("mlu-node", {VCORE: "200", VMEM: "192", COUNT: "200"})
    info = _devices(n)
    assert [(d.uuid, d.memory_mib) for d in info.devices_of("MLU")] == [
        ("mlu-node-cambricon-mlu-0", 24576),
        ("mlu-node-cambricon-mlu-1", 24576),
    ]
    p = pipeline()
    p.cluster.add_node(n)
    c = {"name": "c", "image": "x", "resources": {"limits": {COUNT: "1", VMEM: "40", VCORE: "50"}}}
    out = p.submit(pod("p", c))
    assert out.node == "mlu-node"
    (slice_,) = out.allocation.devices["MLU"][0]
    assert slice_.uuid.startswith("mlu-node-cambricon-mlu-") and slice_.memory_mib == 40 * 256


def test_the_register_annotation_wins_where_present():
    ann = {"hami.io/node-mlu-register": encode_inventory([mlu("MLU-X", memory_mib=8192)])}
    info = _devices(_node("both", {VCORE: "100", VMEM: "96"}, ann))
    assert [d.uuid for d in info.devices_of("MLU")] == ["MLU-X"]


def test_no_capacity_no_annotation_no_mlu_and_a_bad_value_marks_only_that_node():
    assert _devices(_node("plain", {"cpu": "8"})).devices_of("MLU") == ()
    bad = _devices(_node("bad", {VCORE: "lots"}))
    assert "MLU" in bad.unregistered and "status.capacity" in bad.unregistered["MLU"]
    p = pipeline()
    p.cluster.add_node(_node("bad", {VCORE: "lots"}))
    p.cluster.add_node(_node("good", {VCORE: "100", VMEM: "96"}))
    c = {"name": "c", "image": "x", "resources": {"limits": {COUNT: "1", VMEM: "4"}}}
    out = p.submit(pod("p", c))
    assert out.node == "good"
    assert out.filter.failed["bad"].startswith("NodeUnregistered")
