"""Node score for Cambricon MLUs under the node policy."""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.devicefit import node_score
from hami_core.model import ContainerDevices, DeviceUsage, NodePolicy

from .fit import RULES


def score(usage: Sequence[DeviceUsage], devices: ContainerDevices, policy: NodePolicy) -> float:
    """0..100: how full the node's MLUs are after the placement (binpack), or how empty
    (spread); the pod's own slices count (``hami_core.devicefit.node_score``)."""
    return node_score(usage, devices, policy, RULES)
