"""Hook implementations of the NVIDIA backend: thin wrappers over the vendor logic."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.backend import (
    BackendInfo,
    ContainerDevices,
    ContainerUsage,
    DeviceInfo,
    DevicePluginFlags,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    NodeInfo,
    VendorConfig,
    hookimpl,
)

from . import (
    admission,
    allocate,
    fit,
    monitor,
    mps,
    node,
    plugin_flags,
    priority_board,
    requests,
    shim,
)
from .names import DEVICE_TYPE


@hookimpl
def hami_backend_info() -> BackendInfo:
    return BackendInfo(
        name="nvidia",
        device_types=(DEVICE_TYPE,),
        description="NVIDIA GPUs shared through libvgpu.so (HAMi-core compatible)",
        option_defaults={
            **admission.OPTION_DEFAULTS,
            **allocate.OPTION_DEFAULTS,
            **node.OPTION_DEFAULTS,
        },
        fit_by_node_class=True,  # fit and score read UUIDs only through the usage given
        device_plugin_flags=plugin_flags.FLAGS,
    )


@hookimpl
def hami_device_plugin_flags(flags: DevicePluginFlags, config: VendorConfig) -> VendorConfig | None:
    return plugin_flags.apply_flags(flags, config)


@hookimpl
def hami_check_config(config: VendorConfig) -> None:
    allocate.check_config(config)


@hookimpl
def hami_discover(config: VendorConfig) -> list[DeviceInfo] | None:
    return node.current().discover(config)


@hookimpl
def hami_watch_health(config: VendorConfig, timeout_s: float) -> list[str] | None:
    return node.current().watch_health(config, timeout_s)


@hookimpl
def hami_link_scores(devices: Sequence[DeviceInfo]) -> dict[str, dict[str, int]] | None:
    return node.current().link_scores(devices)


hami_parse_request = hookimpl(requests.parse_request)


hami_mutate = hookimpl(admission.mutate_container)


hami_fit = fit.fit.hook()


@hookimpl
def hami_fit_nodes(
    request: DeviceRequest,
    nodes: Sequence[tuple[NodeInfo, Sequence[DeviceUsage], Sequence[ContainerDevices]]],
    pod: Mapping[str, Any],
    policy: DevicePolicy,
) -> list[FitResult] | None:
    return fit.fit_nodes(request, nodes, pod, policy)


hami_allocate = hookimpl(allocate.allocate)


@hookimpl
def hami_prepare_node(config: VendorConfig) -> list[str]:
    opts = config.options
    if opts["libraryPath"]:
        return []  # the operator placed the library; nothing to install
    return shim.install_hook_files(str(opts["hookPath"]), container_dir=allocate.CONTAINER_HOOK_DIR)


hami_usage_files = hookimpl(monitor.usage_files)


@hookimpl
def hami_parse_usage(file_name: str, data: bytes) -> ContainerUsage | None:
    return monitor.parse_usage(file_name, data)


hami_host_devices = hookimpl(monitor.host_devices)


@hookimpl
def hami_release(
    pods: Sequence[Mapping[str, Any]], devices: Sequence[DeviceInfo], config: VendorConfig
) -> list[str] | None:
    freed = list(node.current().release(pods, devices, config) or [])
    freed += priority_board.release(pods, devices, config)
    opts = config.options
    if opts["mpsIsolation"] == mps.PER_CONTAINER:
        freed += mps.release(str(opts["mpsControlBinary"]), str(opts["mpsPipeDirectory"]), pods)
    return freed or None
