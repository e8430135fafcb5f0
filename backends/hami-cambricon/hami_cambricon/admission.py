"""Admission (webhook) logic for Cambricon containers: defaults written into the spec."""

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

from . import options
from .names import DEFAULT_RESOURCES, MEMORY_UNIT_MIB
from .requests import parse_request, read_raw


def mutate_container(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """Patch one container so limits and requests both carry the defaulted request.

    Writes the count (``cambricon.com/vmlu``), the memory in 256 MiB units and the cores,
    under the names the container used (model-qualified ones such as
    ``cambricon.com/mlu370.smlu.vmemory`` stay model-qualified), so what ``kubectl get pod``
    shows is what is scheduled. Quantities the user wrote stay as written. When the
    backend option ``runtimeClassName`` is set and the pod has none, sets it (the
    handbook's per-vendor RuntimeClass injection, e.g. ``cambricon``).

    Returns: None for a container without Cambricon resources; a denial naming the
        container, the resource and the value for invalid ones.
    """
    try:
        req = parse_request(container, config)
        if req is None:
            return None
        names = resource_names(DEFAULT_RESOURCES, config)
        raw = read_raw(container, names, config)
    except InvalidInputError as exc:
        return MutateResult(denial=str(exc))
    values: dict[str, object] = {names.count: str(req.count)}
    if req.memory_mib:
        values[raw.memory_name] = str(req.memory_mib // MEMORY_UNIT_MIB)
    values[raw.cores_name] = str(req.cores_pct)
    for name in list(values):
        stated = resource_value(container, name)
        if stated is not None:
            values[name] = stated

    patch: list[dict[str, Any]] = set_resources(container, container_path, values)
    runtime_class = str(config.options[options.RUNTIME_CLASS] or "")
    if runtime_class and not (pod.get("spec") or {}).get("runtimeClassName"):
        patch.append({"op": "add", "path": "/spec/runtimeClassName", "value": runtime_class})
    return MutateResult(patch=tuple(patch))
