"""Admission (webhook) logic for Cambricon containers: defaults written into the spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import MutateResult, VendorConfig, denies_invalid_input, resource_names

from . import options
from .names import DEFAULT_RESOURCES, MEMORY_UNIT_MIB
from .requests import parse_request, read_raw


@denies_invalid_input
def mutate_container(
    pod: Mapping[str, Any], container: Mapping[str, Any], config: VendorConfig
) -> MutateResult | None:
    """What one container's spec must state: limits and requests both carry the
    defaulted request.

    Writes the count (``cambricon.com/vmlu``), the memory in 256 MiB units and the cores,
    under the names the container used (model-qualified ones such as
    ``cambricon.com/mlu370.smlu.vmemory`` stay model-qualified), so what ``kubectl get pod``
    shows is what is scheduled. Quantities the user wrote stay as written. When the
    backend option ``runtimeClassName`` is set and the pod has none, sets it (the
    handbook's per-vendor RuntimeClass injection, e.g. ``cambricon``).

    Returns: None for a container without Cambricon resources; an invalid one's
        ``InvalidInputError`` becomes its denial (``denies_invalid_input``).
    """
    req = parse_request(container, config)
    if req is None:
        return None
    names = resource_names(DEFAULT_RESOURCES, config)
    raw = read_raw(container, names, config)
    values: dict[str, int | str] = {names.count: str(req.count)}
    if req.memory_mib:
        values[raw.memory_name] = str(req.memory_mib // MEMORY_UNIT_MIB)
    values[raw.cores_name] = str(req.cores_pct)
    return MutateResult(
        resources=values,
        runtime_class_name=str(config.options[options.RUNTIME_CLASS] or ""),
    )
