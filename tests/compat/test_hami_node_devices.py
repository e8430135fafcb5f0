"""``Test_GetNodeDevices`` of HAMi 2.10's vendors whose test states the register
annotation literally (``pkg/device/<vendor>/device_test.go``), decoded as the scheduler
decodes a node, with HAMi's expected devices (issue #15 item 11). HAMi's "no device" /
"failed to unmarshal" errors are a node with no devices of the vendor; a malformed
value marks that vendor unregistered on that node only."""

from __future__ import annotations

import datetime as dt

import pytest

from hami_core.facts.nodes import read_node
from hami_core.plugin import BackendManager

MANAGER = BackendManager.from_entry_points(disabled=[])


def _read(annotations):
    node = {"metadata": {"name": "node-01", "annotations": annotations}}
    info = read_node(
        node, MANAGER.device_types(), now=dt.datetime.now(dt.UTC), reader=MANAGER.node_devices
    )
    devices = [
        (
            d.uuid,
            d.vendor,
            d.model,
            d.index,
            d.split_count,
            d.memory_mib,
            d.cores_pct,
            d.numa,
            d.healthy,
            d.mode,
        )
        for d in info.devices
    ]
    return devices, dict(info.unregistered)


@pytest.mark.parametrize(
    ("source", "annotations", "devices"),
    [
        (
            "amd: registerJSON",
            {
                "hami.io/node-amd-register": '[{"id":"GPU-0","index":0,"count":1,"devmem":8192,"devcore":100,"type":"amd","numa":0,"health":true}]'
            },
            [("GPU-0", "AMD", "amd", 0, 1, 8192, 100, 0, True, "hami-core")],
        ),
        (
            "hygon: exist dcu device (9 legacy fields, mode 'test' kept)",
            {"hami.io/node-dcu-register": "test-0,1,1024,100,DCU,0,true,0,test:"},
            [("test-0", "DCU", "DCU", 0, 1, 1024, 100, 0, True, "test")],
        ),
        (
            "ascend: exist device (Go field names, matched case-insensitively)",
            {
                "hami.io/node-register-Ascend910B3": '[{"ID":"GPU-0","Count":4,"Devmem":8738,"Devcore":8,"Type":"huawei.com/Ascend910","Numa":0,"Health":true}]'
            },
            [("GPU-0", "Ascend910B3", "huawei.com/Ascend910", 0, 4, 8738, 8, 0, True, "hami-core")],
        ),
        (
            "iluvatar: exist device",
            {
                "hami.io/node-MR-V100-register": "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae,10,8192,100,MR-V100,0,true:"
            },
            [
                (
                    "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae",
                    "MR-V100",
                    "MR-V100",
                    0,
                    10,
                    8192,
                    100,
                    0,
                    True,
                    "hami-core",
                )
            ],
        ),
    ],
)
def test_get_node_devices(source, annotations, devices):
    """``Test_GetNodeDevices`` / ``TestGetNodeDevices`` of the vendor named (AMD:
    ``Test_GetNodeDevices`` with its ``registerJSON``)."""
    assert _read(annotations) == (devices, {}), source


@pytest.mark.parametrize(
    ("source", "annotations"),
    [
        ("ascend: no device", {"hami.io/node-register-Ascend910B3": "[]"}),
        ("ascend / iluvatar / hygon: no annotation", {}),
        ("iluvatar: no device", {"hami.io/node-MR-V100-register": "[]"}),
    ],
)
def test_no_devices(source, annotations):
    """HAMi answers these with an error and no devices: no devices here either."""
    assert _read(annotations) == ([], {}), source


def test_an_empty_inventory_value_marks_only_the_vendor():
    """``ascend/device_test.go::Test_GetNodeDevices`` "failed to unmarshal node devices"
    (an empty value): HAMi answers an error and no devices; the node's chips are
    unregistered here, with the reason (``devices_test.go`` ``Test_DecodeNodeDevices``
    "args is empty": no device separator)."""
    devices, unregistered = _read({"hami.io/node-register-Ascend910B3": ""})
    assert devices == [] and "misses the device separator" in unregistered["Ascend910B3"]


