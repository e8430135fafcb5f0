"""Placing one container's Ascend request on one node (PROTOCOL.md §1, §2, §5).

The checks, their order (health, cordon, UUID filter ``hami.io/use-<x>-uuid`` /
``hami.io/no-use-<x>-uuid``, then HAMi's ``pkg/device/ascend/device.go`` ``Fit`` order:
split count, memory, cores, exclusivity, compute exhausted), the policies and the hints
are the core's shared device-fit logic (``hami_core.backend.fit``); Ascend's variations
per chip model are ``rules.rules`` (modules, HCCS groups, AI Core capacity).
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
)
from hami_core.backend import fit as devicefit

from .models import ModelSpec
from .names import nouse_uuid_annotation, use_uuid_annotation
from .rules import core_capacity, rules

__all__ = ["core_capacity", "filters_of", "fit", "load", "rules"]


def load(usage: DeviceUsage, model: ModelSpec) -> float:
    """How full a chip is (``hami_core.backend.fit.load`` with the model's core capacity)."""
    return devicefit.load(usage, rules(model))


def filters_of(pod: Mapping[str, Any], vendor: str) -> DeviceFilters:
    """The pod's chip filters for one model (UUIDs only: HAMi has no Ascend type filter)."""
    return DeviceFilters.from_annotations(
        annotations_of(pod),
        use_uuid=(use_uuid_annotation(vendor),),
        nouse_uuid=(nouse_uuid_annotation(vendor),),
    )


def fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
    model: ModelSpec,
) -> FitResult:
    """Choose ``request.count`` distinct chips of ``model`` on ``node``, or say why not.

    Args:
        request: one container's request for ``model.vendor``.
        node: the node.
        usage: the node's chips of ``model.vendor`` with current usage.
        pod: the pod (UUID filters).
        policy: the device policy.
        model: the chip model of ``request.vendor``.

    Returns:
        A ``FitResult``; on a no-fit every rejected chip has its reason, and
        ``largest_memory_mib`` / ``largest_cores_pct`` say what would have fitted.
    """
    return fit_devices(request, node, usage, filters_of(pod, model.vendor), policy, rules(model))
