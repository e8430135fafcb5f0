"""Admission (webhook) logic for NVIDIA containers: defaults written into the spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import (
    DEVICE_MODES,
    InvalidInputError,
    MutateResult,
    VendorConfig,
    resource_names,
    resource_value,
    set_resources,
)

from .names import CORE_POLICY, DEFAULT_RESOURCES, PRIORITY_RESOURCE, VGPU_MODE, first_annotation
from .requests import parse_request

CORE_POLICIES = ("default", "force", "disable", "none")
#: Backend options read by admission (HAMi's nvidia ``runtimeClassName``: set on pods that
#: ask for NVIDIA devices and name none themselves).
OPTION_DEFAULTS: dict[str, object] = {"runtimeClassName": ""}


def mutate_container(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """Patch one container: limits and requests both carry the defaulted request.

    Writes ``count``, memory and cores exactly as the scheduler will read them, so what
    ``kubectl get pod -o yaml`` shows is what is scheduled; adds ``CUDA_TASK_PRIORITY``
    (from ``nvidia.com/priority``) and ``GPU_CORE_UTILIZATION_POLICY`` (from the pod's
    ``hami.io/core-policy``) to the container env.

    Returns: None for a container without NVIDIA resources; a denial for invalid ones.
    """
    try:
        req = parse_request(container, config)
    except InvalidInputError as exc:
        return MutateResult(denial=str(exc))
    if req is None:
        return None
    names = resource_names(DEFAULT_RESOURCES, config)
    values: dict[str, object] = {names.count: str(req.count)}
    if req.memory_mib:
        values[names.memory] = str(req.memory_mib)
    elif req.memory_pct != 100 or resource_value(container, names.memory_pct) is not None:
        values[names.memory_pct] = str(req.memory_pct)
    values[names.cores] = str(req.cores_pct)
    # Quantities the user wrote stay as written (e.g. "5k"); only absent ones are added.
    for name in (names.count, names.memory, names.memory_pct, names.cores):
        stated = resource_value(container, name)
        if stated is not None:
            values[name] = stated

    patch: list[dict[str, Any]] = set_resources(container, container_path, values)
    runtime_class = str(config.options.get("runtimeClassName") or "")
    spec = pod.get("spec") or {}
    if runtime_class and not spec.get("runtimeClassName"):
        patch.append({"op": "add", "path": "/spec/runtimeClassName", "value": runtime_class})
    env = _env(pod, container)
    if isinstance(env, str):
        return MutateResult(denial=env)
    if env:
        if not container.get("env"):
            patch.append({"op": "add", "path": f"{container_path}/env", "value": []})
        existing = {e.get("name") for e in container.get("env") or []}
        for name, value in env.items():
            if name not in existing:
                patch.append(
                    {
                        "op": "add",
                        "path": f"{container_path}/env/-",
                        "value": {"name": name, "value": value},
                    }
                )
    return MutateResult(patch=tuple(patch))


def _env(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, str] | str:
    """Env to add, or a denial message."""
    out: dict[str, str] = {}
    priority = resource_value(container, PRIORITY_RESOURCE)
    if priority is not None:
        out["CUDA_TASK_PRIORITY"] = str(priority)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    modes = first_annotation(annotations, VGPU_MODE)
    if modes is not None:
        bad = [m.strip() for m in modes.split(",") if m.strip() not in DEVICE_MODES]
        if bad or not modes.strip():
            return (
                f"annotation {VGPU_MODE[0]}: {modes!r} is not a comma list of "
                f"{', '.join(DEVICE_MODES)}"
            )
    policy = first_annotation(annotations, CORE_POLICY)
    if policy is not None:
        if policy not in CORE_POLICIES:
            return (
                f"annotation {CORE_POLICY[0]}: {policy!r} is not one of {', '.join(CORE_POLICIES)}"
            )
        out["GPU_CORE_UTILIZATION_POLICY"] = "disable" if policy == "none" else policy
    return out
