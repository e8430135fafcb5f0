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
    ReasonCode,
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


#: The order modes are tried in for a container of several GPUs on a node of mixed modes.
MODE_ORDER = ("hami-core", "mps", "mig")


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
    return _fit(request, node, usage, filters_of(pod), policy)


def _fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    filters: DeviceFilters,
    policy: DevicePolicy,
) -> FitResult:
    """``fit`` with the filters read. A container's GPUs are all in one mode (the device
    plugin serves a container in one mode): on a node whose GPUs are in several modes
    (static MIG GPUs beside shared ones) a request of several GPUs takes them from the
    first mode of ``MODE_ORDER`` that holds it whole."""
    rules = DEVICE_TYPE.fit_rules
    whole = fit_devices(request, node, usage, filters, policy, rules)
    modes = {u.device.mode for u in usage}
    if request.count > 1 and len(modes) > 1 and whole.fits:
        for mode in sorted(modes, key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else 9, m)):
            group = [u for u in usage if u.device.mode == mode]
            if len(group) < request.count:
                continue
            result = fit_devices(request, node, group, filters, policy, rules)
            if result.fits:
                return mig.with_instances(result, group, request)
        return FitResult(node_reason=ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST)
    return mig.with_instances(whole, usage, request)


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
    return [_fit(request, node, usage, filters, policy) for node, usage, _ in nodes]
