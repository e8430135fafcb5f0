"""What a pod holds: the one place the init-container rule is written (PROTOCOL.md §1).

Kubernetes' rule for a pod's effective request (``resourcehelper.PodRequests``, with
KEP-753's native sidecars), for every resource: app containers run together; a
*sidecar* (an init container with ``restartPolicy: Always``, on by default from 1.29)
starts in its place among the init containers and then runs for the pod's whole life;
every other init container runs to completion, alone but for the sidecars declared
before it. So, field by field,

    pod = max(apps + all sidecars, max over plain init i of (init_i + sidecars before i))

and once every plain init container has terminated with exit code 0 the pod holds its
app containers and sidecars only. ``effective_request`` is that rule; device usage
(memory, cores, time slices), the namespace quota (scheduler and webhook), the fit
driver's views and ``hami simulate`` (devices, CPU, memory) all go through it, so they
can never disagree.

HAMi 2.10 charges a sidecar at the init peak (a TODO in its
``CollapseInitContainerUsage``): a pod would then run twice what it is charged.

Source: HAMi 2.10 ``pkg/device/initContainer.go`` (``CollapseInitContainerUsage``,
``AppContainersOnlyDeviceUsage``) and ``pkg/util/util.go``
(``AllInitContainersSucceeded``); the shrink is asserted by
``pkg/scheduler/scheduler_test.go::Test_onUpdatePod_InitContainerShrink``; Kubernetes
``pkg/api/v1/resource/helpers.go`` ``PodRequests`` and kubelet's
``IsRestartableInitContainer`` (``restartPolicy`` compared with ``Always`` exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, TypeVar

import attrs

from .allocation import PodDevices

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: The one ``restartPolicy`` value that makes an init container a sidecar (KEP-753).
SIDECAR_RESTART_POLICY = "Always"


@attrs.frozen
class Charge:
    """What one pod (or one container) holds of one device, or of one vendor in total.

    Attributes:
        memory_mib: memory, MiB.
        cores_pct: compute, percent of one device (summed over devices for a total).
        count: time slices (containers sharing a device), or devices for a total.
    """

    memory_mib: int = 0
    cores_pct: int = 0
    count: int = 0

    def plus(self, other: Charge) -> Charge:
        """Both charges together (containers that run at the same time)."""
        return Charge(
            self.memory_mib + other.memory_mib,
            self.cores_pct + other.cores_pct,
            self.count + other.count,
        )

    def peak(self, other: Charge) -> Charge:
        """The larger of the two, field by field (containers that run one after another)."""
        return Charge(
            max(self.memory_mib, other.memory_mib),
            max(self.cores_pct, other.cores_pct),
            max(self.count, other.count),
        )


def is_sidecar(container: object) -> bool:
    """True when ``container`` (an entry of ``spec.initContainers``) is a sidecar: its
    ``restartPolicy`` is exactly ``Always``, as kubelet's ``IsRestartableInitContainer``
    reads it. Any other value makes it a plain init container here as in kubelet (the
    webhook denies such a value: ``protocol.pods.check_pod_shape``)."""
    return (
        isinstance(container, Mapping) and container.get("restartPolicy") == SIDECAR_RESTART_POLICY
    )


def init_flags(pod: Mapping[str, Any]) -> tuple[bool, ...]:
    """Per init container of ``pod``, in spec order: True for a plain init container (runs
    to completion), False for a sidecar. App containers, after them in the device list
    (PROTOCOL.md §3), are never plain init containers."""
    inits = (pod.get("spec") or {}).get("initContainers") or []
    return tuple(not is_sidecar(c) for c in inits)


def init_containers_finished(pod: Mapping[str, Any]) -> bool:
    """True once every plain init container of ``pod`` has terminated with exit code 0.

    Read from ``status.initContainerStatuses`` (Kubernetes ``ContainerStatus.state.
    terminated.exitCode``). Every plain init container named in ``spec.initContainers``
    must have such a status; a pod without plain init containers, a pod whose statuses
    are missing, partial, malformed, running, waiting or failed (non-zero exit, being
    restarted) is not finished. Sidecars are not asked (they run for the pod's life and
    are charged as app containers, whatever their status says). HAMi's
    ``AllInitContainersSucceeded`` asks the same of the statuses present.
    """
    inits = (pod.get("spec") or {}).get("initContainers") or []
    plain = [c for c in inits if not is_sidecar(c)]
    if not plain:
        return False
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    if not all(isinstance(s, Mapping) for s in statuses):
        return False
    state = {str(s.get("name", "")): (s.get("state") or {}) for s in statuses}
    for c in plain:
        if not isinstance(c, Mapping) or c.get("name") not in state:
            return False
        st = state[c["name"]]
        terminated = st.get("terminated") if isinstance(st, Mapping) else None
        if not isinstance(terminated, Mapping) or terminated.get("exitCode") != 0:
            return False
    return True


def effective_request(
    containers: Iterable[tuple[bool, Mapping[K, V]]],
    plus: Callable[[V, V], V],
    peak: Callable[[V, V], V],
    *,
    init_finished: bool = False,
) -> dict[K, V]:
    """The rule itself (module docstring), per key, for any measure.

    Args:
        containers: ``(is_plain_init, {key: value})`` per container, **in wire order**
            (init containers and sidecars in spec order, then app containers: PROTOCOL.md
            §3): a plain init container runs beside the sidecars before it only.
        plus: two values running at once (``operator.add``, ``Charge.plus``).
        peak: the larger of two values that run one after another (``max``,
            ``Charge.peak``).
        init_finished: True once every plain init container terminated with exit code 0
            (``init_containers_finished``): they then count for nothing.

    Returns:
        key -> the pod's value; keys held only by plain init containers drop out when
        ``init_finished``.
    """
    running: dict[K, V] = {}  # sidecars so far, then sidecars and app containers
    inits: dict[K, V] = {}
    for is_init, values in containers:
        for key, value in values.items():
            if not is_init:
                running[key] = plus(running[key], value) if key in running else value
            elif not init_finished:
                beside = plus(running[key], value) if key in running else value
                inits[key] = peak(inits[key], beside) if key in inits else beside
    out = dict(running)
    for key, value in inits.items():
        out[key] = peak(out[key], value) if key in out else value
    return out


def collapse(
    containers: Iterable[tuple[bool, Mapping[K, Charge]]], *, init_finished: bool = False
) -> dict[K, Charge]:
    """``effective_request`` of ``Charge`` values: per key (a device uuid for device
    usage, a vendor key for quota), what the pod holds; ``containers`` in wire order."""
    return effective_request(containers, Charge.plus, Charge.peak, init_finished=init_finished)


def device_charges(pod: Mapping[str, Any], devices: PodDevices) -> dict[str, Charge]:
    """Per device uuid, what ``pod`` holds of it through one vendor's device list.

    Args:
        pod: the Pod object (its ``spec.initContainers`` count and init statuses).
        devices: the pod's device list, one entry per container, init containers first
            (PROTOCOL.md §3).

    Returns:
        uuid -> ``Charge`` (memory MiB, cores percent, time slices); an init container
        takes one slice of a device however it appears, app containers one each.
    """
    plain = init_flags(pod)
    per_container = []
    for pos, container in enumerate(devices):
        is_init = pos < len(plain) and plain[pos]
        charges: dict[str, Charge] = {}
        for d in container:
            c, held = Charge(d.memory_mib, d.cores_pct, 1), charges.get(d.uuid, Charge())
            charges[d.uuid] = held.peak(c) if is_init else held.plus(c)
        per_container.append((is_init, charges))
    return collapse(per_container, init_finished=init_containers_finished(pod))


def vendor_charge(pod: Mapping[str, Any], devices: PodDevices) -> Charge:
    """What ``pod`` holds of one vendor in total (namespace quota): memory MiB summed over
    devices, cores percent summed over devices, count = devices.

    Args and rule as ``device_charges``.
    """
    plain = init_flags(pod)
    per_container = [
        (
            pos < len(plain) and plain[pos],
            {
                0: Charge(
                    sum(d.memory_mib for d in container),
                    sum(d.cores_pct for d in container),
                    len(container),
                )
            },
        )
        for pos, container in enumerate(devices)
    ]
    return collapse(per_container, init_finished=init_containers_finished(pod)).get(0, Charge())
