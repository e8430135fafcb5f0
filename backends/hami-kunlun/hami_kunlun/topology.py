"""Topology-aware sets on a Kunlunxin P800 OAM node (8 XPUs, indices 0..7).

Source: HAMi 2.10 ``pkg/device/kunlun/topo.go`` (``graghSelect``, ``interconnect``) and
``device.go`` (``InterGroupConnection = "0-4,1-5,2-6,3-7"``, ``InterGroupConnection2 =
"0-1-4-5,2-3-6-7,0-2-4-6,1-3-5-7,0-3-4-7,1-2-5-6"``, ``GroupConnection`` = every pair
inside ``0-3`` and inside ``4-7``). The eight XPUs form two groups of four, fully
connected inside a group; across groups, XPU ``i`` links to ``i + 4``.

Rules (HAMi's, restated):

- 8 XPUs: all eight, or nothing.
- 1, 2 or 4 XPUs inside one group when a group has enough free XPUs: prefer the group
  whose free count fits the request most tightly, so larger free groups stay whole.
  For an even request the preference is ``count, count + 1, ..., 4`` free XPUs; for one
  XPU it is ``1, 3, 2, 4`` (a group with one free XPU first, a group with exactly two
  free last but one, so a pair survives). Inside the group the lowest indices are taken.
- Otherwise across groups: 2 XPUs as a linked pair ``(i, i + 4)``; 4 XPUs as one of
  HAMi's six linked quads, preferring a quad whose leftovers still hold a linked pair.
- 3, 5, 6 or 7 XPUs: no topology-aware set exists (HAMi places none).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable

#: XPUs per group; the node has two groups.
GROUP_SIZE = 4
NODE_SIZE = 2 * GROUP_SIZE
#: Linked quads across the groups (HAMi ``InterGroupConnection2``), in HAMi's order.
CROSS_QUADS: tuple[tuple[int, ...], ...] = (
    (0, 1, 4, 5),
    (2, 3, 6, 7),
    (0, 2, 4, 6),
    (1, 3, 5, 7),
    (0, 3, 4, 7),
    (1, 2, 5, 6),
)
#: Preference order of a group's free count, by request size (HAMi ``oddorder``).
_PREFERENCE = {1: (1, 3, 2, 4), 2: (2, 3, 4), 4: (4,)}


def is_oam_node(indices: Iterable[int]) -> bool:
    """True when the node's XPUs are exactly indices 0..7 (one 8-XPU OAM module)."""
    return sorted(indices) == list(range(NODE_SIZE))


def linked(a: int, b: int) -> bool:
    """Whether two XPUs are directly linked: same group, or ``i`` and ``i + 4``."""
    if a == b:
        return False
    return a // GROUP_SIZE == b // GROUP_SIZE or abs(a - b) == GROUP_SIZE


def select(free: Collection[int], count: int) -> list[int] | None:
    """The indices to take for ``count`` XPUs among ``free`` ones, or None.

    Args:
        free: indices (0..7) of the XPUs that can take the request.
        count: XPUs wanted.

    Returns:
        Sorted indices, or None when no topology-aware set exists.
    """
    free_set = set(free)
    if count == NODE_SIZE:
        return list(range(NODE_SIZE)) if free_set >= set(range(NODE_SIZE)) else None
    if count not in _PREFERENCE:
        return None
    groups = [
        sorted(i for i in free_set if g * GROUP_SIZE <= i < (g + 1) * GROUP_SIZE) for g in (0, 1)
    ]
    for wanted in _PREFERENCE[count]:
        for group in groups:
            if len(group) == wanted:
                return group[:count]
    if count == 2:
        for i in range(GROUP_SIZE):
            if {i, i + GROUP_SIZE} <= free_set:
                return [i, i + GROUP_SIZE]
        return None
    if count == 4:
        quads = [q for q in CROSS_QUADS if set(q) <= free_set]
        for quad in quads:
            rest = free_set - set(quad)
            if any(linked(a, b) for a, b in itertools.combinations(sorted(rest), 2)):
                return list(quad)
        return list(quads[0]) if quads else None
    return None
