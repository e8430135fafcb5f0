"""Node score for NVIDIA devices under the node policy: the core's shared scoring."""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.devicefit import node_score
from hami_core.model import ContainerDevices, DeviceUsage, NodePolicy


def score(usage: Sequence[DeviceUsage], devices: ContainerDevices, policy: NodePolicy) -> float:
    """0..100: how full the node's GPUs are after the placement (binpack), or how empty
    (spread); see ``hami_core.devicefit.node_score``."""
    return node_score(usage, devices, policy)
