"""The ``huawei.com/<x>`` pod annotation HAMi's scheduler writes at bind for Ascend.

HAMi 2.10 ``pkg/device/ascend/device.go`` ``PatchAnnotations`` writes, besides the device
lists of PROTOCOL.md §3, ``huawei.com/<CommonWord>`` (e.g. ``huawei.com/Ascend910B3``): a
JSON array with one ``RuntimeInfo`` per allocated chip of every container, in device-list
order - ``{"UUID": <chip>, "temp": <vNPU template>}`` in template mode (``temp`` omitted
for a whole chip), ``{"UUID": <chip>, "memory": <MiB>, "core": <percent>}`` in hami-core
mode (Go's ``omitempty``: zero values are left out). HAMi's ascend-device-plugin reads it
in ``Allocate`` (``buildRuntimeInfoLookup``) and fails the allocation without it.

The core has no hook through which a backend adds pod annotations at bind, so nothing
writes this yet; ``runtime_info`` is ready for that hook (see the report of this
backend).
"""

from __future__ import annotations

import json
from typing import Any

from hami_core.backend import PodDevices

from .models import ModelSpec


def annotation_key(model: ModelSpec) -> str:
    """``huawei.com/<common word>``."""
    return f"huawei.com/{model.vendor}"


def runtime_info(devices: PodDevices, model: ModelSpec, *, hami_core: bool) -> str:
    """The annotation's value for one pod's chips of ``model`` (all containers, init
    containers first, as in the device list)."""
    out: list[dict[str, Any]] = []
    for container in devices:
        for d in container:
            info: dict[str, Any] = {"UUID": d.uuid}
            if hami_core:
                if d.memory_mib:
                    info["memory"] = d.memory_mib
                if d.cores_pct:
                    info["core"] = d.cores_pct
            else:
                sliced = model.trim(d.memory_mib) if d.memory_mib else None
                if sliced is not None and sliced.template is not None:
                    info["temp"] = sliced.template.name
            out.append(info)
    return json.dumps(out, separators=(",", ":"))
