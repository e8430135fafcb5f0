"""Each container's device memory measured from the host (issue 24 item 19).

NVML lists, per GPU, the host PIDs holding device memory and how much
(``HostDevice.processes``); each PID's cgroup names its pod and container
(``cgroups``). Nothing here is read from a file the tenant writes: a tenant that
bypasses the shim, calls the driver directly or writes its own region claiming zero is
still measured. The region's own figures stay as they were (HAMi's metrics); these are
the ones to enforce by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from hami_core.model import HostDevice

from .cgroups import container_ids, container_of, in_host_pid_namespace


@attrs.frozen(kw_only=True)
class HostReading:
    """One container's device memory on one device, summed over its processes.

    Attributes:
        pod_uid: the pod's ``metadata.uid``.
        container: the container's name (from the pod's status by container ID).
        device_uuid: the device.
        used_bytes: NVML ``usedGpuMemory`` summed over ``pids`` (bytes).
        pids: the host PIDs counted, ascending.
    """

    pod_uid: str
    container: str
    device_uuid: str
    used_bytes: int
    pids: tuple[int, ...]


@attrs.frozen(kw_only=True)
class HostMeasure:
    """One scan's host measure.

    Attributes:
        readings: per container and device, sorted by pod UID, container, device.
        unattributed: device UUID -> bytes held by processes of no pod on this node
            (host processes, another runtime's containers, pods not listed yet), for
            every device measured.
        attributable: False when this process does not see the host's PIDs (no
            ``hostPID``): then nothing is attributed and every byte is unattributed.
    """

    readings: tuple[HostReading, ...] = ()
    unattributed: Mapping[str, int] = attrs.field(factory=dict)
    attributable: bool = True


def measure(
    devices: Sequence[HostDevice], pods: Mapping[str, Mapping[str, Any]], *, proc_root: str
) -> HostMeasure:
    """Attribute every process NVML lists to a container of ``pods``.

    Args:
        devices: the host's devices; those whose ``processes`` is None are skipped.
        pods: this node's pods by UID.
        proc_root: procfs of the host's PID namespace (NVML's PIDs are the host's).
    """
    measured = [d for d in devices if d.processes is not None]
    if not measured:
        return HostMeasure()
    if not in_host_pid_namespace(proc_root):
        return HostMeasure(
            unattributed={
                d.uuid: sum(p.memory_used_bytes for p in d.processes or ()) for d in measured
            },
            attributable=False,
        )
    names: dict[str, dict[str, str]] = {}
    per: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
    unattributed: dict[str, int] = {}
    for d in measured:
        unattributed[d.uuid] = 0
        for p in d.processes or ():
            ref = container_of(p.pid, proc_root)
            pod = pods.get(ref.pod_uid) if ref is not None else None
            name = None
            if ref is not None and pod is not None:
                if ref.pod_uid not in names:
                    names[ref.pod_uid] = container_ids(pod)
                name = names[ref.pod_uid].get(ref.container_id)
            if ref is None or name is None:
                unattributed[d.uuid] += p.memory_used_bytes
                continue
            per.setdefault((ref.pod_uid, name, d.uuid), []).append((p.pid, p.memory_used_bytes))
    readings = tuple(
        HostReading(
            pod_uid=uid,
            container=name,
            device_uuid=uuid,
            used_bytes=sum(b for _, b in procs),
            pids=tuple(sorted(pid for pid, _ in procs)),
        )
        for (uid, name, uuid), procs in sorted(per.items())
    )
    return HostMeasure(readings=readings, unattributed=unattributed)
