"""Fit for devices shared by count only (HAMi 2.10 ``pkg/device/vastai/device.go`` ``Fit``).

HAMi checks, per device: health, the UUID filters ``vastaitech.com/use-gpuuuid`` / ``vastaitech.com/nouse-gpuuuid`` and a free
sharer slot (``count``); memory and compute are not accounted (``devcore`` is set to 100
"only for score use"), so a slice carries 0 MiB and 0 cores. The core adds the cordon
check and ranks the feasible devices by the device policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    ContainerDevice,
    DeviceFilters,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    ReasonCode,
    annotations_of,
)
from hami_core.backend import fit as shared

from .names import NOUSE_UUID, USE_UUID


def reason_of(usage: DeviceUsage, filters: DeviceFilters) -> ReasonCode | None:
    """Why a device cannot take one more container, or None."""
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
    return None


def feasible_devices(
    request: DeviceRequest, usage: Sequence[DeviceUsage], pod: Mapping[str, Any]
) -> tuple[list[DeviceUsage], dict[str, ReasonCode], ReasonCode | None]:
    """The devices that can take the request, the others' reasons, and a node reason
    when fewer than ``request.count`` remain."""
    filters = DeviceFilters.from_annotations(
        annotations_of(pod), use_uuid=(USE_UUID,), nouse_uuid=(NOUSE_UUID,)
    )
    ordered = sorted(usage, key=lambda u: (u.device.index, u.device.uuid))
    reasons = {u.device.uuid: r for u in ordered if (r := reason_of(u, filters)) is not None}
    feasible = [u for u in ordered if u.device.uuid not in reasons]
    node_reason = None
    if len(ordered) < request.count:
        node_reason = ReasonCode.NODE_INSUFFICIENT_DEVICE
    elif len(feasible) < request.count:
        node_reason = ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST if feasible else None
    return feasible, reasons, node_reason


def slices(chosen: Sequence[DeviceUsage]) -> tuple[ContainerDevice, ...]:
    """The slices of the chosen devices: no memory, no cores (as HAMi writes them)."""
    return tuple(
        ContainerDevice(uuid=u.device.uuid, vendor=u.device.vendor, memory_mib=0, cores_pct=0)
        for u in chosen
    )


def fit(
    request: DeviceRequest,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult:
    """Choose ``request.count`` distinct devices by the device policy, or say why not."""
    feasible, reasons, node_reason = feasible_devices(request, usage, pod)
    if node_reason is not None or len(feasible) < request.count:
        return FitResult(device_reasons=reasons, node_reason=node_reason)
    return FitResult(devices=slices(shared.rank(feasible, policy)[: request.count]))
