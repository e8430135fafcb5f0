"""Ascend's variations of the shared fit steps (``FitRules``), one set per chip model.

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

The rules ride on each model's ``DeviceTypeInfo``, so the core's default score reads
the chips as fit does.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import attrs

from hami_core.backend import DevicePolicy, DeviceUsage, FitRules, ReasonCode, rank_groups

from .models import ModelSpec


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
    picked = rank_groups(whole, policy, base)[: count // n]
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
