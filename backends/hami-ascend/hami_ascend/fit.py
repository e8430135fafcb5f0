"""Placing one container's Ascend request on one node (PROTOCOL.md §1, §2, §5).

The checks, their order (health, cordon, UUID filter ``hami.io/use-<x>-uuid`` /
``hami.io/no-use-<x>-uuid``, then HAMi's ``pkg/device/ascend/device.go`` ``Fit`` order:
split count, memory, cores, exclusivity, compute exhausted), the policies and the hints
are the core's shared device-fit logic (``hami_core.devicefit``). Ascend adds, through
``FitRules`` built per chip model:

- models with modules of N chips (910C): whole modules only, a module being the chips
  with the same ``index // N`` (HAMi ``computeBestCombination910C``); too few whole
  modules is ``AllocatedCardsInsufficientRequest``;
- several chips of a model with HCCS groups (910A/910B: indexes 0-3 and 4-7): one group
  when one can hold them all (HAMi prefers chips of one NetworkID), the fullest such group
  under binpack and the emptiest under spread;
- core capacity: HAMi's Ascend device plugin registers ``devcore`` as the chip's AI Core
  count in template mode (``AdvertisedDevcore``: 20 for a 910B3), while requests state
  percent. A ``devcore`` equal to the model's AI Core count is therefore read as the whole
  chip, 100 %; any other value (ours: 100 x core scaling) is a percentage already.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from hami_core import devicefit
from hami_core.devicefit import DeviceFilters, FitRules, fit_devices
from hami_core.model import (
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    NodeInfo,
    ReasonCode,
)

from .models import ModelSpec
from .names import annotations_of, nouse_uuid_annotation, use_uuid_annotation

__all__ = ["core_capacity", "filters_of", "fit", "load", "rules"]


def core_capacity(usage: DeviceUsage, model: ModelSpec) -> int:
    """A chip's compute in percent (see the module docstring)."""
    dev = usage.device
    if model.ai_core and model.ai_core != 100 and dev.cores_pct == model.ai_core:
        return 100
    return dev.cores_pct


def _modules(
    feasible: Sequence[DeviceUsage],
    count: int,
    policy: DevicePolicy,
    *,
    model: ModelSpec,
    base: FitRules,
) -> list[DeviceUsage] | ReasonCode:
    """Whole modules only: every chip of a module (same ``index // N``) must be feasible."""
    n = model.chips_per_module
    by_module: dict[int, list[DeviceUsage]] = {}
    for u in feasible:
        by_module.setdefault(u.device.index // n, []).append(u)
    whole = {k: g for k, g in by_module.items() if len(g) == n}
    if len(whole) * n < count:
        return ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST
    picked = devicefit.rank_groups(whole, policy, base)[: count // n]
    return [u for k in sorted(picked) for u in sorted(whole[k], key=lambda u: u.device.index)]


@functools.cache
def rules(model: ModelSpec) -> FitRules:
    """Ascend's variations of the generic fit for one chip model."""
    hccs = model.hccs_group_size
    base = FitRules(
        cores_capacity=functools.partial(core_capacity, model=model),
        link_group=(lambda u: u.device.index // hccs) if hccs else None,
    )
    if model.chips_per_module <= 1:
        return base
    return attrs.evolve(base, choose=functools.partial(_modules, model=model, base=base))


def load(usage: DeviceUsage, model: ModelSpec) -> float:
    """How full a chip is (``hami_core.devicefit.load`` with the model's core capacity)."""
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
