"""Placing one container's NVIDIA request on one node (PROTOCOL.md §1, §2, §5).

The checks, policies and hints are the core's shared device-fit logic
(``hami_core.backend.fit``); this module reads the NVIDIA filter annotations.
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
    fit_devices,
    load,
    type_matches,
)

from . import mig
from .names import DEVICE_TYPE, NOUSE_TYPE, NOUSE_UUID, NUMA_BIND, USE_TYPE, USE_UUID, VGPU_MODE

__all__ = ["filters_of", "fit", "fit_nodes", "load", "type_matches"]


def filters_of(pod: Mapping[str, Any]) -> DeviceFilters:
    """The pod's NVIDIA device filters (HAMi's annotation names and the handbook's;
    ``nvidia.com/vgpu-mode`` lists the inventory modes the pod accepts)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return DeviceFilters.from_annotations(
        annotations,
        use_type=USE_TYPE,
        nouse_type=NOUSE_TYPE,
        use_uuid=USE_UUID,
        nouse_uuid=NOUSE_UUID,
        numa_bind=NUMA_BIND,
        mode=VGPU_MODE,
    )


def fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult:
    """Choose ``request.count`` distinct GPUs on ``node``, or explain why not.

    See ``hami_core.backend.fit.fit_devices`` for the checks, their order and the hints;
    a GPU in mig mode takes an instance of one of its MIG profiles (``mig``).
    """
    result = fit_devices(request, node, usage, filters_of(pod), policy, DEVICE_TYPE.fit_rules)
    return mig.with_instances(result, usage, request)


def fit_nodes(
    request: DeviceRequest,
    nodes: Sequence[tuple[NodeInfo, Sequence[DeviceUsage], Sequence[Any]]],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> list[FitResult]:
    """``fit`` on every node of ``nodes`` (``(node, usage, allocated)``), the pod's
    filter annotations read once rather than once per node; each answer is the one
    ``fit`` gives for that node."""
    filters = filters_of(pod)
    rules = DEVICE_TYPE.fit_rules
    return [
        mig.with_instances(
            fit_devices(request, node, usage, filters, policy, rules), usage, request
        )
        for node, usage, _ in nodes
    ]
