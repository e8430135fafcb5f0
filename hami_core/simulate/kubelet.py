"""Kubelet's side of ``Allocate`` for ``hami simulate``: the device plugin's real
``Allocator`` (``hami_core.deviceplugin.allocator``), called as kubelet calls it.

For every container of a bound pod, init containers first (kubelet admits them in that
order), and every vendor the scheduler gave it devices of, kubelet asks the device
plugin of that vendor ``GetPreferredAllocation`` over the IDs it advertises
(``<UUID>-<i>``, PROTOCOL.md §2) and then ``Allocate`` with the IDs it took; the IDs
of an init container are taken again by the containers after it, as kubelet does. The
answers, the pod's progress annotation, ``hami.io/bind-phase`` and the node lock are all
the ``Allocator``'s own; only the host is left alone (no directory created, no file
written: the simulator owns no node; the backends' node-local records live in the
``NodeState`` handed in, in memory).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from hami_core.cluster.base import ClusterStore
from hami_core.deviceplugin.allocator import Allocator, PreferredRequest
from hami_core.deviceplugin.devices import fake_ids
from hami_core.model import (
    ContainerAllocation,
    DeviceInfo,
    MemoryNodeState,
    NodeState,
    PodDevices,
)
from hami_core.plugin import BackendManager
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.pods import containers

T = TypeVar("T")


def _returns(value: T) -> Callable[[], T]:
    return lambda: value


def _no_host_dir(path: str) -> None:
    """The simulator creates no host directory."""


def _no_shared_file(path: str, size: int) -> None:
    """``hami simulate`` creates no file on the host."""


def _no_host_file(path: str, content: str) -> None:
    """The simulator writes no host file (the answer still names it)."""


def allocate_pod(
    store: ClusterStore,
    manager: BackendManager,
    pod: Mapping[str, Any],
    *,
    node: str,
    vendors: Sequence[str],
    inventory: Sequence[DeviceInfo],
    state: NodeState | None = None,
) -> list[tuple[str, str, ContainerAllocation]]:
    """Every ``Allocate`` kubelet makes for ``pod`` bound to ``node``.

    Args:
        store: the cluster the pod is bound in (the scheduler's ``bind`` wrote the
            lock, ``bind-phase: allocating`` and ``*-devices-to-allocate``).
        vendors: the vendor keys the pod was given devices of, in allocation order.
        inventory: the node's devices as the scheduler reads them (the device plugin
            advertises ``split_count`` IDs per device, and hands them to
            ``hami_allocate`` as ``node_devices``).
        state: the node's backend records (``NodeState``) to keep across pods;
            default a fresh one in memory.

    Returns:
        ``(container name, vendor, answer)`` per call, in kubelet's order.

    Raises:
        HamiError: what the ``Allocator`` raises (``AllocateFailedError`` once the pod
            is known: the pod is then marked ``bind-phase: failed`` and the lock freed).
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    state = state if state is not None else MemoryNodeState()
    allocators: dict[str, Allocator] = {}
    per_vendor: dict[str, PodDevices] = {}
    free: dict[str, list[str]] = {}
    for vendor in vendors:
        devices = tuple(d for d in inventory if d.vendor == vendor)
        ids = [i for d in devices for i in fake_ids(d)]
        known = frozenset(ids)
        allocators[vendor] = Allocator(
            store,
            manager,
            vendor=vendor,
            node=node,
            known_ids=_returns(known),
            make_dir=_no_host_dir,
            write_file=_no_host_file,
            make_file=_no_shared_file,
            node_devices=_returns(devices),
            state=state,
            observe_pods=False,
        )
        value = annotations.get(manager.device_type(vendor).to_allocate_annotation)
        per_vendor[vendor] = decode_pod_devices(value) if value else ()
        free[vendor] = ids
    # kubelet hands the devices of an init container on to the containers after it
    # (its device manager's ``devicesToReuse``): first to take, never counted twice.
    reuse: dict[str, list[str]] = {vendor: [] for vendor in vendors}
    out: list[tuple[str, str, ContainerAllocation]] = []
    for position, (spec, init, _) in enumerate(containers(pod)):
        for vendor in vendors:
            entries = per_vendor[vendor]
            assigned = entries[position] if position < len(entries) else ()
            if not assigned:
                continue  # kubelet asks no device plugin for a resource not requested
            allocator = allocators[vendor]
            must = reuse[vendor][: len(assigned)]
            if len(must) == len(assigned):
                ids = must
            else:
                [ids] = allocator.preferred(
                    [
                        PreferredRequest(
                            available=tuple(free[vendor] + must),
                            must_include=tuple(must),
                            size=len(assigned),
                        )
                    ]
                )
            free[vendor] = [i for i in free[vendor] if i not in ids]
            reuse[vendor] = [i for i in reuse[vendor] if i not in ids]
            [answer] = allocator.allocate([ids])
            if init:
                reuse[vendor].extend(ids)
            out.append((str(spec.get("name", "")), vendor, answer))
    return out
