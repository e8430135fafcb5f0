"""Node score for Ascend chips under the node policy."""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.devicefit import node_score
from hami_core.model import ContainerDevices, DeviceUsage, NodePolicy

from .fit import rules
from .models import ModelSpec


def score(
    usage: Sequence[DeviceUsage],
    devices: ContainerDevices,
    policy: NodePolicy,
    model: ModelSpec,
) -> float:
    """0..100: how full the node's chips of ``model`` are after the placement (binpack),
    or how empty (spread); the pod's own slices count, so of two equally full nodes
    binpack prefers the one the pod fills more (``hami_core.devicefit.node_score``)."""
    return node_score(usage, devices, policy, rules(model))
