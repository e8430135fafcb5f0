"""What a pod holds: the one place the init-container rule is written (PROTOCOL.md §1).

Init containers run one after another, app containers together. While an init container
may still run, the pod's charge is ``max(largest init container, sum of app containers)``
(field by field); once every init container has terminated with exit code 0 the pod holds
what its app containers hold and nothing more. The same rule gives a device's usage
(memory, cores and the time-slice count), a namespace's quota usage and the webhook's
quota check, so the three can never disagree.

A restartable init container (``restartPolicy: Always``: Kubernetes' sidecar, KEP-753,
on by default from 1.29) keeps running beside the app containers, and every init
container after it runs beside it. So only the init containers before the first
restartable one are sequential (``sequential_init_count``); from it on they are charged,
fitted and reused as app containers, as kube-scheduler sums a sidecar into the pod's
requests. (HAMi 2.10 charges sidecars at the peak, a TODO in its
``CollapseInitContainerUsage``: a pod would then run twice what it is charged.)

Source: HAMi 2.10 ``pkg/device/initContainer.go`` (``CollapseInitContainerUsage``,
``AppContainersOnlyDeviceUsage``) and ``pkg/util/util.go``
(``AllInitContainersSucceeded``); the shrink is asserted by
``pkg/scheduler/scheduler_test.go::Test_onUpdatePod_InitContainerShrink``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, TypeVar

import attrs

from .allocation import PodDevices

K = TypeVar("K", bound=Hashable)


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


def init_containers_finished(pod: Mapping[str, Any]) -> bool:
    """True once every init container of ``pod`` has terminated with exit code 0.

    Read from ``status.initContainerStatuses`` (Kubernetes ``ContainerStatus.state.
    terminated.exitCode``). Every init container named in ``spec.initContainers`` must have
    such a status; a pod without init containers, a pod whose statuses are missing,
    partial, running, waiting or failed (non-zero exit, being restarted) is not finished.
    Only the sequential init containers (``sequential_init_count``) are asked: a
    restartable ("sidecar") one is charged as an app container, whatever its status says.
    HAMi's ``AllInitContainersSucceeded`` asks the same of the statuses present.
    """
    spec_inits = ((pod.get("spec") or {}).get("initContainers") or [])[: sequential_init_count(pod)]
    if not spec_inits:
        return False
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    done: set[str] = set()
    for s in statuses:
        if not isinstance(s, Mapping):
            return False
        terminated = (s.get("state") or {}).get("terminated")
        if not isinstance(terminated, Mapping) or terminated.get("exitCode") != 0:
            return False
        done.add(str(s.get("name", "")))
    return all(isinstance(c, Mapping) and c.get("name") in done for c in spec_inits)


def collapse(
    containers: Iterable[tuple[bool, Mapping[K, Charge]]], *, init_finished: bool = False
) -> dict[K, Charge]:
    """The rule itself: per key, a pod's charge from its containers' charges.

    Args:
        containers: ``(is_init, {key: charge})`` per container, in any order; the key is a
            device uuid (device usage) or a vendor key (quota).
        init_finished: True once every init container terminated with exit code 0
            (``init_containers_finished``): init containers then count for nothing.

    Returns:
        key -> ``max(largest init, sum of apps)`` field by field, or the apps' sum when
        ``init_finished``; keys held only by init containers drop out then.
    """
    init: dict[K, Charge] = {}
    apps: dict[K, Charge] = {}
    for is_init, charges in containers:
        for key, charge in charges.items():
            if is_init:
                if not init_finished:
                    init[key] = init.get(key, Charge()).peak(charge)
            else:
                apps[key] = apps.get(key, Charge()).plus(charge)
    out = dict(apps)
    for key, charge in init.items():
        out[key] = out.get(key, Charge()).peak(charge)
    return out


def sequential_init_count(pod: Mapping[str, Any]) -> int:
    """How many of ``pod``'s init containers run one after another: those before the
    first restartable one (``restartPolicy: Always``, Kubernetes' sidecar: it and every
    init container after it run beside the app containers). They are the first entries
    of the pod's device list (PROTOCOL.md §3)."""
    inits = (pod.get("spec") or {}).get("initContainers") or []
    for i, c in enumerate(inits):
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always":
            return i
    return len(inits)


def _init_count(pod: Mapping[str, Any]) -> int:
    return sequential_init_count(pod)


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
    n_init = _init_count(pod)
    per_container = []
    for pos, container in enumerate(devices):
        charges: dict[str, Charge] = {}
        for d in container:
            c, held = Charge(d.memory_mib, d.cores_pct, 1), charges.get(d.uuid, Charge())
            charges[d.uuid] = held.peak(c) if pos < n_init else held.plus(c)
        per_container.append((pos < n_init, charges))
    return collapse(per_container, init_finished=init_containers_finished(pod))


def vendor_charge(pod: Mapping[str, Any], devices: PodDevices) -> Charge:
    """What ``pod`` holds of one vendor in total (namespace quota): memory MiB summed over
    devices, cores percent summed over devices, count = devices.

    Args and rule as ``device_charges``.
    """
    n_init = _init_count(pod)
    per_container = [
        (
            pos < n_init,
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
