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

from hami_core.model import (
    Allocation,
    ContainerDevices,
    DevicePolicy,
    DeviceUsage,
    FitResult,
    MigSlot,
    NodeInfo,
    PodRequest,
    ReasonCode,
)
from hami_core.plugin import BackendManager

from .quota import QuotaLimit, charge_of, quota_violation


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
    quota_limits: tuple[QuotaLimit, ...] = (),
    quota_used: Mapping[tuple[str, str], int] | None = None,
) -> NodeFit:
    """Place every container of ``request`` on ``node`` given current ``usage``.

    Args:
        usage: uuid -> usage of every device of the node, excluding this pod.
        quota_limits / quota_used: the namespace's device quotas and their usage.

    Returns:
        A ``NodeFit``; never raises for "does not fit".
    """
    (fit,) = fit_pod_nodes(pod, request, [(node, usage)], manager, policy=policy, batch=False)
    if fit.allocation is None or not quota_limits:
        return fit
    charge = {
        (vendor, measure): value
        for vendor, devices in fit.allocation.devices.items()
        for measure, value in charge_of(pod, devices, manager.device_type(vendor)).items()
    }
    message = quota_violation(quota_limits, quota_used or {}, charge)
    if message:
        return NodeFit(
            node=node.name, reason=f"{ReasonCode.RESOURCE_QUOTA_NOT_FIT.value} ({message})"
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
) -> list[NodeFit]:
    """``fit_pod`` (without quota) on many nodes at once: container by container, each
    request goes to its backend in one call for every node still in the running
    (``BackendManager.fit_nodes``: the optional batch hook ``hami_fit_nodes``, else
    ``hami_fit`` per node), so a pod of a new shape costs one dispatch per container
    and vendor rather than one per node.

    Args:
        nodes: ``(node, usage)`` pairs; usage as ``fit_pod``'s, excluding this pod.
        batch: False to call ``hami_fit`` per node (one node, or isolating a failure).

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
    for pos, container in enumerate(request.containers):
        for req in container.devices:
            if not alive:
                break
            views = [
                tuple(
                    _with_taken(u, taken[i])
                    # ``working`` holds the node's usage plus the pod's sidecars and app
                    # containers placed so far; in wire order a plain init container
                    # comes before every app container, so it sees the sidecars before it
                    for u in working[i].values()
                    if u.device.vendor == req.vendor
                )
                for i in alive
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
            results = (
                manager.fit_nodes(req, items, pod=pod, policy=policy)
                if batch
                else [
                    manager.fit(req, n, u, pod=pod, policy=policy, allocated=a) for n, u, a in items
                ]
            )
            still: list[int] = []
            for i, vendor_usage, result in zip(alive, views, results, strict=True):
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


def _with_taken(usage: DeviceUsage, taken: Mapping[str, tuple[MigSlot, ...]]) -> DeviceUsage:
    """``usage`` with the MIG instances the pod's earlier containers took on that GPU
    marked in use (not charged: memory and cores follow the init-container rule); those
    of earlier app containers are in an app container's view already."""
    slots = taken.get(usage.device.uuid)
    extra = tuple(m for m in slots or () if m not in usage.mig_in_use)
    return attrs.evolve(usage, mig_in_use=usage.mig_in_use + extra) if extra else usage
