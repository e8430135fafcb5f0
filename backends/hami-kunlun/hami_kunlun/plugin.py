"""Hook implementations of the Kunlunxin backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.backend import (
    BackendInfo,
    ContainerDevices,
    DeviceUsage,
    NodePolicy,
    VendorConfig,
    hookimpl,
)

from . import admission, allocate, discover, fit, options, requests, score
from .names import DEVICE_TYPE
from .options import OPTION_DEFAULTS


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name="kunlun",
        device_types=(DEVICE_TYPE,),
        description="Kunlunxin XPUs: vXPU slices (1/4, 1/2 card) and whole cards with topology-aware sets",
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_check_config(config: VendorConfig) -> None:
    options.check_config(config)


hami_discover = hookimpl(discover.discover)


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(admission.mutate_container)


hami_fit = fit.fit.hook("config")


@hookimpl
def hami_score(
    usage: Sequence[DeviceUsage], devices: ContainerDevices, policy: NodePolicy
) -> float | None:
    return score.score(usage, devices, policy, DEVICE_TYPE.fit_rules)


hami_allocate = allocate.allocate.hook()
