"""Placing one container's Kunlunxin request on one node (PROTOCOL.md §1, §2, §5).

The checks, their order (health, cordon, type, UUID, split count, memory, cores,
exclusivity), the policies and the hints are the core's shared device-fit logic
(``hami_core.backend.fit``); Kunlunxin adds, through ``FitRules``:

- Partition (HAMi ``FitVXPU``, ``pkg/device/kunlun/vdevice.go``): a P800 is cut into
  vXPUs of one size. An XPU that already holds vXPUs takes another only when the mean
  size of those vXPUs equals the new one (a card cut in quarters takes no half). The
  reason is ``CardTypeMismatch``: the card's current partition type differs.
- Whole cards need an unused XPU (``ExclusiveDeviceAllocateConflict`` otherwise, or
  ``CardInsufficientMemory`` when memory is already held).
- Topology (``topology.select``): on a P800 OAM node (XPUs 0..7) with ``topologyAware``
  on, whole-card requests and vXPU requests of two or more XPUs take HAMi's
  topology-aware sets; when no such set exists among the feasible XPUs the node reason
  is ``NumaNotFit`` (HAMi's code for it). Otherwise, and for single vXPUs, XPUs are
  ranked by the device policy; ties go to the lower index.
- Filters: ``hami.io/use-xpu-uuid`` / ``hami.io/no-use-xpu-uuid`` (HAMi) and the
  handbook's UUID aliases; the handbook's ``hami.io/gpu-type`` (``kunlunxin``, ``kunlun``
  or ``xpu`` name the vendor; other tokens match whole words of the model, ``P800``).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from hami_core.backend import (
    Chooser,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FilterKeys,
    FitCall,
    FitRules,
    ReasonCode,
    VendorConfig,
    VendorFit,
)

from . import options, topology
from .names import NOUSE_UUID, USE_TYPE, USE_UUID, VENDOR_TOKENS
from .requests import is_whole_card

__all__ = ["FILTERS", "filters_of", "fit", "partition_reason", "type_matches"]


#: The pod's XPU filters (no type exclusion list: HAMi has none for Kunlunxin); a type
#: token is a vendor token or whole words of the model (``P800`` matches ``P800`` and
#: ``P800-OAM``, not ``P8000``).
FILTERS = FilterKeys(
    use_type=USE_TYPE, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID, vendor_tokens=VENDOR_TOKENS
)
type_matches = FILTERS.type_matches


def partition_reason(usage: DeviceUsage, request: DeviceRequest) -> ReasonCode | None:
    """The Kunlunxin checks after the generic ones: whole cards need an unused XPU, and
    an XPU holding vXPUs takes only vXPUs of the same size (their mean)."""
    if request.cores_pct == 100 and usage.used_count > 0:
        return ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    memory = request.memory_on(usage.device)
    if usage.used_count > 0 and Fraction(usage.used_memory_mib, usage.used_count) != memory:
        return ReasonCode.CARD_TYPE_MISMATCH
    return None


def _topology_chooser(
    usage: Sequence[DeviceUsage], request: DeviceRequest, config: VendorConfig | None
) -> Chooser | None:
    """HAMi's topology-aware sets where they apply (see the module docstring), else None."""
    if not (
        config is not None
        and config.options[options.TOPOLOGY_AWARE]
        and (request.count >= 2 or is_whole_card(request))
        and topology.is_oam_node(u.device.index for u in usage)
    ):
        return None

    def choose(
        feasible: Sequence[DeviceUsage], count: int, policy: DevicePolicy
    ) -> list[DeviceUsage] | ReasonCode:
        by_index = {u.device.index: u for u in feasible}
        picked = topology.select(by_index.keys(), count)
        return ReasonCode.NUMA_NOT_FIT if picked is None else [by_index[i] for i in picked]

    return choose


def xpu_rules(call: FitCall[VendorConfig | None]) -> FitRules:
    """The partition check and, where they apply, the topology-aware sets (``extra``: the
    backend's section, for ``topologyAware``)."""
    return FitRules(
        extra_check=partition_reason,
        choose=_topology_chooser(call.usage, call.request, call.extra),
    )


#: ``fit(request, node, usage, pod, policy, config)``: ``request.count`` distinct XPUs on
#: the node (the request's vXPU memory already trimmed, MiB), or why not, every rejected
#: XPU with its reason; ``config``: the backend's section (``topologyAware``).
fit: VendorFit[VendorConfig] = VendorFit(filters=FILTERS, rules=xpu_rules)
filters_of = fit.filters_of
