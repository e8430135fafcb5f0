"""Reading and defaulting an Iluvatar request (HAMi 2.10 ``pkg/device/iluvatar``).

- A container is the chip's when it names ``iluvatar.ai/<chip>-vgpu`` (limits, else
  requests); the count must be above 0 (a container asking 0 GPUs with memory or cores
  is refused; HAMi would place it nowhere).
- ``iluvatar.ai/<chip>.vMem`` is per GPU, in 256 MiB units (HAMi ``MemoryFactor``);
  unset: 100 % of each GPU. ``16Gi`` as units overflows and is refused, as HAMi does.
- ``iluvatar.ai/<chip>.vCore`` is percent per GPU, default 0; with more than one GPU the
  webhook writes ``count x 100`` (HAMi's ``MutateAdmission``), i.e. whole GPUs, and a
  stated value above ``count x 100`` is refused. With one GPU, above 100 is refused
  (HAMi clamps it to 100 in ``Fit``).
- The webhook adds ``SOL_CONTINER_NAME`` = the container name when the container has
  none (HAMi does; Iluvatar's runtime reads it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DeviceRequest,
    InvalidInputError,
    MutateResult,
    ResourceNames,
    denies_invalid_input,
    read_quantity,
    resource_value,
    stated_quantities,
)

from . import CHIPS
from .names import CONTAINER_NAME_ENV, MEMORY_UNIT_MIB, chip_resources


def chip_of(container: Mapping[str, Any]) -> tuple[str, ResourceNames] | None:
    """The chip whose count resource the container names (the first, in ``CHIPS``
    order), or None."""
    for chip in CHIPS:
        names = chip_resources(chip)
        if resource_value(container, names.count) is not None:
            return chip, names
    return None


def parse_request(container: Mapping[str, Any]) -> DeviceRequest | None:
    """The container's request for one chip, per GPU; None when it names no chip.

    Raises:
        InvalidInputError: a count of 0, a malformed quantity, memory overflowing int32
            MiB, or cores above 100 per GPU; the message names the container, the
            resource and the value.
    """
    found = chip_of(container)
    if found is None:
        return None
    chip, names = found
    cname = container.get("name", "?")
    count = read_quantity(container, names.count)
    if not count:
        raise InvalidInputError(f"container {cname!r}: {names.count} must be greater than 0")
    units = read_quantity(container, names.memory, maximum=(2**31 - 1) // MEMORY_UNIT_MIB)
    cores = read_quantity(container, names.cores)
    if cores is not None and cores > 100 * count:
        raise InvalidInputError(
            f"container {cname!r}: {names.cores} {cores} is above 100 per GPU "
            f"({count} GPU{'s' if count > 1 else ''})"
        )
    cores_pct = 100 if count > 1 else (cores or 0)
    if units:
        return DeviceRequest(
            vendor=chip, count=count, memory_mib=units * MEMORY_UNIT_MIB, cores_pct=cores_pct
        )
    return DeviceRequest(vendor=chip, count=count, memory_pct=100, cores_pct=cores_pct)


@denies_invalid_input
def mutate(container: Mapping[str, Any], container_path: str) -> MutateResult | None:
    """HAMi's ``MutateAdmission``: ``vCore = count x 100`` for several GPUs, the stated
    quantities copied to requests, ``SOL_CONTINER_NAME`` added.

    Returns: None for a container naming no chip; a denial for an illegal value.
    """
    req = parse_request(container)
    found = chip_of(container)
    if req is None or found is None:
        return None
    names = found[1]
    values = stated_quantities(container, (names.count, names.memory, names.cores))
    if req.count > 1:
        values[names.cores] = str(req.count * 100)
    cname = container.get("name")
    env = {CONTAINER_NAME_ENV: str(cname)} if cname else {}
    return MutateResult(resources=values, env=env)
