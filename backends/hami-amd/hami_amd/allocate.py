"""What our device plugin adds to an AMD container (``docs/develop/amd-vgpu.md`` §4.2, §5;
ROCm "GPU isolation techniques").

- ``ROCR_VISIBLE_DEVICES``: the container's GPU UUIDs; their order is the container's
  GPU index;
- ``HSA_CU_MASK``: ``<index>:<first>-<last>`` per GPU, ``;``-separated: a CU range of the
  slice's CU count on each GPU, disjoint from the ranges of the other containers on that
  GPU (only where the slice takes fewer CUs than the GPU has);
- ``HIP_DEVICE_MEMORY_LIMIT``: ``<MiB>m``, the smallest slice of the container (the
  limit applies to every GPU of the container), where a slice is below the whole GPU
  (or the GPU was not discovered on this node).

The ranges handed out are kept in the record ``cu-masks`` of the ``NodeState`` the core
hands ``hami_allocate`` (the device plugin keeps it under ``--state-dir``; ``hami
simulate`` in memory), ``{"<podUID>/<container>": {"<uuid>": [first, last]}}``; Allocate
is idempotent per container, and ``CuMasks.prune`` removes the entries of pods that are
gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from hami_core.backend import (
    ContainerAllocation,
    ContainerDevices,
    DeviceInfo,
    InvalidInputError,
    NodeState,
)

#: The ``NodeState`` record of the CU ranges handed out.
RECORD: Final = "cu-masks"

Range = tuple[int, int]


class CuMasks:
    """The CU ranges handed out on this node, in the core's ``NodeState``."""

    def __init__(self, state: NodeState) -> None:
        self.state = state

    def load(self) -> dict[str, dict[str, list[int]]]:
        return self.state.read(RECORD)

    def save(self, data: Mapping[str, Any]) -> None:
        self.state.write(RECORD, data)

    def take(self, key: str, uuid: str, units: int, total: int) -> Range:
        """The lowest free range of ``units`` CUs of ``total`` on ``uuid`` for ``key``
        (the same range again when ``key`` already holds one).

        Raises:
            InvalidInputError: no free range of that size.
        """
        data = self.load()
        held = data.get(key, {}).get(uuid)
        if held is not None:
            return held[0], held[1]
        used = sorted(
            (r[0], r[1]) for k, per in data.items() if k != key for u, r in per.items() if u == uuid
        )
        start = 0
        for first, last in used:
            if first - start >= units:
                break
            start = max(start, last + 1)
        if start + units > total:
            raise InvalidInputError(f"AMD GPU {uuid}: no free range of {units} CUs of {total}")
        data.setdefault(key, {})[uuid] = [start, start + units - 1]
        self.save(data)
        return start, start + units - 1

    def prune(self, live_pod_uids: Iterable[str]) -> list[str]:
        """Drop the entries of pods not in ``live_pod_uids``; returns the dropped keys."""
        live = set(live_pod_uids)
        data = self.load()
        gone = [k for k in data if k.split("/", 1)[0] not in live]
        for k in gone:
            del data[k]
        if gone:
            self.save(data)
        return gone


def allocate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    devices: ContainerDevices,
    node_devices: Sequence[DeviceInfo],
    state: NodeState,
) -> ContainerAllocation:
    """The env of one container (empty without GPUs)."""
    if not devices:
        return ContainerAllocation()
    known = {d.uuid: d for d in node_devices}
    envs = {"ROCR_VISIBLE_DEVICES": ",".join(d.uuid for d in devices)}
    key = f"{(pod.get('metadata') or {}).get('uid', '')}/{container.get('name', '')}"
    masks = []
    limits = []
    for i, d in enumerate(devices):
        info = known.get(d.uuid)
        if info is None:
            # not discovered here (hami simulate): the memory limit still applies
            limits.append(d.memory_mib)
            continue
        if 0 < d.cores_pct < info.cores_pct:
            first, last = CuMasks(state).take(key, d.uuid, d.cores_pct, info.cores_pct)
            masks.append(f"{i}:{first}-{last}")
        if 0 < d.memory_mib < info.memory_mib:
            limits.append(d.memory_mib)
    if masks:
        envs["HSA_CU_MASK"] = ";".join(masks)
    if limits:
        envs["HIP_DEVICE_MEMORY_LIMIT"] = f"{min(limits)}m"
    return ContainerAllocation(envs=envs)
