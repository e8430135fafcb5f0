"""Fit for Iluvatar GPUs: the core's checks in HAMi's order (``hami_core.backend.fit``)
with the chip's UUID filters ``hami.io/use-<chip>-uuid`` / ``hami.io/no-use-<chip>-uuid``
(HAMi 2.10 ``pkg/device/iluvatar/device.go`` ``Fit``; the chip itself is the vendor key,
so HAMi's ``checkType`` is the core's dispatch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    DeviceFilters,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    NodeInfo,
    fit_devices,
)

from .names import nouse_uuid, use_uuid


def fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult:
    """Choose ``request.count`` distinct GPUs of the chip ``request.vendor``, or say per
    GPU why not."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    filters = DeviceFilters.from_annotations(
        annotations,
        use_uuid=(use_uuid(request.vendor),),
        nouse_uuid=(nouse_uuid(request.vendor),),
    )
    return fit_devices(request, node, usage, filters, policy)
