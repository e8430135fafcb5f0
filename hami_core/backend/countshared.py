"""Devices shared by count only: the request and fit HAMi 2.10 gives Biren and Vastai.

HAMi's ``pkg/device/biren/device.go`` and ``pkg/device/vastai/device.go`` read a count
resource as N whole devices (``MemPercentagereq`` 100, no compute accounted) and fit by
health, the vendor's UUID filter annotations and a free sharer slot (``count``); the slice
carries 0 MiB and 0 cores (``devcore`` 100 is "only for score use"). A backend passes its
vendor key, resource names and filter annotation keys; the ranking is the core's device
policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.errors import InvalidInputError
from hami_core.model import (
    NOT_ACCOUNTED,
    ContainerDevice,
    DevicePolicy,
    DeviceRequest,
    DeviceTypeInfo,
    DeviceUsage,
    FitResult,
    MutateResult,
    ReasonCode,
    ResourceNames,
)
from hami_core.protocol.config import VendorConfig

from . import fit as shared
from .admission import denies_invalid_input
from .fit import DeviceFilters
from .names import hami_annotation_keys
from .requests import annotations_of, read_quantity, resource_names


def device_type(vendor: str, resources: ResourceNames, node_word: str) -> DeviceTypeInfo:
    """The vendor key of a count-shared vendor: HAMi's node keys of ``node_word``
    (``hami.io/node-<w>-register``, ``hami.io/node-handshake-<w>``), the pod device lists of
    the vendor key itself (HAMi's ``commonWord``: ``hami.io/Biren-devices-to-allocate``), no
    compute accounted (``NOT_ACCOUNTED``: HAMi's ``devcore`` is for scoring only)."""
    return DeviceTypeInfo(
        vendor=vendor,
        resources=resources,
        **hami_annotation_keys(node_word, vendor),
        cores_unit=NOT_ACCOUNTED,
    )


def parse_request(
    container: Mapping[str, Any], config: VendorConfig, *, vendor: str, resources: ResourceNames
) -> DeviceRequest | None:
    """The container's request for ``count`` whole devices, or None when it names none.

    Args:
        container: a v1.Container (limits, else requests).
        config: the vendor's section (resource name overrides).
        vendor: the vendor key the request is for.
        resources: the backend's default resource names.

    Raises:
        InvalidInputError: a count of 0 (HAMi would place it nowhere; we deny it),
            negative, fractional or above int32.
    """
    name = resource_names(resources, config).count
    count = read_quantity(container, name)
    if count is None:
        return None
    if count == 0:
        raise InvalidInputError(
            f"container {container.get('name', '?')!r}: {name} must be greater than 0"
        )
    return DeviceRequest(vendor=vendor, count=count, memory_pct=100, cores_pct=0)


@denies_invalid_input
def mutate(
    container: Mapping[str, Any], config: VendorConfig, *, vendor: str, resources: ResourceNames
) -> MutateResult | None:
    """Validate and copy the count to limits and requests; None when not this vendor's,
    a denial for an invalid count."""
    req = parse_request(container, config, vendor=vendor, resources=resources)
    if req is None:
        return None
    return MutateResult(resources={resource_names(resources, config).count: req.count})


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
    request: DeviceRequest,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    *,
    use_uuid: str,
    nouse_uuid: str,
) -> tuple[list[DeviceUsage], dict[str, ReasonCode], ReasonCode | None]:
    """The devices that can take the request (by index), the others' reasons, and a node
    reason when fewer than ``request.count`` remain. ``use_uuid`` / ``nouse_uuid``: the
    vendor's UUID filter annotation keys (PROTOCOL.md §1b)."""
    filters = DeviceFilters.from_annotations(
        annotations_of(pod), use_uuid=(use_uuid,), nouse_uuid=(nouse_uuid,)
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
    *,
    use_uuid: str,
    nouse_uuid: str,
) -> FitResult:
    """Choose ``request.count`` distinct devices by the device policy, or say why not."""
    feasible, reasons, node_reason = feasible_devices(
        request, usage, pod, use_uuid=use_uuid, nouse_uuid=nouse_uuid
    )
    if node_reason is not None or len(feasible) < request.count:
        return FitResult(device_reasons=reasons, node_reason=node_reason)
    return FitResult(devices=slices(shared.rank(feasible, policy)[: request.count]))
