"""What discovery states in the inventory: scaled capacity (PROTOCOL.md §2)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal

from hami_core.model import DeviceInfo
from hami_core.protocol.config import VendorConfig

#: The compute of one whole device before scaling, percent.
WHOLE_CORES_PCT = 100


def scaled(value: int, factor: float) -> int:
    """``value`` x ``factor``, rounded down: the one rounding of every backend's scaling.

    HAMi converts the scaled float to an integer with Go's conversion, which truncates
    (``uint64(float64(total) * memoryScaling)``, ``pkg/device/nvidia``); a factor of
    1.257 on 100 % therefore gives 125 on every node and vendor. The product is taken on
    the factor's decimal form (``1.1`` x 100 is 110, not 110.00000000000001, and ``0.29``
    x 100 is 29, not 28) so the configuration means what it says.
    """
    return math.floor(Decimal(value) * Decimal(repr(factor)))


def inventory_device(
    config: VendorConfig,
    *,
    uuid: str,
    vendor: str,
    memory_mib: int,
    cores_pct: int = WHOLE_CORES_PCT,
    split_count: int | None = None,
    model: str = "",
    index: int = 0,
    numa: int = 0,
    mode: str = "hami-core",
    healthy: bool = True,
    node_local: Mapping[str, str] | None = None,
) -> DeviceInfo:
    """A discovered device as the inventory states it: ``memory_mib`` (physical MiB) and
    ``cores_pct`` (physical percent) scaled by ``deviceMemoryScaling`` /
    ``deviceCoreScaling``, ``split_count`` defaulting to ``deviceSplitCount``."""
    return DeviceInfo(
        uuid=uuid,
        vendor=vendor,
        model=model,
        index=index,
        split_count=config.split_count if split_count is None else split_count,
        memory_mib=scaled(memory_mib, config.memory_scaling),
        cores_pct=scaled(cores_pct, config.core_scaling),
        numa=numa,
        mode=mode,
        healthy=healthy,
        node_local=dict(node_local or {}),
    )
