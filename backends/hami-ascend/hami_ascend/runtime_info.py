"""The ``huawei.com/<x>`` pod annotation HAMi's scheduler writes at bind for Ascend.

HAMi 2.10 ``pkg/device/ascend/device.go`` ``PatchAnnotations`` writes, besides the device
lists of PROTOCOL.md §3, ``huawei.com/<CommonWord>`` (e.g. ``huawei.com/Ascend910B3``): a
JSON array with one ``RuntimeInfo`` per allocated chip of every container, in device-list
order, keys in Go's field order ``UUID``, ``temp``, ``memory``, ``core`` with Go's
``omitempty`` (zero values left out): ``temp`` is the vNPU template of the slice's memory
in template mode (none for a whole chip, and none in hami-core mode); ``memory`` (MiB) and
``core`` (percent) are the slice's, in both modes (``Test_PatchAnnotations``,
``Test_PatchAnnotations_VNPUCoreMode``, ``Test_PatchAnnotations_ZeroCore``). HAMi's
ascend-device-plugin reads it in ``Allocate`` (``buildRuntimeInfoLookup``) and fails the
allocation without it. The scheduler writes it at bind (``hami_bind_annotations``), with
``predicate-time`` (unix seconds), as HAMi's ``PatchAnnotations`` does.
"""

from __future__ import annotations

import json
from typing import Any, Final

from hami_core.backend import PodDevices

from .models import ModelSpec

#: Pod annotation HAMi's Ascend ``PatchAnnotations`` writes at bind: unix seconds.
PREDICATE_TIME: Final = "predicate-time"


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
            if not hami_core:
                sliced = model.trim(d.memory_mib) if d.memory_mib else None
                if sliced is not None and sliced.template is not None:
                    info["temp"] = sliced.template.name
            if d.memory_mib:
                info["memory"] = d.memory_mib
            if d.cores_pct:
                info["core"] = d.cores_pct
            out.append(info)
    return json.dumps(out, separators=(",", ":"))
