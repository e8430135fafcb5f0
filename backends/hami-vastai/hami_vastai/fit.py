"""Fit and score for Vastai devices (HAMi 2.10 ``pkg/device/vastai/device.go`` ``Fit``,
``computeBestCombination``, ``ScoreNode``).

Devices are shared by count (the kit's ``countshared``). In **die mode** (the inventory's
``DeviceStrategy`` is ``die``) several dies are taken from as few AI cards as possible:
the cards with the most feasible dies first; with the ``mutex`` policy a die whose card
already runs a container is refused too (``ExclusiveDeviceAllocateConflict``). A die-mode
placement scores, per container, the share of its dies on its most used card (1 when all
on one card), averaged and scaled to 0..100.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    ContainerDevices,
    DeviceFilters,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    ReasonCode,
    annotations_of,
    countshared,
)

from .names import AIC, NOUSE_UUID, STRATEGY, USE_UUID


def die_mode(usage: Sequence[DeviceUsage]) -> bool:
    """HAMi's ``isDieMode``: the node's first device says ``DeviceStrategy: die``."""
    return bool(usage) and usage[0].device.info(STRATEGY) == "die"


def best_combination(feasible: Sequence[DeviceUsage], count: int) -> list[DeviceUsage]:
    """``count`` dies from the cards holding the most feasible dies (HAMi
    ``computeBestCombination``); ties to the lower card id, dies by index."""
    cards: dict[str, list[DeviceUsage]] = {}
    for u in feasible:
        cards.setdefault(u.device.info(AIC), []).append(u)
    order = sorted(cards, key=lambda c: (-len(cards[c]), c))
    return [u for c in order for u in cards[c]][:count]


def fit(
    request: DeviceRequest,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult:
    """Choose ``request.count`` devices, or say per device why not."""
    if not die_mode(usage):
        return countshared.fit(
            request, usage, pod, policy, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID
        )
    feasible, reasons, node_reason = countshared.feasible_devices(
        request, usage, pod, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID
    )
    if DeviceFilters.from_annotations(annotations_of(pod)).mutex:
        busy = {u.device.info(AIC) for u in usage if u.used_count > 0}
        for u in feasible:
            if u.device.info(AIC) in busy:
                reasons[u.device.uuid] = ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
        feasible = [u for u in feasible if u.device.uuid not in reasons]
        if len(feasible) < request.count and node_reason is None:
            node_reason = ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST if feasible else None
    if node_reason is not None or len(feasible) < request.count:
        return FitResult(device_reasons=reasons, node_reason=node_reason)
    return FitResult(devices=countshared.slices(best_combination(feasible, request.count)))


def score(usage: Sequence[DeviceUsage], devices: ContainerDevices) -> float | None:
    """Die mode: how packed on cards the placement is, 0..100; None otherwise (the
    core's node score applies)."""
    if not die_mode(usage) or not devices:
        return None
    card = {u.device.uuid: u.device.info(AIC) for u in usage}
    counts = Counter(card.get(d.uuid, "") for d in devices)
    return 100.0 * max(counts.values()) / sum(counts.values())
