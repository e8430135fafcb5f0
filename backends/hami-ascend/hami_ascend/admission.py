"""Admission (webhook) logic for Ascend containers: defaults written into the spec.

What HAMi 2.10's ``MutateAdmission`` (``pkg/device/ascend/device.go``) writes, plus the
defaults of PROTOCOL.md §1: the count (a 910C request of 1 becomes 2), the memory rounded
up to the vNPU template (or the chip's ``memoryAllocatable`` for a whole chip) and the
cores, in both ``limits`` and ``requests``; the configured ``runtimeClassName`` when the pod
names none. No ``postStart`` hook in ``hami-core`` mode: HAMi v2.10.0 stopped adding one
(Project-HAMi/HAMi#2062; ``device_test.go::Test_MutateAdmission_VNPUCoreMode`` "keep raw
memory without postStart"), the container's own lifecycle is left as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import MutateResult, VendorConfig, denies_invalid_input

from .models import settings
from .requests import resolve


@denies_invalid_input
def mutate_container(
    pod: Mapping[str, Any], container: Mapping[str, Any], container_path: str, config: VendorConfig
) -> MutateResult | None:
    """What one container's spec must state: the request as the scheduler reads it (the
    webhook keeps a quantity the user wrote, ``"5k"``, when it means the same value; the
    memory is rewritten when the template rounding changed it and the count when module
    pairing did).

    Returns: None for a container without Ascend resources; a denial (naming the
        container, the resource and the value) for invalid ones.
    """
    cfg = settings(config)
    req = resolve(pod, container, cfg)
    if req is None:
        return None
    model = req.model
    values: dict[str, int | str] = {
        model.resource_count: str(req.count),
        model.resource_memory: str(req.memory_mib),
        model.resource_cores: str(req.cores_pct),
    }
    return MutateResult(resources=values, runtime_class_name=cfg.runtime_class_name)
