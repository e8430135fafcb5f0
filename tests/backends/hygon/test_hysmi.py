"""hy-smi parsers and discovery, on the recorded samples (see samples/README.md)."""

from hami_hygon import plugin
from hami_hygon.discover import Dcu, discover, drm_nodes, numa_node
from hami_hygon.hysmi import HyDevice, device_uuid, parse_json, parse_text, parse_virtual_info

from hami_core.protocol import encode_inventory
from hami_core.testing import section

from .support import SAMPLES, FakeHySmi, make_sysfs


def read(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_json_form():
    devs = parse_json(read("hy-smi-query-k100.json"))
    assert [d.index for d in devs] == [0, 1, 2, 3]
    assert devs[0] == HyDevice(
        index=0,
        series="K100_AI",
        bus_id="0000:9f:00.0",
        serial="3E3D2A0D0A1B",
        memory_total_mib=65520,
    )


def test_text_form_with_dcu_labels():
    devs = parse_text(read("hy-smi-query-z100l.txt"))
    assert [(d.index, d.series, d.bus_id, d.memory_total_mib) for d in devs] == [
        (0, "Z100L", "0000:04:00.0", 32752),
        (1, "Z100L", "0000:26:00.0", 32752),
        (2, "Z100L", "0000:43:00.0", 32752),
        (3, "Z100L", "0000:63:00.0", 32752),
    ]
    assert devs[3].serial == "2A1B0C3D4E53"


def test_text_form_with_hcu_labels_and_serials_after_the_address():
    devs = parse_text(read("hy-smi-query-bw150.txt"))
    assert [(d.bus_id, d.serial) for d in devs] == [
        ("0000:05:00.0", "2500238601000586"),
        ("0000:2b:00.0", ""),
    ]
    assert [device_uuid(d) for d in devs] == ["DCU-2500238601000586", "DCU-1"]


def test_uuid_never_carries_device_list_separators():
    assert device_uuid(HyDevice(index=0, serial="A,B:C;D")) == "DCU-A-B-C-D"


def test_virtual_device_info():
    info = parse_virtual_info(read("hy-smi-virtual-z100l.txt"))
    assert [(v.index, v.compute_units, v.memory_bytes) for v in info][:1] == [(0, 60, 34342961152)]
    assert parse_virtual_info("") == []


def test_sysfs_lookups(tmp_path):
    root = make_sysfs(tmp_path, {"0000:9f:00.0": (2, 3)})
    assert drm_nodes(root, "0000:9F:00.0") == ("card2", "renderD130")
    assert numa_node(root, "0000:9f:00.0") == 3
    assert drm_nodes(root, "0000:00:00.0") == ("", "")
    assert numa_node(root, "0000:00:00.0") == 0


def test_discover_a_k100_node(tmp_path):
    root = make_sysfs(tmp_path, {"0000:9f:00.0": (1, 0), "0000:56:00.0": (2, 1)})
    found = discover(section(plugin), FakeHySmi("k100"), sysfs=root)
    assert found is not None
    d0 = found[0]
    assert (d0.uuid, d0.vendor, d0.model, d0.index) == ("DCU-3E3D2A0D0A1B", "DCU", "DCU-K100_AI", 0)
    assert (d0.memory_mib, d0.cores_pct, d0.split_count, d0.healthy) == (65520, 100, 10, True)
    assert [d.numa for d in found] == [0, 1, 0, 0]
    dcu = Dcu.of(next(d for d in found if d.uuid == "DCU-3E3D2A0D0A1C"))
    assert (dcu.card, dcu.render, dcu.compute_units, dcu.bus_id) == (
        "card2",
        "renderD130",
        120,
        "0000:56:00.0",
    )
    # node-local facts never reach the inventory the scheduler reads
    assert "renderD130" not in encode_inventory(found)


def test_discover_falls_back_to_the_text_form_and_scales(tmp_path):
    fake = FakeHySmi("z100l")
    config = section(plugin, split_count=4, memory_scaling=2.0)
    found = discover(config, fake, sysfs=tmp_path)
    assert found is not None
    assert {(d.model, d.memory_mib, d.split_count) for d in found} == {("DCU-Z100L", 65504, 4)}
    assert any("--json" in call for call in fake.calls)  # tried JSON first


def test_discover_without_hy_smi_is_none(tmp_path):
    assert discover(section(plugin), FakeHySmi(None), sysfs=tmp_path) is None
