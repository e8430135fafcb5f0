"""Hook implementations of the AMD backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from hami_core.backend import (
    BackendInfo,
    DeviceInfo,
    NodeState,
    SubprocessRunner,
    VendorConfig,
    hookimpl,
    live_pod_uids,
)

from . import BACKEND_NAME, allocate, discover, fit, requests
from .fit import RULES
from .names import DEVICE_TYPE, OPTION_DEFAULTS


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        # the core scores with the CU rules (compute counted in CUs, not percent)
        device_types=(attrs.evolve(DEVICE_TYPE, fit_rules=RULES),),
        description="AMD ROCm GPUs shared by memory and compute-unit masks (HSA_CU_MASK)",
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    return discover.discover(config, SubprocessRunner())


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(requests.mutate)


hami_fit = fit.fit.hook()


hami_allocate = hookimpl(allocate.allocate)


@hookimpl
def hami_release(pods: Sequence[Mapping[str, Any]], state: NodeState) -> list[str] | None:
    gone = allocate.CuMasks(state).prune(live_pod_uids(pods))
    return [f"the CU ranges of {key}" for key in gone] or None
