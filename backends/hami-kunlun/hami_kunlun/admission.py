"""Admission (webhook) logic for Kunlunxin containers: defaults and trimmed memory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import MutateResult, VendorConfig, denies_invalid_input, resource_names

from . import options
from .names import DEFAULT_RESOURCES, whole_card_resource
from .requests import parse_request, read_raw


@denies_invalid_input
def mutate_container(
    pod: Mapping[str, Any], container: Mapping[str, Any], config: VendorConfig
) -> MutateResult | None:
    """What one container's spec must state: limits and requests carry the request as
    scheduled.

    vXPU: writes the count (``kunlunxin.com/vxpu``, default ``defaultGPUNum``) and, when
    memory was stated or defaulted, the **trimmed** memory (``30000`` becomes ``49152``;
    above 49152 becomes ``98304``), as HAMi's ``MutateAdmission`` rewrites it, so quotas
    and ``kubectl get pod`` see the partition the pod really takes. Whole cards
    (``kunlunxin.com/xpu``): copies the count to requests. A stated count stays as
    written. When the backend option ``runtimeClassName`` is set and the pod has none,
    sets it.

    Returns: None without Kunlunxin resources, else the values above (a denial,
        through ``denies_invalid_input``, for an invalid quantity or memory tier).
    """
    req = parse_request(container, config)
    if req is None:
        return None
    raw = read_raw(container, config)
    tiers = options.memory_tiers(config)
    names = resource_names(DEFAULT_RESOURCES, config)
    values: dict[str, int | str] = {}
    if raw.whole is not None:
        values[whole_card_resource(config)] = str(raw.whole)
    else:
        values[names.count] = str(req.count)
        if raw.memory_mib or config.default_memory_mib:
            values[names.memory] = str(req.memory_mib or tiers[-1])
    return MutateResult(
        resources=values,
        runtime_class_name=str(config.options[options.RUNTIME_CLASS] or ""),
    )
