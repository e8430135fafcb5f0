"""The whole path of a pod on the embedded cluster: webhook -> filter -> prioritize ->
bind -> allocate, with the same functions the servers use (allocate: the device
plugin's ``Allocator``, called as kubelet calls it, ``kubelet``).

As in a real cluster: a pod for another scheduler is left to it (given nothing); a pod
asking a device resource no installed backend manages is not placed (reported
unmanaged); kube-scheduler's own checks (``kubechecks``) decide which nodes reach the
extender's filter.
"""

from __future__ import annotations

import copy
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any

import attrs

from hami_core.cluster.eviction import Evicted, MemoryEvictions
from hami_core.cluster.memory import MemoryCluster
from hami_core.deviceplugin.allocate import finish_allocation
from hami_core.deviceplugin.allocator import AllocateFailedError
from hami_core.errors import HamiError
from hami_core.facts.priority import may_preempt
from hami_core.model import (
    Allocation,
    ContainerAllocation,
    DevicePolicy,
    DevicePolicyChain,
    MemoryNodeState,
    NodePolicy,
)
from hami_core.plugin import BackendManager
from hami_core.protocol.pods import is_live
from hami_core.scheduling.gangs import GangOptions
from hami_core.scheduling.preemptor import Preemptor
from hami_core.scheduling.scheduler import FilterResult, Scheduler
from hami_core.webhook.admission import DEFAULT_SCHEDULER, Admission, takes_scheduler_name
from hami_core.webhook.mutation import apply_patch

from .apiserver import (
    decode_problem,
    invalid_message,
    undecodable_message,
    validate_pod,
    without_nulls,
)
from .kubechecks import kube_reason
from .kubelet import allocate_pod
from .podtopology import NAMESPACE_NAME_LABEL, prepare
from .priority import PriorityClasses

#: Who denied a pod (``Outcome.denied_by``).
WEBHOOK, KUBE_APISERVER = "webhook", "kube-apiserver"


