"""Placing one container's Cambricon request on one node (PROTOCOL.md §1, §2, §5).

The checks, their order (health, cordon, type, UUID, split count, memory, cores,
exclusivity, compute exhausted: HAMi's, so reason codes match HAMi's), the policies and
the hints are the core's shared device-fit logic (``hami_core.backend.fit``). MLUs carry
no link scores, so ``topology-aware`` falls back to spread. Memory is compared in MiB
(``request.memory_mib`` is already units x 256).

Cambricon specifics, given to the core as filters and ``FitRules``:

- Type filters: ``cambricon.com/use-mlutype`` / ``nouse-mlutype`` (HAMi), the handbook's
  ``hami.io/gpu-type`` (where ``cambricon`` or ``mlu`` names the vendor, any model), and
  the model named by model-qualified resources (``cambricon.com/mlu370.smlu.vmemory``
  places on MLU370 cards only). Model tokens match whole words of the model
  (``mlu370`` matches ``MLU370-X8`` and HAMi's ``MLU-MLU370-X4``, not ``MLU3700``).
- UUID filters: ``cambricon.com/use-gpuuuid`` / ``nouse-gpuuuid`` and handbook aliases.
- An MLU whose inventory states ``devcore`` 0 does not account compute: HAMi's
  documented ``hami.io/node-mlu-register`` example registers MLU370-X4 cards with
  ``devcore`` 0, so cores are not checked on such a card (memory and sharers still are).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.backend import FilterKeys, VendorConfig, VendorFit

from .names import DEVICE_TYPE, NOUSE_TYPE, NOUSE_UUID, USE_TYPE, USE_UUID, VENDOR_TOKENS
from .requests import pod_models

__all__ = ["FILTERS", "RULES", "fit", "type_matches"]


def _models(pod: Mapping[str, Any], config: VendorConfig | None) -> frozenset[str]:
    """The MLU models the pod's resource names qualify (``requests.pod_models``)."""
    return pod_models(pod, config or VendorConfig())


#: Type tokens match whole words of the model (words end at the start/end, spaces, ``-``
#: and ``_``): ``MLU370`` matches ``MLU370-X8``; ``MLU370-X8`` matches ``MLU370-X8`` but
#: not ``MLU370-X4``; ``MLU37`` matches neither. ``cambricon`` and ``mlu`` match every MLU
#: (the handbook's ``hami.io/gpu-type: "cambricon"``).
FILTERS = attrs.evolve(
    FilterKeys(use_type=USE_TYPE, nouse_type=NOUSE_TYPE, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID),
    vendor_tokens=VENDOR_TOKENS,
)
type_matches = FILTERS.type_matches

#: Cambricon's variation of the generic fit: devcore 0 means compute is not accounted.
RULES = DEVICE_TYPE.fit_rules

#: ``fit(request, node, usage, pod, policy, config)``: ``request.count`` distinct MLUs on
#: the node, or why not (``hami_core.backend.fit.fit_devices`` has the checks, their order
#: and the hints); the pod's filters are its annotations and the models its resource
#: names qualify.
fit: VendorFit[VendorConfig] = VendorFit(filters=FILTERS, require_type=_models, rules=RULES)
