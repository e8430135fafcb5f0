"""Fit for Biren devices (HAMi 2.10 ``pkg/device/biren/device.go`` ``Fit``): shared by
count only, with the ``birentech.com/use-gpuuuid`` / ``nouse-gpuuuid`` filters; the kit's
``countshared`` holds the rule."""

from __future__ import annotations

import functools

from hami_core.backend import countshared

from .names import NOUSE_UUID, USE_UUID

#: ``fit(request, usage, pod, policy)``: ``request.count`` distinct devices by the device
#: policy, or why not.
fit = functools.partial(countshared.fit, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID)
