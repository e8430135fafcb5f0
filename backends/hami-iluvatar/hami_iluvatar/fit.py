"""Fit for Iluvatar GPUs: the core's checks in HAMi's order (``hami_core.backend.fit``)
with the chip's UUID filters ``hami.io/use-<chip>-uuid`` / ``hami.io/no-use-<chip>-uuid``
(HAMi 2.10 ``pkg/device/iluvatar/device.go`` ``Fit``; the chip itself is the vendor key,
so HAMi's ``checkType`` is the core's dispatch)."""

from __future__ import annotations

from hami_core.backend import FilterKeys, VendorFit

from .names import nouse_uuid, use_uuid


def chip_filters(chip: str) -> FilterKeys:
    """The UUID filter annotations of one chip (the request's vendor key)."""
    return FilterKeys(use_uuid=use_uuid(chip), nouse_uuid=nouse_uuid(chip))


#: ``fit(request, node, usage, pod, policy)``: ``request.count`` distinct GPUs of the chip
#: ``request.vendor``, or per GPU why not.
fit: VendorFit[None] = VendorFit(filters=chip_filters)
