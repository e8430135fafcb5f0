"""The whole path of a pod on the embedded cluster: webhook -> filter -> prioritize ->
bind -> allocate, with the same functions the servers use."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import attrs
import jsonpatch

from hami_core.cluster.memory import MemoryCluster
from hami_core.deviceplugin.allocate import container_allocations, finish_allocation
from hami_core.errors import HamiError
from hami_core.model import Allocation, ContainerAllocation, DevicePolicy, NodePolicy
from hami_core.plugin import BackendManager
from hami_core.scheduling.scheduler import FilterResult, Scheduler
from hami_core.webhook.admission import Admission


@attrs.frozen(kw_only=True)
class Outcome:
    """What happened to one pod.

    Attributes:
        namespace, name: the pod.
        denied: the webhook's denial message, or "".
        node: where it was bound, or None.
        allocation: its devices, or None (unschedulable, denied, or no devices).
        filter: the filter result (per-node reasons), None when denied.
        error: a failure after filtering (bind, allocate), or "".
        envs: container name -> env added by the device plugin.
        wants_devices: the pod asks for managed devices.
    """

    namespace: str
    name: str
    denied: str = ""
    node: str | None = None
    allocation: Allocation | None = None
    filter: FilterResult | None = None
    error: str = ""
    envs: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    wants_devices: bool = False

    @property
    def scheduled(self) -> bool:
        return self.node is not None


class Pipeline:
    """Runs pods through admission, scheduling and allocation on a ``MemoryCluster``."""

    def __init__(
        self,
        cluster: MemoryCluster,
        manager: BackendManager,
        *,
        node_policy: NodePolicy | None = None,
        device_policy: DevicePolicy | None = None,
    ) -> None:
        self.cluster = cluster
        self.manager = manager
        self.admission = Admission(manager, cluster)
        self.scheduler = Scheduler(
            cluster, manager, node_policy=node_policy, device_policy=device_policy
        )

    def submit(self, pod: Mapping[str, Any]) -> Outcome:
        """Admit, schedule, bind and allocate one pod; the pod stays in the cluster when
        admitted (Pending when unschedulable)."""
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name", ""))
        obj = copy.deepcopy(dict(pod))
        obj.setdefault("metadata", {})["namespace"] = namespace
        review = self.admission.review(obj)
        if not review.allowed:
            return Outcome(
                namespace=namespace, name=name, denied=review.message, wants_devices=True
            )
        if review.patch:
            obj = jsonpatch.apply_patch(obj, list(review.patch))
        stored = self.cluster.add_pod(obj)
        uid = stored["metadata"]["uid"]
        try:
            result = self.scheduler.filter(stored)
        except HamiError as exc:
            return Outcome(
                namespace=namespace, name=name, error=str(exc), wants_devices=review.mutated
            )
        wants = review.mutated or bool(result.fits)
        node = result.best()
        if node is None:
            return Outcome(namespace=namespace, name=name, filter=result, wants_devices=wants)
        try:
            allocation = self.scheduler.bind(namespace, name, uid=uid, node=node)
        except HamiError as exc:
            return Outcome(
                namespace=namespace, name=name, filter=result, error=str(exc), wants_devices=wants
            )
        envs: dict[str, dict[str, str]] = {}
        if allocation is not None:
            bound = self.cluster.get_pod(namespace, name)
            try:
                for vendor in allocation.devices:
                    for cname, alloc in container_allocations(bound, self.manager, vendor):
                        envs.setdefault(cname, {}).update(_env(alloc))
            except HamiError as exc:
                finish_allocation(self.cluster, bound, node=node, success=False)
                return Outcome(
                    namespace=namespace,
                    name=name,
                    node=node,
                    allocation=allocation,
                    filter=result,
                    error=f"allocate: {exc}",
                    wants_devices=wants,
                )
            finish_allocation(self.cluster, bound, node=node, success=True)
            self.cluster.set_pod_phase(namespace, name, "Running")
        return Outcome(
            namespace=namespace,
            name=name,
            node=node,
            allocation=allocation,
            filter=result,
            envs=envs,
            wants_devices=wants,
        )


def _env(alloc: ContainerAllocation) -> dict[str, str]:
    return dict(alloc.envs)
