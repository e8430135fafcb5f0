"""The fit driver: a whole pod on one node, container by container.

Containers are fitted in wire order (init containers and sidecars in spec order, then
app containers). Sidecars and app containers are fitted cumulatively (they run
together); a plain init container is fitted against the node's usage plus the pod's
sidecars placed so far, i.e. those declared before it (it runs beside them only), and
charges nothing further. The pod's charge per device is then Kubernetes' rule,
``hami_core.model.effective_request`` (a pod being placed has not started, so its init
containers always count).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from hami_core.facts.policy import default_device_chain, holds_exclusively
from hami_core.model import (
    Allocation,
    ContainerDevices,
    DevicePolicy,
    DevicePolicyChain,
    DeviceUsage,
    FitResult,
    MigSlot,
    NodeInfo,
    PodRequest,
    ReasonCode,
)
from hami_core.plugin import BackendManager


@attrs.frozen(kw_only=True)
class ContainerMiss:
    """Why one container's request did not fit on the node."""

    container: str
    vendor: str
    result: FitResult
    devices_of_vendor: int


@attrs.frozen(kw_only=True)
class NodeFit:
    """A pod on one node: the placement, or why not.

    Attributes:
        node: the node name.
        allocation: the placement when it fits, else None.
        reason: the wire reason when it does not fit, e.g.
            ``"2/4 CardInsufficientMemory, 2/4 CardTypeMismatch"``.
        miss: the failing container's details (for explanations), when a device fit failed.
    """

    node: str
    allocation: Allocation | None = None
    reason: str = ""
    miss: ContainerMiss | None = None

    @property
    def fits(self) -> bool:
        return self.allocation is not None


def fit_pod(
    pod: Mapping[str, Any],
    request: PodRequest,
    node: NodeInfo,
    usage: Mapping[str, DeviceUsage],
    manager: BackendManager,
    *,
    policy: DevicePolicy,
    default_chain: DevicePolicyChain | None = None,
) -> NodeFit:
    """Place every container of ``request`` on ``node`` given current ``usage``.

    Args:
        usage: uuid -> usage of every device of the node, excluding this pod.
        default_chain: as ``fit_pod_nodes``'.

    Returns:
        A ``NodeFit``; never raises for "does not fit".
    """
    (fit,) = fit_pod_nodes(
        pod,
        request,
        [(node, usage)],
        manager,
        policy=policy,
        batch=False,
        default_chain=default_chain,
    )
    return fit