def test_hygon_entry_with_fewer_than_seven_fields_marks_only_the_vendor():
    """``pkg/device/hygon/device_test.go::Test_GetNodeDevices`` "dcu device length less
    than 7": HAMi fails decoding; the node's DCUs are unregistered, with the reason."""
    devices, unregistered = _read({"hami.io/node-dcu-register": "test-0,1,1024,100,DCU:"})
    assert devices == [] and "5 fields" in unregistered["DCU"]


def test_enflame_drs_capacity():
    """``pkg/device/enflame/device_test.go::TestGetNodeDevices_DRSAnnotation``: one GCU of
    capacity 6 with profiles up to ``6g.40gb`` is a device of 40960 MiB, count 6."""
    value = '{"devices":[{"index":"0","minor":"0","capacity":6}],"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}'
    devices, unregistered = _read({"enflame.com/gcu-drs-capacity": value})
    assert unregistered == {}
    ((_, vendor, _, index, count, memory, _, _, healthy, _),) = devices
    assert (vendor, index, count, memory, healthy) == ("Enflame", 0, 6, 40960, True)


@pytest.mark.parametrize(
    ("case", "handshake", "allocatable", "healthy"),
    [
        ("Requesting state", "Requesting_2128-12-02 00:00:00", "0", True),
        ("Requesting state without timestamp", "Requesting", "0", True),
        ("Requesting state with unparsable timestamp", "Requesting_not-a-timestamp", "0", True),
        ("Unknown state", "Unknown", "0", True),
        ("Requesting state expired, no allocatable", "Requesting_2024-01-02 00:00:00", "0", False),
        (
            "Requesting state expired, allocatable present",
            "Requesting_2024-01-02 00:00:00",
            "10",
            True,
        ),
    ],
)
def test_check_health_from_the_handshake(case, handshake, allocatable, healthy):
    """``pkg/device/devices_test.go::Test_CheckHealth``, the case named (with NVIDIA's
    ``hami.io/node-handshake``): only a ``Requesting_`` stamp older than 60 s on a node
    whose allocatable count is 0 makes the vendor's devices unusable there."""
    from hami_core.model import DeviceInfo
    from hami_core.protocol import encode_inventory

    inv = encode_inventory(
        [
            DeviceInfo(
                uuid="GPU-0",
                vendor="NVIDIA",
                model="NVIDIA A10",
                index=0,
                split_count=10,
                memory_mib=1000,
                cores_pct=100,
            )
        ]
    )
    node = {
        "metadata": {
            "name": "n",
            "annotations": {
                "hami.io/node-nvidia-register": inv,
                "hami.io/node-handshake": handshake,
            },
        },
        "status": {"allocatable": {"nvidia.com/gpu": allocatable}},
    }
    info = read_node(
        node, MANAGER.device_types(), now=dt.datetime.now(dt.UTC), reader=MANAGER.node_devices
    )
    assert (len(info.devices) == 1 and not info.unregistered) is healthy, case
    if not healthy:
        assert "hami.io/node-handshake" in info.unregistered["NVIDIA"]


@pytest.mark.parametrize(
    ("source", "vendor"),
    [
        ("hygon", "DCU"),
        ("biren", "Biren"),
        ("vastai", "Vastai"),
        ("ascend", "Ascend910B3"),
        ("kunlun", "XPU"),
    ],
)
def test_vendor_check_health(source, vendor):
    """``pkg/device/<source>/device_test.go::Test_CheckHealth`` (Kunlunxin:
    ``vdevice_test.go::Test_KunlunVDevices_CheckHealth``): an expired ``Requesting_``
    stamp (allocatable 0) makes the vendor's devices unusable on the node; ``Unknown``
    leaves them usable. The vendor's own handshake and register annotations; Vastai's
    inventory is read by its backend (die facts), which skipped this rule before."""
    from hami_core.model import DeviceInfo
    from hami_core.protocol import encode_inventory

    dtype = MANAGER.device_type(vendor)
    inv = encode_inventory(
        [
            DeviceInfo(
                uuid="dev-0",
                vendor=vendor,
                model=vendor,
                index=0,
                split_count=10,
                memory_mib=1000,
                cores_pct=100,
            )
        ]
    )

    def read(handshake):
        node = {
            "metadata": {
                "name": "n",
                "annotations": {
                    dtype.register_annotation: inv,
                    dtype.handshake_annotation: handshake,
                },
            },
            "status": {"allocatable": {dtype.resources.count: "0"}},
        }
        return read_node(
            node, MANAGER.device_types(), now=dt.datetime.now(dt.UTC), reader=MANAGER.node_devices
        )

    expired = read("Requesting_2025-01-07 00:00:00")
    assert expired.devices_of(vendor) == () and vendor in expired.unregistered, source
    assert len(read("Unknown").devices_of(vendor)) == 1


