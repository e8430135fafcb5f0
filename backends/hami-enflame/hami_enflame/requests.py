"""Reading Enflame requests (HAMi 2.10 ``pkg/device/enflame`` ``GenerateResourceRequests``
and ``MutateAdmission`` of ``device.go`` and ``gcu.go``).

- ``enflame.com/gcu`` = N whole GCUs (> 0);
- ``enflame.com/drs-gcu`` = a DRS slice count (> 0): one GCU, the profile of that size;
- else ``enflame.com/gcu-memory`` (> 0; GiB, or MiB when above twice the largest
  profile's GiB) and/or ``enflame.com/gcu-core`` (1..100 percent): one GCU, the smallest
  profile holding both.

A DRS request is resolved against the node's profiles at fit, so its ``DeviceRequest``
carries what was asked in ``custom`` (``drsSlice`` or ``requestMemory``) with the cores
asked in ``cores_pct``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    MutateResult,
    denies_invalid_input,
    read_quantity,
    stated_quantities,
)

from . import DRS, GCU
from .names import DRS_RESOURCES, GCU_RESOURCES, REQUEST_MEMORY, SLICE


def _positive(container: Mapping[str, Any], name: str) -> int | None:
    value = read_quantity(container, name)
    if value is not None and value <= 0:
        raise InvalidInputError(
            f"container {container.get('name', '?')!r}: {name} must be greater than 0"
        )
    return value


def parse_request(container: Mapping[str, Any]) -> DeviceRequest | None:
    """The container's Enflame request, or None when it names no Enflame resource.

    Raises:
        InvalidInputError: a count, slice count or memory of 0 or below, cores outside
            1..100, or a malformed quantity.
    """
    gcus = _positive(container, GCU_RESOURCES.count)
    if gcus is not None:
        return DeviceRequest(vendor=GCU, count=gcus, memory_pct=100, cores_pct=100)
    slices = _positive(container, DRS_RESOURCES.count)
    if slices is not None:
        return DeviceRequest(vendor=DRS, count=1, memory_pct=100, custom=((SLICE, str(slices)),))
    memory = _positive(container, DRS_RESOURCES.memory)
    cores = read_quantity(container, DRS_RESOURCES.cores)
    if memory is None and cores is None:
        return None
    if cores is not None and not 0 < cores <= 100:
        raise InvalidInputError(
            f"container {container.get('name', '?')!r}: {DRS_RESOURCES.cores} must be in "
            f"range (0,100], got {cores}"
        )
    return DeviceRequest(
        vendor=DRS,
        count=1,
        memory_pct=100,
        cores_pct=cores or 0,
        custom=((REQUEST_MEMORY, str(memory or 0)),),
    )


@denies_invalid_input
def mutate(container: Mapping[str, Any], container_path: str) -> MutateResult | None:
    """Validate; copy the stated Enflame quantities to limits and requests (a denial
    for an invalid one)."""
    req = parse_request(container)
    if req is None:
        return None
    names = GCU_RESOURCES if req.vendor == GCU else DRS_RESOURCES
    return MutateResult(resources=stated_quantities(container, names.all()))
