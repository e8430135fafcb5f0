"""The fit driver: a whole pod on one node, container by container.

Init containers are fitted one at a time against the node's usage (they run one after
another); app containers are fitted cumulatively (they run together). The pod's
charge per device is then ``max(largest init, sum of apps)`` (``hami_core.model.charge``;
a pod being placed has not started, so its init containers always count).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from hami_core.model import (
    Allocation,
    ContainerDevices,
    DevicePolicy,
    DeviceUsage,
    FitResult,
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
    for vendor in request.vendors:
        if vendor in node.unregistered:
            return NodeFit(
                node=node.name,
                reason=f"{ReasonCode.NODE_UNREGISTERED.value} ({node.unregistered[vendor]})",
            )
    n_containers = len(request.containers)
    placed: dict[str, list[ContainerDevices]] = {
        v: [() for _ in range(n_containers)] for v in request.vendors
    }
    working = dict(usage)
    for pos, container in enumerate(request.containers):
        base = usage if container.init else working
        for req in container.devices:
            vendor_usage = tuple(u for u in base.values() if u.device.vendor == req.vendor)
            # HAMi's ``allocated``: the earlier containers of the same kind (init
            # containers run one after another, app containers together).
            earlier = tuple(
                devices
                for prior, devices in zip(
                    request.containers[:pos], placed[req.vendor], strict=False
                )
                if prior.init == container.init and devices
            )
            result = manager.fit(req, node, vendor_usage, pod=pod, policy=policy, allocated=earlier)
            if not result.fits:
                summary = (
                    result.summary(len(vendor_usage))
                    if vendor_usage
                    else (ReasonCode.NODE_INSUFFICIENT_DEVICE.value)
                )
                return NodeFit(
                    node=node.name,
                    reason=summary,
                    miss=ContainerMiss(
                        container=container.name,
                        vendor=req.vendor,
                        result=result,
                        devices_of_vendor=len(vendor_usage),
                    ),
                )
            placed[req.vendor][pos] = result.devices
            if not container.init:
                for d in result.devices:
                    working[d.uuid] = working[d.uuid].charged(
                        memory_mib=d.memory_mib, cores_pct=d.cores_pct
                    )
    allocation = Allocation(node=node.name, devices={v: tuple(c) for v, c in placed.items()})
    if quota_limits:
        charge = {
            (vendor, measure): value
            for vendor, devices in allocation.devices.items()
            for measure, value in charge_of(pod, devices, manager.device_type(vendor)).items()
        }
        message = quota_violation(quota_limits, quota_used or {}, charge)
        if message:
            return NodeFit(
                node=node.name, reason=f"{ReasonCode.RESOURCE_QUOTA_NOT_FIT.value} ({message})"
            )
    return NodeFit(node=node.name, allocation=allocation)
