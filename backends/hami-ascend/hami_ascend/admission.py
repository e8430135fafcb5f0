"""Admission (webhook) logic for Ascend containers: defaults written into the spec.

What HAMi 2.10's ``MutateAdmission`` (``pkg/device/ascend/device.go``) writes, plus the
defaults of PROTOCOL.md §1: the count (a 910C request of 1 becomes 2), the memory rounded
up to the vNPU template (or the chip's ``memoryAllocatable`` for a whole chip) and the
cores, in both ``limits`` and ``requests``; the configured ``runtimeClassName`` when the pod
names none; in ``hami-core`` mode the ``postStart`` hook that starts HAMi's vNPU limiter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_core.backend import (
    InvalidInputError,
    MutateResult,
    VendorConfig,
)

from .models import MODE_HAMI_CORE, settings
from .requests import resolve

#: HAMi's ``postStart`` command for soft slicing (``MutateAdmission``, vnpu-mode hami-core).
LIMITER_COMMAND: Final = (
    "bash",
    "-c",
    "export RUST_LOG=info\n/hami-vnpu-core/limiter > /tmp/limiter_manager.log 2>&1 &",
)


def mutate_container(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """What one container's spec must state: the request as the scheduler reads it (the
    webhook keeps a quantity the user wrote, ``"5k"``, when it means the same value; the
    memory is rewritten when the template rounding changed it and the count when module
    pairing did); in ``hami-core`` mode also HAMi's ``postStart`` limiter hook, the one
    raw patch.

    Returns: None for a container without Ascend resources; a denial (naming the
        container, the resource and the value) for invalid ones.
    """
    try:
        cfg = settings(config)
        req = resolve(pod, container, cfg)
    except InvalidInputError as exc:
        return MutateResult(denial=str(exc))
    if req is None:
        return None
    model = req.model
    values: dict[str, int | str] = {
        model.resource_count: str(req.count),
        model.resource_memory: str(req.memory_mib),
        model.resource_cores: str(req.cores_pct),
    }
    patch: list[dict[str, Any]] = []
    if req.mode == MODE_HAMI_CORE:
        lifecycle = container.get("lifecycle") or {}
        if not lifecycle.get("postStart"):
            if not container.get("lifecycle"):
                patch.append({"op": "add", "path": f"{container_path}/lifecycle", "value": {}})
            patch.append(
                {
                    "op": "add",
                    "path": f"{container_path}/lifecycle/postStart",
                    "value": {"exec": {"command": list(LIMITER_COMMAND)}},
                }
            )
    return MutateResult(
        resources=values, runtime_class_name=cfg.runtime_class_name, patch=tuple(patch)
    )
