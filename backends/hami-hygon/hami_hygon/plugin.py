"""Hook implementations of the Hygon DCU backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hami_core.backend import (
    BackendInfo,
    DeviceInfo,
    NodeState,
    VendorConfig,
    hookimpl,
    live_pod_uids,
)

from . import BACKEND_NAME, admission, allocate, discover, fit, requests
from .names import DEVICE_TYPE, OPTION_DEFAULTS
from .vdev import VdevAllocator


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name=BACKEND_NAME,
        device_types=(DEVICE_TYPE,),
        description="Hygon DCUs shared as virtual DCUs (vdev configuration, hyhal runtime)",
        option_defaults=OPTION_DEFAULTS,
    )


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    return discover.discover(config, discover.runner_for(config))


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(admission.mutate_container)


hami_fit = fit.fit.hook()


hami_allocate = hookimpl(allocate.allocate)


@hookimpl
def hami_release(
    pods: Sequence[Mapping[str, Any]], config: VendorConfig, state: NodeState
) -> list[str] | None:
    vdevs = VdevAllocator(Path(str(config.options["vdevPath"])), state)
    return [f"the vDCU of {key}" for key in vdevs.prune(live_pod_uids(pods))] or None
