"""Placing one container's DCU request on one node (PROTOCOL.md §1, §2, §5).

The checks, their order (health, cordon, type, UUID, then HAMi's ``pkg/device/hygon/
device.go`` ``Fit`` order: split count, memory, cores, exclusivity, compute exhausted),
the policies and the hints are the core's shared device-fit logic
(``hami_core.backend.fit``). DCUs publish no link scores, so ``topology-aware`` falls back
to spread. This module names the Hygon filter annotations: ``hygon.com/use-dcutype`` /
``nouse-dcutype`` (model) and ``hygon.com/use-gpuuuid`` / ``nouse-gpuuuid`` (UUID).

Type filters match whole words of the model, case-insensitively (``Z100`` selects
``DCU-Z100`` but not ``DCU-Z100L``; ``K100`` selects ``DCU-K100_AI``). HAMi matches by
substring, which lets ``Z100`` select a ``Z100L``; PROTOCOL.md §5 asks for exact tokens.
"""

from __future__ import annotations

from hami_core.backend import FilterKeys, VendorFit, type_matches

from .names import NOUSE_TYPE, NOUSE_UUID, USE_TYPE, USE_UUID

__all__ = ["filters_of", "fit", "type_matches"]

#: The pod's type and UUID filter annotations.
FILTERS = FilterKeys(
    use_type=USE_TYPE, nouse_type=NOUSE_TYPE, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID
)

#: ``fit(request, node, usage, pod, policy)``: the core's fit under the Hygon filters.
fit: VendorFit[None] = VendorFit(filters=FILTERS)
filters_of = fit.filters_of