def fit_pod_nodes(
    pod: Mapping[str, Any],
    request: PodRequest,
    nodes: Sequence[tuple[NodeInfo, Mapping[str, DeviceUsage]]],
    manager: BackendManager,
    *,
    policy: DevicePolicy,
    batch: bool = True,
    default_chain: DevicePolicyChain | None = None,
) -> list[NodeFit]:
    """``fit_pod`` (without quota) on many nodes at once: container by container, each
    request goes to its backend in one call for every node still in the running
    (``BackendManager.fit_nodes``: the optional batch hook ``hami_fit_nodes``, else
    ``hami_fit`` per node), so a pod of a new shape costs one dispatch per container
    and vendor rather than one per node.

    Args:
        nodes: ``(node, usage)`` pairs; usage as ``fit_pod``'s, excluding this pod.
        batch: False to call ``hami_fit`` per node (one node, or isolating a failure).
        default_chain: the device policy of a pod that names none (the scheduler's
            override or the configured default: ``policy.default_device_chain``); None
            reads the configuration's.

    ``mutex`` (HAMi#3038) is kept here, for every vendor, before any backend is asked:
    a device a live ``mutex`` pod holds (``DeviceUsage.holders``,
    ``policy.holds_exclusively``) is refused to every pod, and a ``mutex`` pod is refused
    every device another container uses (below its time-slice count; a full one is left
    to the backend's own reason, HAMi's order), both ``ExclusiveDeviceAllocateConflict``;
    the backend sees the other devices only.

    Returns:
        One ``NodeFit`` per node, in order; never raises for "does not fit".
    """
    out: list[NodeFit | None] = [None] * len(nodes)
    n_containers = len(request.containers)
    placed: list[dict[str, list[ContainerDevices]]] = []
    working: list[dict[str, DeviceUsage]] = []
    alive: list[int] = []
    for i, (node, usage) in enumerate(nodes):
        broken = next((v for v in request.vendors if v in node.unregistered), None)
        placed.append({v: [() for _ in range(n_containers)] for v in request.vendors})
        if broken is not None:
            out[i] = NodeFit(
                node=node.name,
                reason=f"{ReasonCode.NODE_UNREGISTERED.value} ({node.unregistered[broken]})",
            )
            working.append({})
        else:
            alive.append(i)
            working.append(dict(usage))  # app containers are charged as they are placed
    # MIG instances the pod's earlier containers took, per node and GPU: kubelet
    # allocates every container of a pod at admission and an instance lives until the
    # pod is gone (docs/sharing-modes.md), so no later container, init or app, may get
    # a placement overlapping them (the app containers' own are in ``working`` already).
    # Not even the same instance again: an init container's would be free to reuse, but
    # one instance per container keeps every reservation of the pod distinct.
    taken: list[dict[str, tuple[MigSlot, ...]]] = [{} for _ in nodes]
    chain = default_chain or default_device_chain(manager.config)
    exclusive = holds_exclusively((pod.get("metadata") or {}).get("annotations") or {}, chain)
    for pos, container in enumerate(request.containers):
        for req in container.devices:
            if not alive:
                break
            # ``working`` holds the node's usage plus the pod's sidecars and app
            # containers placed so far; in wire order a plain init container comes
            # before every app container, so it sees the sidecars before it
            everything = [
                tuple(
                    _with_taken(u, taken[i])
                    for u in working[i].values()
                    if u.device.vendor == req.vendor
                )
                for i in alive
            ]
            refused = [_mutex_refused(all_of, exclusive, chain) for all_of in everything]
            views = [
                tuple(u for u in all_of if u.device.uuid not in no)
                for all_of, no in zip(everything, refused, strict=True)
            ]
            # HAMi's ``allocated``: the earlier containers of the same kind (init
            # containers run one after another, app containers together).
            kin = [
                p
                for p, prior in enumerate(request.containers[:pos])
                if prior.init == container.init
            ]
            items = [
                (
                    nodes[i][0],
                    v,
                    tuple(placed[i][req.vendor][p] for p in kin if placed[i][req.vendor][p]),
                )
                for i, v in zip(alive, views, strict=True)
            ]
            # a node whose every device mutex refused is not asked
            asked = [k for k, (_, v, _) in enumerate(items) if v or not refused[k]]
            answers = iter(
                manager.fit_nodes(req, [items[k] for k in asked], pod=pod, policy=policy)
                if batch
                else [
                    manager.fit(req, n, u, pod=pod, policy=policy, allocated=a)
                    for n, u, a in (items[k] for k in asked)
                ]
            )
            was_asked = set(asked)
            results = [
                _with_refused(
                    next(answers) if k in was_asked else FitResult(),
                    refused[k],
                    req.count,
                    len(everything[k]),
                )
                for k in range(len(items))
            ]
            still: list[int] = []
            for i, vendor_usage, result in zip(alive, everything, results, strict=True):
                node = nodes[i][0]
                if not result.fits:
                    summary = (
                        result.summary(len(vendor_usage))
                        if vendor_usage
                        else ReasonCode.NODE_INSUFFICIENT_DEVICE.value
                    )
                    out[i] = NodeFit(
                        node=node.name,
                        reason=summary,
                        miss=ContainerMiss(
                            container=container.name,
                            vendor=req.vendor,
                            result=result,
                            devices_of_vendor=len(vendor_usage),
                        ),
                    )
                    continue
                placed[i][req.vendor][pos] = result.devices
                for d in result.devices:
                    if d.mig is not None:
                        taken[i][d.uuid] = (*taken[i].get(d.uuid, ()), d.mig)
                if not container.init:
                    w = working[i]
                    for d in result.devices:
                        w[d.uuid] = w[d.uuid].charged(
                            memory_mib=d.memory_mib, cores_pct=d.cores_pct, mig=d.mig
                        )
                still.append(i)
            alive = still
    for i in alive:
        node = nodes[i][0]
        out[i] = NodeFit(
            node=node.name,
            allocation=Allocation(
                node=node.name, devices={v: tuple(c) for v, c in placed[i].items()}
            ),
        )
    done = [f for f in out if f is not None]
    assert len(done) == len(nodes)  # every node ended placed or with its reason
    return done


def _mutex_refused(
    usage: Sequence[DeviceUsage], exclusive: bool, chain: DevicePolicyChain
) -> dict[str, ReasonCode]:
    """The devices of ``usage`` that ``mutex`` refuses to the pod (``fit_pod_nodes``):
    those a live ``mutex`` pod holds, and, when the pod itself is ``mutex``
    (``exclusive``), those another container uses below their time-slice count."""
    out = {}
    for u in usage:
        held_by_mutex = any(holds_exclusively(h, chain) for h in u.holders)
        shared = exclusive and 0 < u.used_count < u.device.split_count
        if held_by_mutex or shared:
            out[u.device.uuid] = ReasonCode.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    return out


def _with_refused(
    result: FitResult, refused: Mapping[str, ReasonCode], count: int, devices: int
) -> FitResult:
    """The backend's ``result`` on the devices ``mutex`` left, with the refused ones'
    reasons added; a node that has ``count`` devices is not short of devices (HAMi's
    ``AllocatedCardsInsufficientRequest`` when some are usable, as ``countshared``)."""
    if not refused:
        return result
    node_reason = result.node_reason
    if node_reason is ReasonCode.NODE_INSUFFICIENT_DEVICE and devices >= count:
        usable = devices - len(refused) - len(result.device_reasons)
        node_reason = ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST if usable > 0 else None
    return attrs.evolve(
        result,
        device_reasons={**refused, **result.device_reasons},
        node_reason=node_reason,
    )


def _with_taken(usage: DeviceUsage, taken: Mapping[str, tuple[MigSlot, ...]]) -> DeviceUsage:
    """``usage`` with the MIG instances the pod's earlier containers took on that GPU
    marked in use (not charged: memory and cores follow the init-container rule); those
    of earlier app containers are in an app container's view already."""
    slots = taken.get(usage.device.uuid)
    extra = tuple(m for m in slots or () if m not in usage.mig_in_use)
    return attrs.evolve(usage, mig_in_use=usage.mig_in_use + extra) if extra else usage
