"""Node score for Ascend chips under the node policy."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from hami_core.model import ContainerDevices, DeviceUsage, NodePolicy

from .fit import load
from .models import ModelSpec


def score(
    usage: Sequence[DeviceUsage],
    devices: ContainerDevices,
    policy: NodePolicy,
    model: ModelSpec,
) -> float:
    """0..100: how full the node's chips of ``model`` are after the placement (binpack),
    or how empty (spread); the pod's own slices count, so of two equally full nodes
    binpack prefers the one the pod fills more."""
    if not usage:
        return 0.0
    after = {u.device.uuid: u for u in usage}
    for d in devices:
        if d.uuid in after:
            after[d.uuid] = after[d.uuid].charged(memory_mib=d.memory_mib, cores_pct=d.cores_pct)
    fullness = sum(min(load(u, model) / 3, Fraction(1)) for u in after.values()) / len(after)
    value = float(fullness * 100)
    return value if policy is NodePolicy.BINPACK else 100.0 - value
