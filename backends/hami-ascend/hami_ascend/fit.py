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

Before it, HAMi's mode check (``mode_not_fit``): a pod in ``hami-core`` vNPU mode fits no
chip of a node that does not run that mode (``inventory.runs_hami_core``): every chip
``ModeNotFit`` (HAMi counts the node once, ``1/<chips> ModeNotFit``; the same on a
one-chip node). A ``template`` pod fits either kind of node (HAMi ``TestDevices_Fit``).
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.backend import GENERIC, DeviceUsage, FilterKeys, FitResult, ReasonCode, VendorFit

from .inventory import HAMI_CORE_NODE
from .models import ModelSpec
from .names import nouse_uuid_annotation, use_uuid_annotation
from .rules import core_capacity, rules

__all__ = ["core_capacity", "filters_of", "fit", "mode_not_fit", "rules"]


def chip_filters(vendor: str) -> FilterKeys:
    """The UUID filter annotations of one chip model (its vendor key)."""
    return FilterKeys(
        use_uuid=use_uuid_annotation(vendor), nouse_uuid=nouse_uuid_annotation(vendor)
    )


#: The chip model (``extra``) gives the rules (``rules.rules``); no model, the generic ones.
fit: VendorFit[ModelSpec] = VendorFit(
    filters=chip_filters, rules=lambda call: GENERIC if call.extra is None else rules(call.extra)
)
filters_of = fit.filters_of


def mode_not_fit(usage: Sequence[DeviceUsage]) -> FitResult | None:
    """For a pod in hami-core vNPU mode: every chip ``ModeNotFit`` when the node does not
    run that mode (its chips' ``HAMI_CORE_NODE`` fact is "false"), else None."""
    if any(u.device.info(HAMI_CORE_NODE) == "false" for u in usage):
        return FitResult(device_reasons={u.device.uuid: ReasonCode.MODE_NOT_FIT for u in usage})
    return None
