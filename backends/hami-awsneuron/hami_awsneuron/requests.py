"""Reading an AWS Neuron request (HAMi 2.10 ``pkg/device/awsneuron`` ``MutateAdmission``,
``GenerateResourceRequests``, ``splitCoreRequest``).

- ``aws.amazon.com/neuron`` = N whole devices (1..2^31-1);
- otherwise ``aws.amazon.com/neuroncore`` = C cores: 1 or 2 take one device (C cores of
  it); more must be a multiple of 2 and take C / 2 whole devices;
- both must be whole numbers above 0. The request's ``cores_pct`` carries the cores per
  device (1 or 2), or ``WHOLE`` (100) for whole devices; devices have no memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    INT32_MAX,
    DeviceRequest,
    InvalidInputError,
    MutateResult,
    denies_invalid_input,
    parse_quantity_int,
    resource_value,
    stated_quantities,
)

from . import VENDOR
from .names import MAX_CORES_PER_DEVICE, RESOURCES, WHOLE

#: A resource's quantity from ``limits``, else ``requests`` (PROTOCOL.md §1).
stated = resource_value


def _positive(container: Mapping[str, Any], name: str, maximum: int) -> int:
    where = f"container {container.get('name', '?')!r}"
    try:
        value = parse_quantity_int(stated(container, name), resource=name, maximum=maximum)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    if value <= 0:
        raise InvalidInputError(f"{where}: {name} must be greater than 0")
    return value


def asks_devices(container: Mapping[str, Any]) -> bool:
    """True when the container names ``aws.amazon.com/neuron`` (whole devices)."""
    return stated(container, RESOURCES.count) is not None


def parse_request(container: Mapping[str, Any]) -> DeviceRequest | None:
    """The container's Neuron request, or None when it names neither resource.

    Raises:
        InvalidInputError: a count or core count of 0, negative, fractional or above
            int32 devices, or an odd core count above 2.
    """
    if asks_devices(container):
        n = _positive(container, RESOURCES.count, INT32_MAX)
        return DeviceRequest(vendor=VENDOR, count=n, memory_pct=100, cores_pct=WHOLE)
    if stated(container, RESOURCES.cores) is None:
        return None
    cores = _positive(container, RESOURCES.cores, INT32_MAX * MAX_CORES_PER_DEVICE)
    if cores <= MAX_CORES_PER_DEVICE:
        return DeviceRequest(vendor=VENDOR, count=1, memory_pct=100, cores_pct=cores)
    if cores % MAX_CORES_PER_DEVICE:
        raise InvalidInputError(
            f"container {container.get('name', '?')!r}: {RESOURCES.cores} must be 1 or a "
            f"multiple of {MAX_CORES_PER_DEVICE}, got {cores}"
        )
    return DeviceRequest(
        vendor=VENDOR, count=cores // MAX_CORES_PER_DEVICE, memory_pct=100, cores_pct=WHOLE
    )


@denies_invalid_input
def mutate(container: Mapping[str, Any], container_path: str) -> MutateResult | None:
    """Validate and copy the stated quantities to requests; None when not Neuron, a
    denial for an invalid quantity."""
    if parse_request(container) is None:
        return None
    return MutateResult(resources=stated_quantities(container, RESOURCES.all()))
