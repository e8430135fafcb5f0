"""Hook implementations of the Iluvatar backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from hami_core.backend import (
    BackendInfo,
    hookimpl,
)

from . import BACKEND_NAME, allocate, fit, requests
from .names import DEVICE_TYPES


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=DEVICE_TYPES,
        description="Iluvatar CoreX GPUs (MR-V100, MR-V50, BI-V150, BI-V100) shared as vGPUs",
        vendor_device_plugin=(
            "Iluvatar's device plugin with the CoreX runtime, which writes hami.io/node-<chip>-register and applies the vGPU limits"
        ),
    )


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(requests.mutate)


hami_fit = fit.fit.hook()


hami_allocate = hookimpl(allocate.allocate)
