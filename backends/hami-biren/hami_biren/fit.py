"""Fit for Biren devices (HAMi 2.10 ``pkg/device/biren/device.go`` ``Fit``): shared by
count only, with the ``birentech.com/use-gpuuuid`` / ``nouse-gpuuuid`` filters; the kit's
``countshared`` holds the rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import DevicePolicy, DeviceRequest, DeviceUsage, FitResult, countshared

from .names import NOUSE_UUID, USE_UUID


def fit(
    request: DeviceRequest,
    usage: Sequence[DeviceUsage],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> FitResult:
    """Choose ``request.count`` distinct devices by the device policy, or say why not."""
    return countshared.fit(request, usage, pod, policy, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID)
