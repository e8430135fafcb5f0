"""``hami_discover`` for Kunlunxin: the ``xpu-smi`` parser on recorded samples."""

from __future__ import annotations

import pytest
from hami_kunlun import discover, plugin

from hami_core.errors import InvalidInputError
from hami_core.model import DeviceInfo
from hami_core.protocol import decode_inventory, encode_inventory
from hami_core.testing import section

from .helpers import K200_SAMPLE, P800_SAMPLE, R300_SAMPLE, SRIOV_SAMPLE, config


def test_parses_the_p800_oam_sample():
    rows = discover.parse_xpu_smi(P800_SAMPLE.read_text())
    assert [r.index for r in rows] == list(range(8))
    assert {(r.model, r.memory_mib, r.healthy) for r in rows} == {("P800", 98304, True)}
    assert rows[4].pci == "0000:9c:00.0"


def test_p800_devices_are_inventory_ready():
    devices = discover.discover(config(), runner=lambda argv: P800_SAMPLE.read_text())
    assert devices is not None and len(devices) == 8
    assert devices[0] == DeviceInfo(
        uuid="XPU-0000-1a-00.0",
        vendor="XPU",
        model="P800",
        index=0,
        split_count=4,  # 98304 / 24576 quarters
        memory_mib=98304,
        cores_pct=100,
    )
    value = encode_inventory(devices)
    assert decode_inventory(value, node="n", vendor="XPU") == tuple(devices)


def test_older_column_set_without_state_and_extra_tables():
    rows = discover.parse_xpu_smi(R300_SAMPLE.read_text())
    assert [(r.index, r.pci, r.model, r.memory_mib, r.healthy) for r in rows] == [
        (0, "0000:53:00.0", "R300", 32768, True),
        (1, "0000:56:00.0", "R300", 32768, True),
    ]


def test_devices_sharing_a_pci_address_get_distinct_ids():
    devices = discover.to_devices(discover.parse_xpu_smi(K200_SAMPLE.read_text()), config())
    assert [d.uuid for d in devices] == [
        "XPU-0000-06-00.0-0",
        "XPU-0000-06-00.0-1",
        "XPU-0001-03-00.0-2",
        "XPU-0001-03-00.0-3",
    ]
    assert {d.memory_mib for d in devices} == {8064}


def test_sriov_physical_function_is_skipped_and_error_state_is_unhealthy():
    devices = discover.to_devices(discover.parse_xpu_smi(SRIOV_SAMPLE.read_text()), config())
    assert [(d.index, d.model, d.memory_mib, d.healthy) for d in devices] == [
        (1, "R200-VF-5G", 4006, True),
        (2, "R200-VF-5G", 4006, True),
        (3, "R200-VF-5G", 4006, False),
    ]


def test_scaling_and_split_count():
    rows = discover.parse_xpu_smi(P800_SAMPLE.read_text())
    cfg = section(plugin, split_count=2, memory_scaling=0.5, core_scaling=1.0)
    d = discover.to_devices(rows, cfg)[0]
    assert (d.split_count, d.memory_mib, d.cores_pct) == (2, 49152, 100)


def test_the_configured_command_is_run():
    seen = []

    def runner(argv):
        seen.append(list(argv))
        return R300_SAMPLE.read_text()

    discover.discover(config(xpuSmiCommand="/usr/local/xpu/bin/xpu_smi"), runner=runner)
    assert seen == [["/usr/local/xpu/bin/xpu_smi"]]


def test_no_tool_means_no_discovery():
    assert discover.discover(config(), runner=lambda argv: None) is None
    assert discover.discover(config(xpuSmiCommand="/nonexistent/xpu-smi")) is None
    assert discover.discover(config(), runner=lambda argv: "") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Runtime Version: 5.0\n", "no DEVICES table"),
        ("| DevID | Model |\n---\n| 0 | P800 |\n", "lacks column"),
        (
            "| DevID | PCI Addr | Model | Memory |\n| 0 | 0000:01:00.0 | P800 |\n",
            "3 cells, header has 4",
        ),
        (
            "| DevID | PCI Addr | Model | Memory |\n| x | 0000:01:00.0 | P800 | 0 / 1 MB |\n",
            "DevID",
        ),
        ("| DevID | PCI Addr | Model | Memory |\n| 0 | 0000:01:00.0 | P800 | lots |\n", "Memory"),
    ],
)
def test_malformed_output_is_reported(text, message):
    with pytest.raises(InvalidInputError, match=message):
        discover.parse_xpu_smi(text)