def _read_node(node):
    info = read_node(
        node, MANAGER.device_types(), now=dt.datetime.now(dt.UTC), reader=MANAGER.node_devices
    )
    return [
        (
            d.uuid,
            d.vendor,
            d.index,
            d.split_count,
            d.memory_mib,
            d.cores_pct,
            d.numa,
            d.healthy,
            d.custom,
        )
        for d in info.devices
    ]


def test_mthreads_devices_from_capacity():
    """``pkg/device/mthreads/device_test.go::Test_GetNodeDevices`` "get node device": a
    node advertising ``mthreads.com/sgpu-memory: 1`` and ``sgpu-core: 1`` has one GPU
    ``test-mthreads-0``, count 100, 8192 MiB, 16 cores, healthy."""
    node = {
        "metadata": {"name": "test"},
        "status": {"capacity": {"mthreads.com/sgpu-memory": "1", "mthreads.com/sgpu-core": "1"}},
    }
    assert _read_node(node) == [("test-mthreads-0", "Mthreads", 0, 100, 8192, 16, 0, True, ())]


def test_aws_neuron_devices_from_capacity():
    """``pkg/device/awsneuron/device_test.go::Test_GetNodeDevices`` "get node device": an
    ``inf2`` node with one device and two NeuronCores: ``test-AWSNeuron-0``, count 2,
    devcore 3, ``AWSNodeType: inf2``."""
    node = {
        "metadata": {"name": "test", "labels": {"node.kubernetes.io/instance-type": "inf2"}},
        "status": {"capacity": {"aws.amazon.com/neuron": "1", "aws.amazon.com/neuroncore": "2"}},
    }
    assert _read_node(node) == [
        ("test-AWSNeuron-0", "AWSNeuron", 0, 2, 0, 3, 0, True, (("AWSNodeType", "inf2"),))
    ]


def test_metax_whole_gpus_from_capacity():
    """``pkg/device/metax/device_test.go::TestGetNodeDevices`` "Test with valid node": a
    node advertising ``metax-tech.com/gpu: 1`` has ``test-metax-0`` at index 0 with
    65536 MiB and devcore 100 (the fields HAMi's test compares; its Count 100 is not
    compared there, and a whole MetaX GPU takes one pod here)."""
    node = {"metadata": {"name": "test"}, "status": {"capacity": {"metax-tech.com/gpu": "1"}}}
    ((uuid, vendor, index, _, memory, cores, _, healthy, _),) = _read_node(node)
    assert (uuid, vendor, index, memory, cores, healthy) == (
        "test-metax-0",
        "Metax-GPU",
        0,
        65536,
        100,
        True,
    )


@pytest.mark.parametrize(
    ("source", "vendor", "key"),
    [
        ("biren", "Biren", "hami.io/node-biren-register"),
        ("vastai", "Vastai", "hami.io/node-va-register"),
    ],
)
def test_biren_and_vastai_inventories(source, vendor, key):
    """``pkg/device/<source>/device_test.go::Test_GetNodeDevices``: "exist ... device"
    (HAMi's JSON with ``devicepairscore``) is ``7-0``, count 1, 32768 MiB, healthy; "no
    ... device" (``:``) and "node annotations not decode successfully" (empty) give no
    device. HAMi also sets devcore 100 on these ("only for calscore use"); the inventory
    keeps 0 here, which these whole-device requests (cores 0) never read."""
    value = f'[{{"id":"7-0","count":1,"devmem":32768,"type":"{vendor}","health":true,"devicepairscore":{{}}}}]'
    devices, unregistered = _read({key: value})
    assert unregistered == {}
    ((uuid, vendor_, _, index, count, memory, _, _, healthy, _),) = devices
    assert (uuid, vendor_, index, count, memory, healthy) == ("7-0", vendor, 0, 1, 32768, True)
    for empty in (":", ""):
        assert _read({key: empty})[0] == []
