"""Placing one container's DCU request on one node (PROTOCOL.md §1, §2, §5).

The checks, their order (health, cordon, type, UUID, then HAMi's ``pkg/device/hygon/
device.go`` ``Fit`` order: split count, memory, cores, exclusivity, compute exhausted),
the policies and the hints are the core's shared device-fit logic
(``hami_core.backend.fit``). DCUs publish no link scores, so ``topology-aware`` falls back
to spread. This module reads the Hygon filter annotations: ``hygon.com/use-dcutype`` /
``nouse-dcutype`` (model) and ``hygon.com/use-gpuuuid`` / ``nouse-gpuuuid`` (UUID).

Type filters match whole words of the model, case-insensitively (``Z100`` selects
``DCU-Z100`` but not ``DCU-Z100L``; ``K100`` selects ``DCU-K100_AI``). HAMi matches by
substring, which lets ``Z100`` select a ``Z100L``; PROTOCOL.md §5 asks for exact tokens.
"""

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
    annotations_of,
    fit_devices,
    load,
    type_matches,
)

from .names import NOUSE_TYPE, NOUSE_UUID, USE_TYPE, USE_UUID

__all__ = ["filters_of", "fit", "load", "type_matches"]


def filters_of(pod: Mapping[str, Any]) -> DeviceFilters:
    """The pod's DCU filters (HAMi's Hygon annotation names)."""
    return DeviceFilters.from_annotations(
        annotations_of(pod),
        use_type=(USE_TYPE,),
        nouse_type=(NOUSE_TYPE,),
        use_uuid=(USE_UUID,),
        nouse_uuid=(NOUSE_UUID,),
    )


def fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult:
    """Choose ``request.count`` distinct DCUs on ``node``, or explain why not.

    See ``hami_core.backend.fit.fit_devices`` for the checks, their order and the hints.
    """
    return fit_devices(request, node, usage, filters_of(pod), policy)
