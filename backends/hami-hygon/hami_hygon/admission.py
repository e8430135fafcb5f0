"""Admission (webhook) logic for Hygon DCU containers: defaults written into the spec.

HAMi's ``MutateAdmission`` for DCUs only detects the request; we also write the defaulted
request (count, memory when stated or defaulted, cores) into ``limits`` and ``requests``,
as for NVIDIA (PROTOCOL.md §1, §6), so that what ``kubectl get pod -o yaml`` shows is what
is scheduled. Quantities the user wrote stay as written.
"""

from __future__ import annotations

from hami_core.backend import (
    DeviceRequest,
    MutateResult,
    VendorConfig,
    denies_invalid_input,
    resource_names,
)

from .names import DEFAULT_RESOURCES


@denies_invalid_input
def mutate_container(config: VendorConfig, request: DeviceRequest) -> MutateResult | None:
    """What one container's spec must state: limits and requests both carry the
    defaulted request (a defaulted memory in the user's unit, MiB / ``memoryFactor``).

    Args:
        request: the container's parsed DCU request (the webhook parses each container
            once, through ``hami_parse_request``).
    Returns: the resources to write (the webhook hands ``hami_mutate`` only containers
        with a DCU request; an invalid one was denied when it was parsed).
    """
    req = request
    names = resource_names(DEFAULT_RESOURCES, config)
    values: dict[str, int | str] = {names.count: str(req.count), names.cores: str(req.cores_pct)}
    factor = max(1, int(config.options["memoryFactor"]))
    if req.memory_mib and req.memory_mib % factor == 0:
        values[names.memory] = str(req.memory_mib // factor)
    return MutateResult(resources=values)
