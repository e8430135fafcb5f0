"""Placing Neuron requests (HAMi 2.10 ``pkg/device/awsneuron/device.go`` ``Fit``,
``graphSelect``, ``addCoreUsage``).

Usage of a device is the bit mask of its cores held (slices carry masks: core 0 = 1,
core 1 = 2, both = 3).

- One device (1 or 2 cores, or a whole device): the first device, by index, that is
  healthy, not cordoned, passes ``aws.amazon.com/use-neuron-uuid`` /
  ``nouse-neuron-uuid``, has a sharer slot and enough free cores; partly used devices
  first, so cores pack. The slice takes the lowest free cores.
- Several devices: whole, unused devices as one **contiguous range** of indices: on
  Inferentia nodes (instance type containing ``inf``) any start; otherwise only 1, 4, 8
  or 16 devices, starting at a multiple of the count (Trainium's ring topology). No range:
  ``NumaNotFit``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    ContainerDevice,
    DeviceFilters,
    DeviceRequest,
    DeviceUsage,
    FilterKeys,
    FitResult,
    NodeInfo,
    ReasonCode,
)

from .names import NODE_TYPE, NOUSE_UUID, USE_UUID, WHOLE

#: The pod's device filters: ``aws.amazon.com/use-neuron-uuid`` / ``nouse-neuron-uuid``.
FILTERS = FilterKeys(use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID)

#: Device counts a Trainium node places, aligned to a multiple of themselves.
RING_COUNTS = (1, 4, 8, 16)


def take(usage: DeviceUsage, request: DeviceRequest) -> int | None:
    """The mask a one-device request takes on ``usage``, or None when it does not fit."""
    total, used = usage.device.cores_pct, usage.used_cores_pct
    if request.cores_pct == WHOLE:
        return total if used == 0 else None
    free = [b for b in range(total.bit_length()) if total >> b & 1 and not used >> b & 1]
    if len(free) < request.cores_pct:
        return None
    mask = 0
    for b in free[: request.cores_pct]:
        mask |= 1 << b
    return mask


def _reason(
    usage: DeviceUsage, request: DeviceRequest, filters: DeviceFilters
) -> ReasonCode | None:
    if not usage.device.healthy:
        return ReasonCode.CARD_NOT_HEALTH
    if usage.cordoned:
        return ReasonCode.CARD_CORDONED
    if not filters.uuid_ok(usage.device.uuid):
        return ReasonCode.CARD_UUID_MISMATCH
    if usage.used_count >= usage.device.split_count:
        return ReasonCode.CARD_TIME_SLICING_EXHAUSTED
    if filters.mutex and usage.used_count > 0:
        return ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if take(usage, request) is None:
        return ReasonCode.CARD_INSUFFICIENT_CORE
    return None


def contiguous(ordered: Sequence[DeviceUsage], count: int, usable: set[str]) -> list[DeviceUsage]:
    """HAMi's ``graphSelect``: ``count`` whole devices in a row (see the module docstring)."""
    instance = ordered[0].device.info(NODE_TYPE) if ordered else ""
    if "inf" in instance.lower():
        step = 1
    elif count in RING_COUNTS:
        step = count
    else:
        return []
    for start in range(0, len(ordered) - count + 1, step):
        run = ordered[start : start + count]
        if all(u.device.uuid in usable and u.used_count == 0 for u in run):
            return list(run)
    return []


def fit(
    request: DeviceRequest, node: NodeInfo, usage: Sequence[DeviceUsage], pod: Mapping[str, Any]
) -> FitResult:
    """Place one container's Neuron request on ``node``, or say why not."""
    filters = FILTERS.read(pod)
    ordered = sorted(usage, key=lambda u: (u.device.index, u.device.uuid))
    reasons = {u.device.uuid: r for u in ordered if (r := _reason(u, request, filters)) is not None}
    if len(ordered) < request.count:
        return FitResult(device_reasons=reasons, node_reason=ReasonCode.NODE_INSUFFICIENT_DEVICE)
    if request.count > 1:
        usable = {u.device.uuid for u in ordered if u.device.uuid not in reasons}
        run = contiguous(ordered, request.count, usable)
        if not run:
            return FitResult(device_reasons=reasons, node_reason=ReasonCode.NUMA_NOT_FIT)
        return FitResult(devices=tuple(_slice(u, u.device.cores_pct) for u in run))
    feasible = [u for u in ordered if u.device.uuid not in reasons]
    if not feasible:
        return FitResult(device_reasons=reasons)
    # partly used devices first, so single cores pack and whole devices stay free
    best = min(feasible, key=lambda u: (u.used_count == 0, u.device.index))
    mask = take(best, request)
    assert mask is not None
    return FitResult(devices=(_slice(best, mask),))


def _slice(usage: DeviceUsage, mask: int) -> ContainerDevice:
    return ContainerDevice(
        uuid=usage.device.uuid, vendor=usage.device.vendor, memory_mib=0, cores_pct=mask
    )
