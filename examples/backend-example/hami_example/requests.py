"""Reading an EXAMPLE request from a container, and what admission writes for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    MutateResult,
    VendorConfig,
    read_quantity,
    resource_names,
)

from . import VENDOR
from .names import DEFAULT_RESOURCES


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's EXAMPLE request with defaults, or None when it asks none.

    A count without memory takes whole devices (``defaultMemory`` when configured);
    memory without a count takes ``defaultGPUNum`` devices.

    Raises:
        InvalidInputError: a malformed quantity (the kit's message names the container,
            the resource and the value), or memory with a count of 0.
    """
    names = resource_names(DEFAULT_RESOURCES, config)
    count = read_quantity(container, names.count)
    memory = read_quantity(container, names.memory, unit="MiB")
    if count is None and memory is None:
        return None  # not ours: never claim another vendor's container
    if count == 0:
        if memory:
            raise InvalidInputError(
                f"container {container.get('name')!r}: {names.count} is 0 "
                f"but {names.memory} is {memory}"
            )
        return None
    n = count if count is not None else config.default_count
    memory = memory or config.default_memory_mib
    if memory:
        return DeviceRequest(
            vendor=VENDOR, count=n, memory_mib=memory, cores_pct=config.default_cores_pct
        )
    return DeviceRequest(vendor=VENDOR, count=n, memory_pct=100, cores_pct=100)


def mutation(request: DeviceRequest, config: VendorConfig) -> MutateResult:
    """What the container's spec must state: the defaulted count (and memory) in both
    ``limits`` and ``requests``, so that ``kubectl get pod`` shows what is scheduled.
    The webhook writes it, keeping quantities the user wrote that mean the same."""
    names = resource_names(DEFAULT_RESOURCES, config)
    values: dict[str, int | str] = {names.count: str(request.count)}
    if request.memory_mib:
        values[names.memory] = str(request.memory_mib)
    return MutateResult(resources=values)
