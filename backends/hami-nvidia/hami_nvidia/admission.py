"""Admission (webhook) logic for NVIDIA containers: defaults written into the spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DEVICE_MODES,
    DeviceRequest,
    InvalidInputError,
    MutateResult,
    VendorConfig,
    denies_invalid_input,
    first_annotation,
    pointer_token,
    resource_names,
    resource_value,
)

from .mig import PROFILE_KEY
from .names import CORE_POLICY, DEFAULT_RESOURCES, PRIORITY_RESOURCE, VGPU_MODE
from .requests import MIG_PROFILE_ENV, mig_resources

CORE_POLICIES = ("default", "force", "disable", "none")
#: Backend options read by admission (HAMi's nvidia ``runtimeClassName``: set on pods that
#: ask for NVIDIA devices and name none themselves; HAMi's nvidia ``overwriteEnv``:
#: ``NVIDIA_VISIBLE_DEVICES=none`` on every container that asks for no NVIDIA GPU, in
#: every pod the webhook sees, HAMi ``pkg/device/nvidia/device.go`` ``MutateAdmission``;
#: the core does it, ``DeviceTypeInfo.visible_devices_env``).
OPTION_DEFAULTS: dict[str, object] = {"runtimeClassName": "", "overwriteEnv": False}


@denies_invalid_input
def mutate_container(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    config: VendorConfig,
    request: DeviceRequest,
    container_path: str,
) -> MutateResult | None:
    """What one container's spec must state: limits and requests both carry the
    defaulted request, exactly as the scheduler will read it, so what ``kubectl get pod
    -o yaml`` shows is what is scheduled; env ``CUDA_TASK_PRIORITY`` (from
    ``nvidia.com/priority``) and ``GPU_CORE_UTILIZATION_POLICY`` (from the pod's
    ``hami.io/core-policy``); the configured ``runtimeClassName``.

    Args:
        request: the container's parsed NVIDIA request (the webhook parses each
            container once, through ``hami_parse_request``).
    Returns: None for a container without NVIDIA resources; a denial for invalid ones.
    """
    req = request
    names = resource_names(DEFAULT_RESOURCES, config)
    env = _env(pod, container)
    profile = req.info(PROFILE_KEY)
    patch: tuple[dict[str, Any], ...] = ()
    if profile:
        env[MIG_PROFILE_ENV] = profile
        values: dict[str, int | str] = {names.count: str(req.count), names.cores: "0"}
        patch = _mig_removals(container, container_path)
    else:
        values = {names.count: str(req.count)}
        if req.memory_mib:
            values[names.memory] = str(req.memory_mib)
        elif req.memory_pct != 100 or resource_value(container, names.memory_pct) is not None:
            values[names.memory_pct] = str(req.memory_pct)
        values[names.cores] = str(req.cores_pct)
    return MutateResult(
        resources=values,
        env=env,
        runtime_class_name=str(config.options["runtimeClassName"] or ""),
        patch=patch,
    )


def _env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
    """Env to add.

    Raises:
        InvalidInputError: a ``nvidia.com/vgpu-mode`` or ``hami.io/core-policy`` value
            that is not one HAMi knows (the pod is denied with the message).
    """
    out: dict[str, str] = {}
    priority = resource_value(container, PRIORITY_RESOURCE)
    if priority is not None:
        out["CUDA_TASK_PRIORITY"] = str(priority)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    modes = first_annotation(annotations, VGPU_MODE)
    if modes is not None:
        bad = [m.strip() for m in modes.split(",") if m.strip() not in DEVICE_MODES]
        if bad or not modes.strip():
            raise InvalidInputError(
                f"annotation {VGPU_MODE[0]}: {modes!r} is not a comma list of "
                f"{', '.join(DEVICE_MODES)}"
            )
    policy = first_annotation(annotations, CORE_POLICY)
    if policy is not None:
        if policy not in CORE_POLICIES:
            raise InvalidInputError(
                f"annotation {CORE_POLICY[0]}: {policy!r} is not one of {', '.join(CORE_POLICIES)}"
            )
        out["GPU_CORE_UTILIZATION_POLICY"] = "disable" if policy == "none" else policy
    return out


def _mig_removals(container: Mapping[str, Any], container_path: str) -> tuple[dict[str, Any], ...]:
    """A container naming a MIG profile: ``nvidia.com/mig-<profile>: N`` becomes
    ``nvidia.com/gpu: N`` (the resource this device plugin advertises, so kubelet admits
    the pod) with cores 0 and ``HAMI_MIG_PROFILE=<profile>`` in its env (what the
    scheduler reads from then on); these operations remove the ``nvidia.com/mig-*``
    quantities."""
    res = container.get("resources") or {}
    return tuple(
        {"op": "remove", "path": f"{container_path}/resources/{part}/{pointer_token(name)}"}
        for part in ("limits", "requests")
        for name in mig_resources({"resources": {part: res.get(part) or {}}})
    )
