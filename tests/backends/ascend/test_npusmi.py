"""npu-smi parsers and discovery, on the recorded samples (see samples/README.md)."""

import pytest
from hami_ascend import plugin
from hami_ascend.discover import discover
from hami_ascend.models import settings
from hami_ascend.npusmi import parse_board, parse_info, parse_mapping, vdie_uuid

from hami_core.testing import section

from .support import SAMPLES, FakeNpuSmi


def read(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_info_table_of_an_a2_node():
    rows = parse_info(read("npu-smi-info-910b3.txt"))
    assert [(r.npu_id, r.chip_id) for r in rows] == [(i, 0) for i in range(8)]
    assert {r.name for r in rows} == {"910B3"}
    assert rows[0].bus_id == "0000:C1:00.0"
    assert rows[0].memory_total_mib == 65536  # HBM, not the 0 / 0 DDR column
    assert [r.health for r in rows] == ["OK"] * 7 + ["Warning"]
    assert rows[0].device_id is None and rows[0].phy_id is None


def test_info_table_of_a_310p_duo_node_reads_the_device_column():
    rows = parse_info(read("npu-smi-info-310p3.txt"))
    assert [(r.npu_id, r.chip_id, r.device_id) for r in rows] == [
        (1, 0, 0),
        (1, 1, 1),
        (2, 0, 2),
        (2, 1, 3),
    ]
    assert {r.memory_total_mib for r in rows} == {21534}  # Memory-Usage: no HBM column


def test_info_table_of_an_a3_node_reads_the_phy_id_column():
    rows = parse_info(read("npu-smi-info-a3.txt"))
    assert [(r.npu_id, r.chip_id, r.phy_id) for r in rows] == [
        (0, 0, 0),
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 3),
    ]
    assert {r.name for r in rows} == {"Ascend910"}


def test_mapping_leaves_out_the_mcu_rows():
    rows = parse_mapping(read("npu-smi-info-m-310p3.txt"))
    assert [(r.npu_id, r.chip_id, r.logic_id) for r in rows] == [
        (1, 0, 0),
        (1, 1, 1),
        (2, 0, 2),
        (2, 1, 3),
    ]
    assert rows[0].chip_name == "Ascend 310P3" and rows[0].phy_id is None
    a3 = parse_mapping(read("npu-smi-info-m-a3.txt"))
    assert [r.phy_id for r in a3] == [0, 1, 2, 3]


def test_mapping_without_header_is_an_error():
    with pytest.raises(ValueError, match="NPU ID"):
        parse_mapping("dcmi model initialized failed\n")


def test_truncated_chip_block_is_an_error():
    text = read("npu-smi-info-910b3.txt").splitlines()
    cut = "\n".join(text[:7])  # header + first line of chip 0 only
    with pytest.raises(ValueError, match="second line"):
        parse_info(cut)


def test_board_vdie_id_is_hamis_uuid():
    board = parse_board(read("npu-smi-board-910b3-npu0-chip0.txt"))
    assert board["Chip Name"] == "910B3"
    assert vdie_uuid(board) == "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"
    assert vdie_uuid({"VDie ID": "not hex"}) is None
    assert vdie_uuid({}) is None


def test_discover_an_a2_node():
    cfg = settings(section(plugin))
    found = discover(cfg, FakeNpuSmi("910b3"))
    assert found is not None
    devs = found
    assert [d.index for d in devs] == list(range(8))
    assert {d.vendor for d in devs} == {"Ascend910B3"} and {d.model for d in devs} == {
        "Ascend910B3"
    }
    assert {d.memory_mib for d in devs} == {65536}
    assert {d.split_count for d in devs} == {4}  # 65536 / vir05_1c_16g
    assert {d.cores_pct for d in devs} == {100}
    assert [d.healthy for d in devs] == [True] * 7 + [False]
    assert devs[0].uuid == "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"
    assert [d.node_local["phyId"] for d in devs] == [str(i) for i in range(8)]


def test_discover_a_310p_node():
    found = discover(settings(section(plugin)), FakeNpuSmi("310p3"))
    assert found is not None
    assert [(d.vendor, d.memory_mib, d.split_count) for d in found] == [
        ("Ascend310P", 21527, 7)
    ] * 4


def test_discover_an_a3_node_keeps_the_physical_ids():
    found = discover(settings(section(plugin)), FakeNpuSmi("a3"))
    assert found is not None
    assert {d.vendor for d in found} == {"Ascend910C"}
    assert [d.node_local["phyId"] for d in found] == ["0", "1", "2", "3"]
    assert [d.node_local["npuId"] for d in found] == ["0", "0", "1", "1"]


def test_discover_in_hami_core_mode_uses_the_split_count_and_scaling():
    config = section(
        plugin,
        split_count=6,
        core_scaling=1.5,
        memory_scaling=2.0,
        options={"vnpuMode": "hami-core"},
    )
    found = discover(settings(config), FakeNpuSmi("910b3"))
    assert found is not None
    assert {(d.split_count, d.cores_pct, d.memory_mib) for d in found} == {(6, 150, 131072)}


def test_discover_without_npu_smi_is_none():
    assert discover(settings(section(plugin)), FakeNpuSmi(None)) is None


def test_chips_of_unconfigured_models_are_skipped():
    config = section(plugin, options={"vnpus": {"Ascend910B3": {"chipName": "910B9"}}})
    found = discover(settings(config), FakeNpuSmi("910b3"))
    assert found is not None and found == []
