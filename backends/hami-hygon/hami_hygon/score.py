"""Node score for Hygon DCUs under the node policy."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from hami_core.model import ContainerDevices, DeviceUsage, NodePolicy

from .fit import load


def score(usage: Sequence[DeviceUsage], devices: ContainerDevices, policy: NodePolicy) -> float:
    """0..100: how full the node's DCUs are after the placement (binpack), or how empty
    (spread); the pod's own slices count."""
    if not usage:
        return 0.0
    after = {u.device.uuid: u for u in usage}
    for d in devices:
        if d.uuid in after:
            after[d.uuid] = after[d.uuid].charged(memory_mib=d.memory_mib, cores_pct=d.cores_pct)
    fullness = sum(min(load(u) / 3, Fraction(1)) for u in after.values()) / len(after)
    value = float(fullness * 100)
    return value if policy is NodePolicy.BINPACK else 100.0 - value
