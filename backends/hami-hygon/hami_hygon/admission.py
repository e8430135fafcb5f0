"""Admission (webhook) logic for Hygon DCU containers: defaults written into the spec.

HAMi's ``MutateAdmission`` for DCUs only detects the request; we also write the defaulted
request (count, memory when stated or defaulted, cores) into ``limits`` and ``requests``,
as for NVIDIA (PROTOCOL.md §1, §6), so that what ``kubectl get pod -o yaml`` shows is what
is scheduled. Quantities the user wrote stay as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    InvalidInputError,
    MutateResult,
    VendorConfig,
    resource_names,
    resource_value,
    set_resources,
)

from .names import DEFAULT_RESOURCES
from .requests import parse_request


def mutate_container(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """Patch one container: limits and requests both carry the defaulted request.

    Returns: None for a container without DCU resources; a denial naming the container,
        the resource and the value for invalid ones.
    """
    try:
        req = parse_request(container, config)
    except InvalidInputError as exc:
        return MutateResult(denial=str(exc))
    if req is None:
        return None
    names = resource_names(DEFAULT_RESOURCES, config)
    values: dict[str, object] = {names.count: str(req.count), names.cores: str(req.cores_pct)}
    factor = max(1, int(config.options["memoryFactor"]))
    if req.memory_mib and req.memory_mib % factor == 0:
        # a defaulted memory is written in the user's unit (MiB / memoryFactor)
        values[names.memory] = str(req.memory_mib // factor)
    for name in (names.count, names.memory, names.cores):
        stated = resource_value(container, name)
        if stated is not None:
            values[name] = stated

    patch: list[dict[str, Any]] = set_resources(container, container_path, values)
    return MutateResult(patch=tuple(patch))
