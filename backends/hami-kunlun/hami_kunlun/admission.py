"""Admission (webhook) logic for Kunlunxin containers: defaults and trimmed memory."""

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
from .names import DEFAULT_RESOURCES, whole_card_resource
from .requests import parse_request, read_raw


def mutate_container(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """Patch one container so limits and requests carry the request as scheduled.

    vXPU: writes the count (``kunlunxin.com/vxpu``, default ``defaultGPUNum``) and, when
    memory was stated or defaulted, the **trimmed** memory (``30000`` becomes ``49152``;
    above 49152 becomes ``98304``), as HAMi's ``MutateAdmission`` rewrites it, so quotas
    and ``kubectl get pod`` see the partition the pod really takes. Whole cards
    (``kunlunxin.com/xpu``): copies the count to requests. A stated count stays as
    written. When the backend option ``runtimeClassName`` is set and the pod has none,
    sets it.

    Returns: None for a container without Kunlunxin resources; a denial naming the
        container, the resource and the value for invalid ones.
    """
    try:
        req = parse_request(container, config)
        if req is None:
            return None
        raw = read_raw(container, config)
        tiers = options.memory_tiers(config)
    except InvalidInputError as exc:
        return MutateResult(denial=str(exc))
    names = resource_names(DEFAULT_RESOURCES, config)
    values: dict[str, object] = {}
    if raw.whole is not None:
        whole = whole_card_resource(config)
        values[whole] = resource_value(container, whole)
    else:
        values[names.count] = resource_value(container, names.count) or str(req.count)
        if raw.memory_mib or config.default_memory_mib:
            values[names.memory] = str(req.memory_mib or tiers[-1])

    patch: list[dict[str, Any]] = set_resources(container, container_path, values)
    runtime_class = str(config.options[options.RUNTIME_CLASS] or "")
    if runtime_class and not (pod.get("spec") or {}).get("runtimeClassName"):
        patch.append({"op": "add", "path": "/spec/runtimeClassName", "value": runtime_class})
    return MutateResult(patch=tuple(patch))