@attrs.frozen(kw_only=True)
class Outcome:
    """What happened to one pod.

    Attributes:
        namespace, name: the pod.
        denied: the denial message, or "".
        denied_by: who denied it: ``webhook`` (HAMi's admission webhook) or
            ``kube-apiserver`` (its validation of the object, ``apiserver``).
        node: where it was bound, or None.
        allocation: its devices, or None (unschedulable, denied, or no devices).
        filter: the filter result (per-node reasons), None when denied.
        error: a failure after filtering (bind, allocate), or "".
        envs: container name -> env added by the device plugin.
        wants_devices: the pod asks for managed devices.
        left_to: the ``schedulerName`` of another scheduler the pod is left to, or "".
        unmanaged: device resources the pod asks that no installed backend manages.
        admission_patch: the webhook's RFC 6902 operations (scheduler name, defaults).
        allocations: container name -> the device plugin's answer for it (env, mounts,
            device nodes, CDI devices), one entry per vendor merged.
        preempted: the pods evicted to make room for it (``namespace/name``), in the
            order evicted; empty when none.
        preemption: what preemption did or why it could not help (``preemptor``), ""
            when it was not tried.
    """

    namespace: str
    name: str
    denied: str = ""
    denied_by: str = WEBHOOK
    node: str | None = None
    allocation: Allocation | None = None
    filter: FilterResult | None = None
    error: str = ""
    envs: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    wants_devices: bool = False
    left_to: str = ""
    unmanaged: tuple[str, ...] = ()
    admission_patch: tuple[Mapping[str, Any], ...] = ()
    allocations: Mapping[str, ContainerAllocation] = attrs.field(factory=dict)
    preempted: tuple[str, ...] = ()
    preemption: str = ""

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
        device_policy: DevicePolicy | DevicePolicyChain | None = None,
        priority_classes: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """The gang members a placement wakes are retried by the caller (``retry``; the
        runner does it after each pod), so nothing is written to wake them."""
        self.cluster = cluster
        #: kube-apiserver's Priority admission over the cluster's PriorityClasses.
        self.priorities = PriorityClasses(priority_classes)
        self.manager = manager
        #: Each node's device-plugin records (``NodeState``), kept in memory across the
        #: pods of a run so e.g. AMD's CU ranges stay disjoint: never on the host.
        self.node_states: dict[str, MemoryNodeState] = {}
        self.admission = Admission(manager, cluster)
        # Every node explained in full (the pre-filter's reasons name sharing checks only).
        self.scheduler = Scheduler(
            cluster,
            manager,
            node_policy=node_policy,
            device_policy=device_policy,
            prefilter=False,
            gang=GangOptions(wake=lambda _: None),
        )
        #: Slice-aware preemption, as the leader runs it (evictions delete at once here).
        self.preemptor = Preemptor.over(self.scheduler, MemoryEvictions(cluster), settle_s=0)

    def _advertised(self) -> set[str]:
        """Every resource name some node states in its capacity or allocatable."""
        names: set[str] = set()
        for node_obj in self.cluster.list_nodes():
            status = node_obj.get("status") or {}
            for section in ("capacity", "allocatable"):
                names.update(map(str, status.get(section) or {}))
        return names

    def _assigned(self, node: str) -> list[Mapping[str, Any]]:
        """The live pods bound to ``node`` (``spec.nodeName``): what kube-scheduler's
        snapshot holds for it."""
        return [
            p
            for p in self.cluster.pods_on_node(node)
            if is_live(p) and (p.get("spec") or {}).get("nodeName") == node
        ]

    def _namespace_labels(self, namespace: str) -> dict[str, str]:
        """A namespace's labels: the cluster file's Namespace object's, and the name
        label kube-apiserver (1.21+) puts on every namespace."""
        return {**self.cluster.namespace_labels(namespace), NAMESPACE_NAME_LABEL: namespace}

    def submit(self, pod: Mapping[str, Any]) -> Outcome:
        """Admit, schedule, bind and allocate one pod; the pod stays in the cluster when
        admitted (Pending when unschedulable)."""
        meta = pod.get("metadata") or {}
        meta = meta if isinstance(meta, Mapping) else {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name", ""))
        pod = without_nulls(pod)
        problem = decode_problem(pod, kind="Pod")
        if problem:
            return Outcome(
                namespace=namespace,
                name=name,
                denied=undecodable_message("Pod", problem),
                denied_by=KUBE_APISERVER,
            )
        obj = copy.deepcopy(dict(pod))
        obj.setdefault("metadata", {})["namespace"] = namespace
        # A stable uid (the API server would pick one): the device plugin's answer names
        # it in paths, and the same input must give the same report.
        obj["metadata"].setdefault(
            "uid", str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"hami-simulate/{namespace}/{name}"))
        )
        spec = obj.setdefault("spec", {})
        refused = self.priorities.admit(obj)  # before the webhooks, as in kube-apiserver
        if refused:
            return Outcome(namespace=namespace, name=name, denied=refused, denied_by=KUBE_APISERVER)
        if not spec.get("schedulerName"):
            # kube-apiserver's defaulting, before any webhook (SetDefaults_PodSpec): the
            # webhook's forceOverwriteDefaultScheduler decides on this name
            spec["schedulerName"] = DEFAULT_SCHEDULER
        review = self.admission.review(obj)
        if not review.allowed:
            return Outcome(
                namespace=namespace, name=name, denied=review.message, wants_devices=True
            )
        if review.patch:
            obj = apply_patch(obj, review.patch)
        # kube-apiserver validates the object after the mutating webhooks: one it
        # refuses is never stored, and the run goes on with the next
        errors = validate_pod(obj)
        if errors:
            return Outcome(
                namespace=namespace,
                name=name,
                denied=invalid_message("Pod", name, errors),
                denied_by=KUBE_APISERVER,
            )
        stored = self.cluster.add_pod(obj)
        patch = tuple(review.patch)
        scheduler_name = str((stored.get("spec") or {}).get("schedulerName") or "")
        if not takes_scheduler_name(scheduler_name, self.manager.config):
            # another scheduler's pod (or default-scheduler's, when the webhook leaves
            # those alone): the webhook did not take it, our scheduler never sees it
            return Outcome(
                namespace=namespace, name=name, left_to=scheduler_name, admission_patch=patch
            )
        foreign = unmanaged_resources(stored, self.manager)
        advertised = self._advertised() if foreign else set()
        unmanaged = tuple(r for r in foreign if r not in advertised)
        if unmanaged:
            return Outcome(
                namespace=namespace, name=name, unmanaged=unmanaged, admission_patch=patch
            )
        return self._schedule(stored, patch=patch, mutated=review.mutated, foreign=foreign)

    def retry(self, previous: Outcome) -> Outcome:
        """Schedule again a pod the run left Pending (``previous``: its outcome), as
        kube-scheduler does once the pod is woken: a gang member whose group was placed
        by a later member (``gangs.Gangs``)."""
        stored = self.cluster.get_pod(previous.namespace, previous.name)
        return self._schedule(
            stored,
            patch=previous.admission_patch,
            mutated=previous.wants_devices,
            foreign=unmanaged_resources(stored, self.manager),
        )

    def _schedule(
        self,
        stored: Mapping[str, Any],
        *,
        patch: tuple[Mapping[str, Any], ...],
        mutated: bool,
        foreign: tuple[str, ...],
    ) -> Outcome:
        """kube-scheduler's checks, our filter, bind and the device plugin's allocate
        for an admitted, stored pod."""
        meta = stored["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        kube_failed: dict[str, str] = {}
        passing: list[str] = []
        nodes = self.cluster.list_nodes()
        topology = prepare(stored, nodes, self._assigned, ns_labels=self._namespace_labels)
        for node_obj in nodes:
            node_name = str(node_obj["metadata"]["name"])
            reason = kube_reason(
                stored, node_obj, self.cluster.pods_on_node(node_name), extended=foreign
            ) or topology.reason(node_obj)
            if reason:
                kube_failed[node_name] = reason
            else:
                passing.append(node_name)
        if (stored.get("spec") or {}).get("nodeName") and not passing:
            missing = f"node {stored['spec']['nodeName']} is not in the cluster"
            if stored["spec"]["nodeName"] not in kube_failed:
                kube_failed[str(stored["spec"]["nodeName"])] = missing
        try:
            result = self.scheduler.filter(stored, passing)
        except HamiError as exc:
            return Outcome(
                namespace=namespace,
                name=name,
                error=str(exc),
                wants_devices=mutated,
                admission_patch=patch,
            )
        if kube_failed:
            result = attrs.evolve(result, failed={**kube_failed, **result.failed})
        wants = mutated or bool(result.fits)
        node = result.best()
        preempted: tuple[str, ...] = ()
        preemption = ""
        if node is None and result.fits and may_preempt(stored):
            # the servers' PostFilter: evict lower-priority pods, then filter again
            tried = self.preemptor.preempt_now(self.cluster.get_pod(namespace, name), passing)
            preemption = tried.message
            preempted = tuple(r for r, how in tried.evicted.items() if how is Evicted.EVICTED)
            if tried.result in ("preempted", "nominated"):
                stored = self.cluster.get_pod(namespace, name)
                again = self.scheduler.filter(stored, passing)
                node = again.best()
                if kube_failed:
                    again = attrs.evolve(again, failed={**kube_failed, **again.failed})
                result = again
        if node is None:
            return Outcome(
                namespace=namespace,
                name=name,
                filter=result,
                wants_devices=wants,
                admission_patch=patch,
                preempted=preempted,
                preemption=preemption,
            )
        try:
            allocation = self.scheduler.bind(namespace, name, uid=uid, node=node)
        except HamiError as exc:
            return Outcome(
                namespace=namespace,
                name=name,
                filter=result,
                error=str(exc),
                wants_devices=wants,
                admission_patch=patch,
            )
        envs: dict[str, dict[str, str]] = {}
        answers: dict[str, ContainerAllocation] = {}
        if allocation is not None:
            bound = self.cluster.get_pod(namespace, name)
            inventory = self.scheduler.node_info(self.cluster.get_node(node)).devices
            try:
                for cname, _, alloc in allocate_pod(
                    self.cluster,
                    self.manager,
                    bound,
                    node=node,
                    vendors=tuple(allocation.devices),
                    inventory=inventory,
                    state=self.node_states.setdefault(node, MemoryNodeState()),
                ):
                    envs.setdefault(cname, {}).update(alloc.envs)
                    answers[cname] = _merge(answers.get(cname), alloc)
            except HamiError as exc:
                if not isinstance(exc, AllocateFailedError):
                    # Failed before the Allocator knew the pod: kubelet's pod fails and
                    # the lock goes, as the device plugin's failure path does.
                    finish_allocation(self.cluster, bound, node=node, success=False)
                return Outcome(
                    namespace=namespace,
                    name=name,
                    node=node,
                    allocation=allocation,
                    filter=result,
                    error=f"allocate: {exc}",
                    wants_devices=wants,
                    admission_patch=patch,
                )
            self.cluster.set_pod_phase(namespace, name, "Running")
        return Outcome(
            namespace=namespace,
            name=name,
            node=node,
            allocation=allocation,
            filter=result,
            envs=envs,
            wants_devices=wants,
            admission_patch=patch,
            allocations=answers,
            preempted=preempted,
            preemption=preemption,
        )


def _merge(a: ContainerAllocation | None, b: ContainerAllocation) -> ContainerAllocation:
    """Two vendors' answers for one container, as kubelet merges device plugins'."""
    if a is None:
        return b
    return ContainerAllocation(
        envs={**a.envs, **b.envs},
        mounts=a.mounts + b.mounts,
        device_nodes=a.device_nodes + b.device_nodes,
        cdi_devices=a.cdi_devices + b.cdi_devices,
        annotations={**a.annotations, **b.annotations},
    )


def unmanaged_resources(pod: Mapping[str, Any], manager: BackendManager) -> tuple[str, ...]:
    """Extended resources (``<domain>/<name>``) the pod asks that no installed backend
    manages: a domain none of their resources use (``amd.com/gpu`` with only hami-nvidia
    installed), or a name of such a domain that no backend reads (a typo such as
    ``nvidia.com/gpumemory``: the webhook admits the pod as HAMi's does, and
    kube-scheduler, which checks every resource the extender does not manage, finds no
    node with it). The names a configuration section gives a backend's resources are
    its own. ``kubernetes.io`` resources are Kubernetes' own. A name some node
    states in its capacity is another device plugin's: kube-scheduler places it
    (``Pipeline.submit`` checks it as kube-scheduler's ``NodeResourcesFit`` does)."""
    domains: set[str] = set()
    known: set[str] = set()
    patterns: list[str] = []
    for t in manager.device_types():
        r = t.resources
        for n in (r.count, r.memory, r.memory_pct, r.cores, r.cores_alias):
            if n and "/" in n:
                domains.add(n.split("/", 1)[0])
                known.add(n)
        patterns.extend(t.other_resources)
    for backend in manager.infos:  # names a section renames (HAMi's resourceCountName, ...)
        conf = manager.vendor_config(backend)
        for n in (
            conf.resource_count_name,
            conf.resource_memory_name,
            conf.resource_memory_pct_name,
            conf.resource_cores_name,
        ):
            if n and "/" in n:
                domains.add(n.split("/", 1)[0])
                known.add(n)
    spec = pod.get("spec") or {}
    out: dict[str, None] = {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        res = (c.get("resources") or {}) if isinstance(c, Mapping) else {}
        for section in ("limits", "requests"):
            for key in map(str, res.get(section) or {}):
                domain = key.split("/", 1)[0] if "/" in key else ""
                if not domain or domain.endswith("kubernetes.io"):
                    continue
                if domain not in domains or (
                    key not in known and not any(fnmatchcase(key, p) for p in patterns)
                ):
                    out.setdefault(key, None)
    return tuple(out)
