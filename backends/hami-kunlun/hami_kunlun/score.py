"""Node score of whole-XPU placements (HAMi 2.10 ``pkg/device/kunlun/device.go``
``ScoreNode`` and ``topo.go`` ``calcscore``, ``device_test.go::Test_ScoreNode``).

HAMi counts the "bubbles" of a set of XPU indices over the two halves of an 8-XPU node
(indices 0-3 and 4-7): a half with 4 XPUs of the set has none, one with a single XPU has
2, any other (none, 2 or 3) has 1; an empty set has 1. A placement is scored by how its
own set compares with the XPUs already in use: one bubble fewer 3000, as many 2000, one
more 1000, two more 0 (anything else 1000). HAMi adds that to its small default node
score, so it decides the order and the default only breaks ties.

Here the same order on the 0..100 scale of ``hami_score``: the four steps are bands of
25, the core's score for the policy (``hami_core.backend.fit.node_score``) places the
node inside its band. HAMi sorts the nodes' totals the other way round under spread
(the lowest total wins there), so the bands are reversed under spread. Placements of
vXPU slices (a device not taken whole) keep the core's score: HAMi's vXPU device scores
0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hami_core.backend import ContainerDevices, DeviceUsage, FitRules, NodePolicy
from hami_core.backend import fit as devicefit

#: Bubbles a half holds by how many XPUs of the set are in it (HAMi ``getvalue``).
_HALF = {4: 0, 1: 2}
#: Bubbles of the placement minus bubbles in use -> band (HAMi 3000/2000/1000/0).
_BANDS = {-1: 3, 0: 2, 1: 1, 2: 0}
_BAND_WIDTH = 25.0


def bubbles(indices: Iterable[int]) -> int:
    """HAMi's bubble count of a set of XPU indices (see the module docstring)."""
    distinct = set(indices)
    if not distinct:
        return 1
    left = sum(1 for i in distinct if i < 4)
    right = len(distinct) - left
    return _HALF.get(left, 1) + _HALF.get(right, 1)


def band(in_use: Iterable[int], placed: Iterable[int]) -> int:
    """0..3: HAMi's 0 / 1000 / 2000 / 3000 step for a placement of ``placed`` XPUs on a
    node whose ``in_use`` XPUs are held."""
    return _BANDS.get(bubbles(placed) - bubbles(in_use), 1)


def score(
    usage: Sequence[DeviceUsage], devices: ContainerDevices, policy: NodePolicy, rules: FitRules
) -> float | None:
    """0..100 for placing ``devices`` (the pod's XPUs) on a node with ``usage``; None for
    a placement that is not whole XPUs (the core's score applies)."""
    by_uuid = {u.device.uuid: u for u in usage}
    placed = [by_uuid[d.uuid] for d in devices if d.uuid in by_uuid]
    if not placed or len(placed) != len(devices):
        return None
    if any(d.cores_pct < 100 or d.memory_mib < by_uuid[d.uuid].device.memory_mib for d in devices):
        return None
    step = band(
        (u.device.index for u in usage if u.used_count > 0), (u.device.index for u in placed)
    )
    if policy is NodePolicy.SPREAD:
        step = 3 - step
    inner = devicefit.node_score(usage, devices, policy, rules)
    return step * _BAND_WIDTH + inner * _BAND_WIDTH / 100
