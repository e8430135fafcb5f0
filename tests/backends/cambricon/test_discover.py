"""``hami_discover`` for Cambricon: the ``cnmon info`` parser on recorded samples."""

from __future__ import annotations

import pytest
from hami_cambricon import discover, plugin

from hami_core.errors import InvalidInputError
from hami_core.model import DeviceInfo
from hami_core.protocol import decode_inventory, encode_inventory
from hami_core.testing import section

from .helpers import X4_SAMPLE, X8_SAMPLE, config


def test_parses_the_mlu370_x8_sample():
    cards = discover.parse_cnmon_info(X8_SAMPLE.read_text())
    assert [(c.index, c.model, c.memory_mib) for c in cards] == [
        (i, "MLU370-X8", 24576) for i in range(4)
    ]
    assert cards[0].uuid == "MLU-45013011-2257-0000-0000-000000000000"
    assert cards[3].uuid == "MLU-45013014-2257-0000-0000-000000000000"


def test_parses_the_mlu370_x4_sample_with_hamis_documented_ids():
    cards = discover.parse_cnmon_info(X4_SAMPLE.read_text())
    assert [(c.uuid, c.memory_mib) for c in cards] == [
        ("MLU-45013011-2257-0000-0000-000000000000", 23308),
        ("MLU-54043011-2257-0000-0000-000000000000", 23308),
    ]


def test_memory_total_is_the_physical_one_not_the_virtual_one():
    # the sample's Virtual Memory Usage Total is 1048576 MiB
    assert {c.memory_mib for c in discover.parse_cnmon_info(X8_SAMPLE.read_text())} == {24576}


def test_devices_apply_split_count_and_scaling():
    cards = discover.parse_cnmon_info(X8_SAMPLE.read_text())
    devices = discover.to_devices(
        cards, section(plugin, split_count=4, memory_scaling=1.5, core_scaling=2.0)
    )
    assert devices[1] == DeviceInfo(
        uuid="MLU-45013012-2257-0000-0000-000000000000",
        vendor="MLU",
        model="MLU370-X8",
        index=1,
        split_count=4,
        memory_mib=36864,
        cores_pct=200,
    )


def test_discovered_devices_round_trip_through_the_inventory_annotation():
    devices = discover.discover(config(), runner=lambda argv: X8_SAMPLE.read_text())
    assert devices is not None and len(devices) == 4
    value = encode_inventory(devices)
    assert decode_inventory(value, node="n", vendor="MLU") == tuple(devices)


def test_the_configured_command_is_run():
    seen = []

    def runner(argv):
        seen.append(list(argv))
        return X4_SAMPLE.read_text()

    discover.discover(config(cnmonCommand="/opt/bin/cnmon info -t"), runner=runner)
    assert seen == [["/opt/bin/cnmon", "info", "-t"]]


def test_no_cnmon_means_no_discovery():
    assert discover.discover(config(), runner=lambda argv: None) is None
    assert discover.discover(config(cnmonCommand="/nonexistent/cnmon info")) is None


def test_an_empty_output_is_no_cards():
    assert discover.discover(config(), runner=lambda argv: "") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Card 0\nUUID : abc\nPhysical Memory Usage :\n  Total : 1 MiB\n", "no Product Name"),
        ("Card 0\nProduct Name : MLU370-X8\nPhysical Memory Usage :\n  Total : 1 MiB\n", "no UUID"),
        ("Card 0\nProduct Name : MLU370-X8\nUUID : abc\n", "no Physical Memory Usage Total"),
        (
            "Card 3\nProduct Name : MLU370-X8\nUUID : abc\nPhysical Memory Usage :\n  Total : lots\n",
            "card 3: memory total 'lots'",
        ),
        (
            "Card 0\nProduct Name : X\nUUID : a,b\nPhysical Memory Usage :\n  Total : 1 MiB\n",
            "separator",
        ),
    ],
)
def test_malformed_output_names_the_card(text, message):
    with pytest.raises(InvalidInputError, match=message):
        discover.parse_cnmon_info(text)
