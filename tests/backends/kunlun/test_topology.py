"""HAMi's P800 OAM topology-aware sets (``pkg/device/kunlun/topo.go``)."""

from __future__ import annotations

import pytest
from hami_kunlun.topology import is_oam_node, linked, select

ALL = range(8)


def test_oam_node_is_exactly_eight_xpus_0_to_7():
    assert is_oam_node(range(8))
    assert not is_oam_node(range(4))
    assert not is_oam_node([0, 1, 2, 3, 4, 5, 6, 8])


def test_links():
    assert linked(0, 3) and linked(4, 7) and linked(1, 5)
    assert not linked(0, 5) and not linked(2, 2)


def test_eight_takes_all_or_nothing():
    assert select(ALL, 8) == list(range(8))
    assert select(set(ALL) - {3}, 8) is None


@pytest.mark.parametrize(
    ("free", "count", "want"),
    [
        (ALL, 1, [0]),  # both groups fully free: the first
        ({0, 1, 2, 3, 7}, 1, [7]),  # a group with one free XPU goes first
        ({0, 1, 4, 5, 6}, 1, [4]),  # then a group with three free, keeping the pair 0-1
        ({0, 1, 4, 5, 6, 7}, 1, [0]),  # then two free rather than four
        (ALL, 2, [0, 1]),
        ({0, 1, 2, 3, 4, 5}, 2, [4, 5]),  # exactly two free in the second group
        ({0, 1, 2, 4, 5, 6, 7}, 2, [0, 1]),  # three free before four free
        ({0, 4}, 2, [0, 4]),  # across groups: the linked pair
        ({1, 2, 7}, 2, [1, 2]),  # 1-2 share a group
        ({1, 6}, 2, None),  # neither in one group nor linked across
        (ALL, 4, [0, 1, 2, 3]),
        ({0, 1, 2, 4, 5, 6}, 4, [0, 1, 4, 5]),  # a linked quad, leaving the pair 2-6
        ({0, 1, 2, 5, 6, 7}, 4, [1, 2, 5, 6]),  # the only linked quad
        ({0, 1, 4, 5}, 4, [0, 1, 4, 5]),
        ({0, 2, 5, 7}, 4, None),
        (ALL, 3, None),
        (ALL, 5, None),
    ],
)
def test_select(free, count, want):
    assert select(free, count) == want
