"""A backend's variations of the shared device-fit steps (``hami_core.backend.fit``).

Here in the model, not with the fit logic, because a vendor key declares its rules on
its ``DeviceTypeInfo`` (the core scores placements with them when a backend has no
``hami_score``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import attrs

from .device import DeviceUsage
from .policy import DevicePolicy
from .reason import ReasonCode
from .request import DeviceRequest

#: A device's compute in percent as fit reads it; None: the device does not account compute.
CoresCapacity: TypeAlias = Callable[[DeviceUsage], int | None]
#: One more per-device check: the device's reason, or None when it can take the request.
ExtraCheck: TypeAlias = Callable[[DeviceUsage, DeviceRequest], ReasonCode | None]
#: The id of the device's interconnect group.
LinkGroup: TypeAlias = Callable[[DeviceUsage], int]
#: ``(feasible, count, policy)`` -> the chosen devices, a node reason, or None (no opinion).
Chooser: TypeAlias = Callable[
    [Sequence[DeviceUsage], int, DevicePolicy], Sequence[DeviceUsage] | ReasonCode | None
]


def device_cores(usage: DeviceUsage) -> int | None:
    """The default ``cores_capacity``: the inventory's ``devcore`` (percent)."""
    return usage.device.cores_pct


@attrs.frozen(kw_only=True)
class FitRules:
    """A backend's variations of the generic steps (``hami_core.backend.fit``).

    Attributes:
        cores_capacity: a device's compute in percent, None when not accounted.
        extra_check: a last per-device check, or None.
        link_group: a device's interconnect group, or None when all are linked alike.
        choose: the vendor's own selection, or None.
    """

    cores_capacity: CoresCapacity = device_cores
    extra_check: ExtraCheck | None = None
    link_group: LinkGroup | None = None
    choose: Chooser | None = None
