"""Reading an NVIDIA request from a container spec, defaults applied (PROTOCOL.md §1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    ResourceNames,
    VendorConfig,
    read_quantity,
    resource_names,
)

from . import VENDOR
from .names import CORES_ALIAS, DEFAULT_RESOURCES


@attrs.frozen(kw_only=True)
class RawRequest:
    """The NVIDIA quantities a container states, before defaults (None = not stated)."""

    count: int | None
    memory_mib: int | None
    memory_pct: int | None
    cores_pct: int | None

    @property
    def empty(self) -> bool:
        return all(
            v is None for v in (self.count, self.memory_mib, self.memory_pct, self.cores_pct)
        )


def read_raw(container: Mapping[str, Any], names: ResourceNames) -> RawRequest:
    """Read the stated quantities of one container.

    Raises:
        InvalidInputError: a quantity is malformed, fractional, negative or too large,
            or a percentage is above 100; the message names the container, the
            resource and the value.
    """

    cores = read_quantity(container, names.cores, maximum=100, unit="%")
    if cores is None and names.cores != CORES_ALIAS:
        cores = read_quantity(container, CORES_ALIAS, maximum=100, unit="%")
    return RawRequest(
        count=read_quantity(container, names.count),
        memory_mib=read_quantity(container, names.memory, unit="MiB"),
        memory_pct=read_quantity(container, names.memory_pct, maximum=100, unit="%")
        if names.memory_pct
        else None,
        cores_pct=cores,
    )


def parse_request(container: Mapping[str, Any], config: VendorConfig) -> DeviceRequest | None:
    """The container's NVIDIA request with HAMi's defaults, or None when it asks none.

    Defaults (PROTOCOL.md §1): memory unset (``gpumem`` absent or 0 and
    ``gpumem-percentage`` absent or 0) -> ``defaultMemory`` MiB if configured, else 100
    percent of each device; cores unset -> 100 (exclusive) when neither memory
    resource is stated or ``gpumem-percentage`` is 100, else ``defaultCores`` (HAMi
    ``defaultExclusiveCoreIfNeeded``: a stated ``gpumem-percentage: 0`` or ``gpumem``
    is shareable); memory or cores without a count ->
    ``defaultGPUNum`` devices.

    Raises:
        InvalidInputError: malformed quantities (see ``read_raw``), both ``gpumem`` and
            ``gpumem-percentage`` set, or a count of 0 with memory or cores.
    """
    names = resource_names(DEFAULT_RESOURCES, config)
    raw = read_raw(container, names)
    if raw.empty:
        return None
    cname = container.get("name", "?")
    memory_mib = raw.memory_mib or 0
    memory_pct = raw.memory_pct or 0
    if memory_mib and memory_pct:
        raise InvalidInputError(
            f"container {cname!r}: set either {names.memory} or {names.memory_pct}, not both"
        )
    if raw.count == 0:
        if memory_mib or memory_pct or raw.cores_pct:
            raise InvalidInputError(
                f"container {cname!r}: {names.count} is 0 but memory or cores are requested"
            )
        return None
    count = raw.count if raw.count is not None else config.default_count
    if not memory_mib and not memory_pct:
        if config.default_memory_mib:
            memory_mib = config.default_memory_mib
        else:
            memory_pct = 100
    if raw.cores_pct is not None:
        cores = raw.cores_pct
    elif raw.memory_pct == 100 or (raw.memory_pct is None and raw.memory_mib is None):
        # HAMi's webhook (defaultExclusiveCoreIfNeeded) writes cores 100 when no cores are
        # stated and the memory is the whole device: gpumem-percentage: 100 (limits or
        # requests), or neither memory resource stated. A stated 0 (whole memory by
        # default) or a gpumem is shareable: defaultCores.
        cores = 100
    else:
        cores = config.default_cores_pct
    return DeviceRequest(
        vendor=VENDOR, count=count, memory_mib=memory_mib, memory_pct=memory_pct, cores_pct=cores
    )
