"""Pod annotations the Neuron device plugin reads, written at bind (HAMi 2.10
``pkg/device/awsneuron/device.go`` ``PatchAnnotations``).

- ``AWS_NEURON_IDS``: for a container asking ``aws.amazon.com/neuron``, its device
  indices; for one asking ``aws.amazon.com/neuroncore``, its core indices
  (``cores-per-device x device index + core``), then also
  ``NEURON_RESOURCE_TYPE = aws.amazon.com/neuroncore``. HAMi accumulates the list over
  the pod's containers (init containers first), comma-separated;
- ``NEURON_ALLOC_TIME`` (unix ns), ``NEURON_ALLOCATED = false``,
  ``aws.amazon.com/predicate-node`` (the node).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.backend import NodeInfo, PodDevices

from .names import ALLOC_TIME, ALLOCATED, ASSIGNED_IDS, ASSIGNED_NODE, RESOURCE_TYPE, RESOURCES
from .requests import asks_devices


def containers_in_wire_order(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Init containers, then app containers, in spec order (PROTOCOL.md §3)."""
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def core_ids(index: int, mask: int, per_device: int) -> list[int]:
    """Node-wide NeuronCore indices of the cores in ``mask`` on device ``index``."""
    return [per_device * index + b for b in range(mask.bit_length()) if mask >> b & 1]


def pod_annotations(
    pod: Mapping[str, Any],
    node: NodeInfo,
    devices: PodDevices,
    *,
    clock_ns: Callable[[], int] = time.time_ns,
) -> dict[str, str]:
    """The annotations for ``devices`` (one entry per container); empty without any."""
    by_uuid = {d.uuid: d for d in node.devices}
    containers = containers_in_wire_order(pod)
    ids: list[int] = []
    out: dict[str, str] = {}
    for pos, slices in enumerate(devices):
        container = containers[pos] if pos < len(containers) else {}
        for s in slices:
            info = by_uuid.get(s.uuid)
            index = info.index if info is not None else 0
            if asks_devices(container):
                ids.append(index)
            else:
                per_device = info.split_count if info is not None else 2
                ids.extend(core_ids(index, s.cores_pct, per_device))
                out[RESOURCE_TYPE] = RESOURCES.cores
    if not ids:
        return {}
    out[ASSIGNED_IDS] = ",".join(map(str, ids))
    out[ALLOC_TIME] = str(clock_ns())
    out[ALLOCATED] = "false"
    out[ASSIGNED_NODE] = node.name
    return out
