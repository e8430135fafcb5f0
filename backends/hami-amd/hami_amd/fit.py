"""Fit for AMD GPUs (HAMi 2.10 ``pkg/device/amd/device.go`` ``Fit``).

The core's checks (``hami_core.backend.fit``) for health, cordon, type, UUID, split count
and memory, with AMD's compute rule in place of the generic one: ``devcore`` is the GPU's
compute-unit count, and a request of ``p`` percent takes ``floor(devcore x p / 100)``
CUs, at least 1 and at most ``devcore`` (``docs/develop/amd-vgpu.md`` §5.2: 25 % of a
304-CU MI300X is 76 CUs); a request without cores that takes the whole memory takes all
CUs. The device list carries that CU count, as HAMi writes it, for the device plugin's
``HSA_CU_MASK``. Filters: ``amd.com/use-gputype`` / ``nouse-gputype`` (whole words of the
model) and ``amd.com/use-gpu-uuid`` / ``nouse-gpu-uuid``.
"""

from __future__ import annotations

import attrs

from hami_core.backend import (
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FilterKeys,
    FitCall,
    FitResult,
    FitRules,
    ReasonCode,
    VendorFit,
)

from .names import NOUSE_TYPE, NOUSE_UUID, USE_TYPE, USE_UUID


def compute_units(device: DeviceInfo, request: DeviceRequest) -> int:
    """The CUs ``request`` takes on ``device`` (see the module docstring)."""
    total = device.cores_pct
    if request.cores_pct > 0:
        return min(max(total * request.cores_pct // 100, 1), total)
    if device.memory_mib and request.memory_on(device) >= device.memory_mib:
        return total
    return 0


def _cu_check(usage: DeviceUsage, request: DeviceRequest) -> ReasonCode | None:
    if request.cores_pct > 0 and usage.device.cores_pct <= 0:
        return ReasonCode.CARD_INSUFFICIENT_CORE
    free = usage.device.cores_pct - usage.used_cores_pct
    if free < compute_units(usage.device, request):
        return ReasonCode.CARD_INSUFFICIENT_CORE
    return None


#: Compute is checked in CUs by ``extra_check``, not as percent.
RULES = FitRules(cores_capacity=lambda u: None, extra_check=_cu_check)


def with_compute_units(call: FitCall[None]) -> FitResult:
    """The core's fit, each slice then carrying its CU count (``compute_units``)."""
    result = call.fit()
    if not result.fits:
        return result
    by_uuid = {u.device.uuid: u.device for u in call.usage}
    return attrs.evolve(
        result,
        devices=tuple(
            attrs.evolve(d, cores_pct=compute_units(by_uuid[d.uuid], call.request))
            for d in result.devices
        ),
    )


#: The pod's type and UUID filter annotations.
FILTERS = FilterKeys(
    use_type=USE_TYPE, nouse_type=NOUSE_TYPE, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID
)

#: ``fit(request, node, usage, pod, policy)``: ``request.count`` distinct GPUs, each slice
#: carrying its CU count.
fit: VendorFit[None] = VendorFit(filters=FILTERS, rules=RULES, place=with_compute_units)
