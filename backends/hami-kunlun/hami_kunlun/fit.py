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

from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from hami_core.backend import (
    Chooser,
    DeviceFilters,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    FitRules,
    NodeInfo,
    ReasonCode,
    VendorConfig,
    fit_devices,
    load,
)
from hami_core.backend import fit as devicefit

from . import options, topology
from .names import NOUSE_UUID, USE_TYPE, USE_UUID, VENDOR_TOKENS, pod_annotations
from .requests import is_whole_card

__all__ = ["filters_of", "fit", "load", "partition_reason", "type_matches"]


def type_matches(model: str, token: str) -> bool:
    """Whether an XPU model matches a type-filter token: a vendor token, or whole words
    of the model (``P800`` matches ``P800`` and ``P800-OAM``, not ``P8000``)."""
    return token.lower() in VENDOR_TOKENS or devicefit.type_matches(model, token)


def filters_of(pod: Mapping[str, Any]) -> DeviceFilters:
    """The pod's XPU filters (no type exclusion list: HAMi has none for Kunlunxin)."""
    return DeviceFilters.from_annotations(
        pod_annotations(pod),
        use_type=USE_TYPE,
        use_uuid=USE_UUID,
        nouse_uuid=NOUSE_UUID,
        vendor_tokens=VENDOR_TOKENS,
    )


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
    usage: Sequence[DeviceUsage], request: DeviceRequest, config: VendorConfig
) -> Chooser | None:
    """HAMi's topology-aware sets where they apply (see the module docstring), else None."""
    if not (
        config.options[options.TOPOLOGY_AWARE]
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


def fit(
    request: DeviceRequest,
    node: NodeInfo,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
    config: VendorConfig,
) -> FitResult:
    """Choose ``request.count`` distinct XPUs on ``node``, or explain why not.

    Args:
        request: one container's Kunlunxin request (vXPU memory already trimmed, MiB).
        node: the node.
        usage: the node's XPUs with current usage, index order.
        pod: the pod (UUID and type filters).
        policy: the device policy (single vXPUs, and nodes that are not 8-XPU OAM).
        config: the backend's section (``topologyAware``).

    Returns:
        A ``FitResult``; on a no-fit every rejected XPU has its reason.
    """
    rules = FitRules(extra_check=partition_reason, choose=_topology_chooser(usage, request, config))
    return fit_devices(request, node, usage, filters_of(pod), policy, rules)
