"""Placing one container's Ascend request on one node (PROTOCOL.md §1, §2, §5).

The checks, their order (health, cordon, UUID filter ``hami.io/use-<x>-uuid`` /
``hami.io/no-use-<x>-uuid``, then HAMi's ``pkg/device/ascend/device.go`` ``Fit`` order:
split count, memory, cores, exclusivity, compute exhausted), the policies and the hints
are the core's shared device-fit logic (``hami_core.backend.fit``); Ascend's variations
per chip model are ``rules.rules`` (modules, HCCS groups, AI Core capacity).

``fit(request, node, usage, pod, policy, model)`` chooses ``request.count`` distinct chips
of ``model`` (the ``ModelSpec`` of ``request.vendor``) on the node, or says per chip why
not; on a no-fit ``largest_memory_mib`` / ``largest_cores_pct`` say what would have
fitted. HAMi has no Ascend type filter, so the pod's filters are its UUID lists.
"""

from __future__ import annotations

from hami_core.backend import GENERIC, FilterKeys, FitCall, FitRules, VendorFit

from .models import ModelSpec
from .names import nouse_uuid_annotation, use_uuid_annotation
from .rules import core_capacity, rules

__all__ = ["core_capacity", "filters_of", "fit", "rules"]


def chip_filters(vendor: str) -> FilterKeys:
    """The UUID filter annotations of one chip model (its vendor key)."""
    return FilterKeys(
        use_uuid=use_uuid_annotation(vendor), nouse_uuid=nouse_uuid_annotation(vendor)
    )


def model_rules(call: FitCall[ModelSpec | None]) -> FitRules:
    """The chip model's rules (``rules.rules``); the generic ones without a model."""
    return rules(call.extra) if call.extra is not None else GENERIC


fit: VendorFit[ModelSpec] = VendorFit(filters=chip_filters, rules=model_rules)
filters_of = fit.filters_of
