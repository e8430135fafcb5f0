"""Scheduler metrics (PROTOCOL.md §9, scheduler part), served on their own port (9395).

Names and labels are HAMi 2.10's (Project-HAMi/HAMi ``cmd/scheduler/metrics.go``), so
HAMi's Grafana dashboard and HAMi-WebUI work unchanged; every vendor uses the same
names with its own ``device_type``. Allocation, inventory and quota gauges are computed
at scrape time from the cluster store, so they never drift from the allocations of live
pods. Durations, outcomes and lock waits are recorded as they happen. Our own additions:
filter/bind outcomes, node-lock waits, informer freshness, device health and node
registration (for the alert rules in ``charts/hami/rules``).

Units as HAMi writes them: bytes; core ratios in percent of a device (0..100), except
for vendors whose ``DeviceTypeInfo.cores_unit`` is not percent, whose core gauges carry
the device list's value as HAMi does (AMD compute units, AWS Neuron core masks, Moore
Threads sGPU cores; PROTOCOL.md §9); on a GPU in ``mig`` mode the compute slices its
instances hold (``hami_core.model.migusage``: a full GPU is 100, not the 105 its seven
``1g`` instances book); ``hami_node_gpu_memory_allocated_ratio`` as a fraction (0..1, allocated / total).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_core.cluster.base import ClusterStore
from hami_core.errors import AnnotationError
from hami_core.facts.quota import namespace_usage, placed_by_us, quota_limits
from hami_core.facts.usage import requested_vendors
from hami_core.model import PERCENT, CoresUnit, DeviceInfo, DeviceTypeInfo, DeviceUsage, NodeInfo
from hami_core.model.migusage import held_cores_pct, instance_cores_pct
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.handshake import decode_handshake
from hami_core.protocol.migallocations import decode_mig_allocations
from hami_core.protocol.pods import is_live

MIB = 1024 * 1024
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_LOCK_BUCKETS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

DEVICE_LABELS = ["node", "device_uuid", "device_index", "device_type"]
CONTAINER_LABELS = ["namespace", "node", "pod", "container_index", "device_uuid"]


class LockWaits(Protocol):
    """Where bind reports its node-lock waits (``scheduling.bind.Binder``)."""

    lock_observer: Callable[[float, bool], None] | None


class GangView(Protocol):
    """What the metrics read of the gang stage (``scheduling.gangs.Gangs``)."""

    placed_total: int
    refused_total: int
    expired_total: int

    def waiting(self) -> int: ...

    def reserved(self) -> Mapping[str, Any]: ...


class PreemptionView(Protocol):
    """Where preemption reports each attempt (``scheduling.preemptor.Preemptor``)."""

    observer: Callable[[str, int], None] | None


class ConsolidationView(Protocol):
    """Where continuous consolidation reports each run (``defrag.continuous.Consolidator``:
    an ``ApplyReport``, read for its ``evicted`` and ``stopped``)."""

    observer: Callable[[Any], None] | None


#: ``ApplyReport.stopped`` -> the ``stopped`` label of the consolidation runs.
_STOPPED = {
    "no target needs a move": "done",
    "eviction budget spent": "budget",
    "not the leader": "not-leader",
}


class SchedulerView(Protocol):
    """What the metrics read of the scheduler (``scheduling.scheduler.Scheduler``): its
    store and backends, a node's devices and their usage, and bind's lock waits. Named
    here so this server does not import the scheduling engine (the import contract in
    pyproject.toml)."""

    @property
    def store(self) -> ClusterStore: ...

    @property
    def manager(self) -> BackendManager: ...

    @property
    def binder(self) -> LockWaits: ...

    @property
    def gangs(self) -> GangView: ...

    def node_info(self, node: Mapping[str, Any]) -> NodeInfo: ...

    def node_usage(
        self, info: NodeInfo, *, exclude_uid: str | None = None
    ) -> dict[str, DeviceUsage]: ...

    def quota_namespaces(self) -> list[str]: ...


def device_type(device: DeviceInfo) -> str:
    """HAMi's ``device_type`` label: the inventory's ``type`` (model), else the vendor."""
    return device.model or device.vendor


class SchedulerMetrics:
    """The scheduler's metrics in their own registry.

    Also installs itself as ``scheduler.binder.lock_observer`` so bind's node-lock waits are
    recorded (``hami_scheduler_node_lock_wait_seconds``).
    """

    def __init__(
        self, scheduler: SchedulerView, *, informers: dict[str, Any] | None = None
    ) -> None:
        """Args:
        informers: resource -> ``Informer`` (``KubeCluster.nodes`` / ``pods`` /
            ``quotas``) whose freshness is reported; none for an embedded store.
        """
        self.registry = CollectorRegistry()
        self.filter_seconds = Histogram(
            "hami_scheduler_filter_duration_seconds",
            "Time to answer /filter.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.score_seconds = Histogram(
            "hami_scheduler_score_duration_seconds",
            "Time to answer /prioritize.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.bind_seconds = Histogram(
            "hami_scheduler_bind_duration_seconds",
            "Time to answer /bind.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.bind_success = Counter(
            "hami_scheduler_bind_success", "Pods bound.", registry=self.registry
        )
        self.bind_failure = Counter(
            "hami_scheduler_bind_failure",
            "Binds that failed and were rolled back.",
            registry=self.registry,
        )
        self.filter_outcomes = Counter(
            "hami_scheduler_filter",
            "Answers of /filter: fit (some node fits), nofit (none does), error.",
            ["outcome"],
            registry=self.registry,
        )
        self.lock_wait_seconds = Histogram(
            "hami_scheduler_node_lock_wait_seconds",
            "Time bind waited for a node lock, by outcome (acquired, refused).",
            ["outcome"],
            buckets=_LOCK_BUCKETS,
            registry=self.registry,
        )
        self.preemption_attempts = Counter(
            "hami_scheduler_preemption_attempts",
            "Slice-aware preemption attempts, by result: preempted (victims evicted), "
            "nominated (room being freed already), no-candidate, waiting, fits, "
            "not-eligible, error.",
            ["result"],
            registry=self.registry,
        )
        self.preemption_victims = Counter(
            "hami_scheduler_preemption_victims",
            "Pods evicted (or deleted past their PodDisruptionBudget) to make room.",
            registry=self.registry,
        )
        self.consolidation_runs = Counter(
            "hami_scheduler_consolidation_runs",
            "Continuous consolidation runs, by why they stopped: done (no pending pod "
            "needs a move), budget (an eviction budget spent), not-leader, other.",
            ["stopped"],
            registry=self.registry,
        )
        self.consolidation_evictions = Counter(
            "hami_scheduler_consolidation_evictions",
            "Pods evicted by continuous consolidation (the Eviction API accepted it).",
            registry=self.registry,
        )
        # Children exist from the start, so a rate over the first event is not lost.
        for stopped in ("done", "budget", "not-leader", "other"):
            self.consolidation_runs.labels(stopped)
        for result in ("preempted", "nominated", "no-candidate", "error"):
            self.preemption_attempts.labels(result)
        for outcome in ("fit", "nofit", "error"):
            self.filter_outcomes.labels(outcome)
        for outcome in ("acquired", "refused"):
            self.lock_wait_seconds.labels(outcome)
        scheduler.binder.lock_observer = self.observe_lock_wait
        self.registry.register(AllocationCollector(scheduler))
        self.registry.register(InformerCollector(informers or {}))
        self.registry.register(GangCollector(scheduler.gangs))

    def watch_preemption(self, preemptor: PreemptionView | None) -> None:
        """Count ``preemptor``'s attempts and victims (none: the counters stay at 0)."""
        if preemptor is not None:
            preemptor.observer = self.observe_preemption

    def observe_preemption(self, result: str, victims: int) -> None:
        """One preemption attempt's ``result`` and how many pods it evicted."""
        self.preemption_attempts.labels(result).inc()
        if victims:
            self.preemption_victims.inc(victims)

    def watch_consolidation(self, consolidator: ConsolidationView | None) -> None:
        """Count ``consolidator``'s runs and evictions (none: the counters stay at 0)."""
        if consolidator is not None:
            consolidator.observer = self.observe_consolidation

    def observe_consolidation(self, report: Any) -> None:
        """One consolidation run's report (``defrag.apply.ApplyReport``)."""
        self.consolidation_runs.labels(_STOPPED.get(str(report.stopped), "other")).inc()
        if report.evicted:
            self.consolidation_evictions.inc(report.evicted)

    def observe_lock_wait(self, seconds: float, acquired: bool) -> None:
        """Record one node-lock acquisition attempt of ``seconds`` (bind)."""
        self.lock_wait_seconds.labels("acquired" if acquired else "refused").observe(seconds)


class GangCollector(Collector):
    """Gang groups (docs/preemption-and-gangs.md): waiting, placed, refused, expired."""

    def __init__(self, gangs: GangView) -> None:
        self.gangs = gangs

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "hami_scheduler_gang_groups_waiting",
            "Groups whose last placement was refused (GroupDoesNotFit).",
            value=float(self.gangs.waiting()),
        )
        yield GaugeMetricFamily(
            "hami_scheduler_gang_members_reserved",
            "Members holding a reservation of their placed group, not bound yet.",
            value=float(len(self.gangs.reserved())),
        )
        yield CounterMetricFamily(
            "hami_scheduler_gang_groups_placed",
            "Groups placed as a whole (their members' slices reserved together).",
            value=float(self.gangs.placed_total),
        )
        yield CounterMetricFamily(
            "hami_scheduler_gang_groups_refused",
            "Placements of a group refused as a whole.",
            value=float(self.gangs.refused_total),
        )
        yield CounterMetricFamily(
            "hami_scheduler_gang_reservations_expired",
            "Members' reservations let go after the timeout.",
            value=float(self.gangs.expired_total),
        )


class InformerCollector(Collector):
    """How fresh the scheduler's caches are: seconds since each last heard from the
    API server, whether it has listed, and how often it had to re-list."""

    def __init__(self, informers: dict[str, Any]) -> None:
        self.informers = informers

    def collect(self) -> Iterator[Metric]:
        age = GaugeMetricFamily(
            "hami_scheduler_informer_last_update_age_seconds",
            "Seconds since a cache last applied a list or watch event.",
            labels=["resource"],
        )
        synced = GaugeMetricFamily(
            "hami_scheduler_informer_synced", "1 once a cache has listed.", labels=["resource"]
        )
        relists = GaugeMetricFamily(
            "hami_scheduler_informer_relists", "Lists a cache has made.", labels=["resource"]
        )
        now = time.monotonic()
        for name, inf in sorted(self.informers.items()):
            last = getattr(inf, "last_update_monotonic", None)
            if last is not None:
                age.add_metric([name], max(0.0, now - last))
            synced.add_metric([name], 1.0 if inf.wait_synced(0) else 0.0)
            relists.add_metric([name], float(getattr(inf, "relists", 0)))
        yield from (age, synced, relists)


class AllocationCollector(Collector):
    """Per device: limits, allocation, sharers, health; per container: allocation;
    per node: registration and handshake age; per namespace: quota used and limit."""

    def __init__(self, scheduler: SchedulerView) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        store = self.scheduler.store
        types = self.scheduler.manager.device_types()
        g = _Families()
        now = dt.datetime.now(dt.UTC)
        by_vendor = {t.vendor: t for t in types}
        uuid_node: dict[str, str] = {}
        uuid_index: dict[str, int] = {}
        uuid_compute: dict[str, tuple[CoresUnit, int]] = {}
        uuid_device: dict[str, DeviceInfo] = {}
        for node in store.list_nodes():
            info = self.scheduler.node_info(node)
            for vendor in sorted(info.unregistered):
                g.unregistered.add_metric([info.name, vendor], 1)
            self._handshakes(g, node, types, now)
            for uuid, u in sorted(self.scheduler.node_usage(info).items()):
                d = u.device
                uuid_node[uuid] = info.name
                uuid_index[uuid] = d.index
                uuid_device[uuid] = d
                labels = [info.name, uuid, str(d.index), device_type(d)]
                g.mem_limit.add_metric(labels, d.memory_mib * MIB)
                g.core_limit.add_metric(labels, d.cores_pct)
                g.mem_alloc.add_metric(
                    [info.name, uuid, str(d.index), str(d.cores_pct), device_type(d)],
                    u.used_memory_mib * MIB,
                )
                g.shared.add_metric(labels, u.used_count)
                g.core_alloc.add_metric(labels, held_cores_pct(u))
                unit, capacity = _compute(by_vendor.get(d.vendor), u)
                if capacity > 0:
                    uuid_compute[uuid] = (unit, capacity)
                    used = unit.amount(held_cores_pct(u))
                    g.core_share.add_metric(labels, used / capacity)
                    g.core_units_limit.add_metric([*labels, unit.symbol], capacity)
                    g.core_units_alloc.add_metric([*labels, unit.symbol], used)
                g.overview.add_metric(
                    [
                        info.name,
                        uuid,
                        str(d.index),
                        str(d.cores_pct),
                        str(d.memory_mib),
                        device_type(d),
                    ],
                    u.used_memory_mib * MIB,
                )
                if d.memory_mib > 0:
                    g.mem_ratio.add_metric(labels, u.used_memory_mib / d.memory_mib)
                g.healthy.add_metric(labels, 1 if d.healthy else 0)
                g.cordoned.add_metric(labels, 1 if u.cordoned else 0)
        for pod in store.list_pods():
            mig_positions: dict[tuple[int, int], str] = {}
            for labels, slice_, pos in self._pod_slices(pod, types, uuid_node):
                g.pod_mem.add_metric(labels, slice_.memory_mib * MIB)
                g.pod_cores.add_metric(labels, slice_.cores_pct)
                if slice_.uuid in uuid_compute:
                    unit, capacity = uuid_compute[slice_.uuid]
                    # a MIG instance: its compute slices, not its profile's rounded share
                    held = instance_cores_pct(
                        uuid_device[slice_.uuid], unit.amount(slice_.cores_pct)
                    )
                    g.pod_core_share.add_metric(labels, held / capacity)
                mig_positions[pos] = slice_.uuid
            self._mig_instances(g, pod, types, mig_positions, uuid_node, uuid_index)
        self._quotas(g, types)
        yield from g.all()

    def _mig_instances(
        self,
        g: _Families,
        pod: Any,
        types: tuple[Any, ...],
        positions: dict[tuple[int, int], str],
        uuid_node: dict[str, str],
        uuid_index: dict[str, int],
    ) -> None:
        """``hami_node_gpu_mig_instance_info`` (HAMi 2.10 ``cmd/scheduler/metrics.go``):
        the pod's realised MIG instances, only at positions of its trusted device list
        (``positions``: what ``_pod_slices`` yielded) naming the same GPU."""
        if not positions:
            return
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        for dtype in types:
            if not dtype.mig_annotation or not ann.get(dtype.mig_annotation):
                continue
            try:
                instances = decode_mig_allocations(str(ann[dtype.mig_annotation]))
            except AnnotationError:
                continue
            for a in instances:
                if (
                    not a.realised
                    or positions.get((a.container_index, a.device_index)) != a.gpu_uuid
                ):
                    continue
                g.mig_instance.add_metric(
                    [
                        uuid_node[a.gpu_uuid],
                        a.gpu_uuid,
                        str(uuid_index[a.gpu_uuid]),
                        a.mig_uuid,
                        a.slot.profile,
                        str(a.gpu_instance_id),
                        str(a.compute_instance_id),
                        str(a.slot.placement.start),
                        str(a.slot.placement.size),
                    ],
                    1,
                )

    def _pod_slices(
        self, pod: Any, types: tuple[Any, ...], uuid_node: dict[str, str]
    ) -> Iterator[tuple[list[str], Any, tuple[int, int]]]:
        """(labels, device slice) of each per-container series of ``pod``, under the trust
        rule of the usage gauges (PROTOCOL.md §6, ``usage.pod_holdings``): only a live pod
        our scheduler placed, only the vendors its spec asks for, only devices of the node
        it is placed on. A forged or unreadable ``-allocated`` makes no series (the device
        gauges show an unreadable one as held whole)."""
        if not is_live(pod):
            return
        meta = pod.get("metadata") or {}
        ours = self.scheduler.manager.config.scheduler_name
        if not placed_by_us(pod, scheduler_name=ours):
            return
        node_name = str(
            (pod.get("spec") or {}).get("nodeName")
            or (meta.get("annotations") or {}).get(keys.VGPU_NODE)
            or ""
        )
        wanted = requested_vendors(pod, self.scheduler.manager)
        ann = meta.get("annotations") or {}
        for dtype in types:
            value = ann.get(dtype.allocated_annotation)
            if not isinstance(value, str) or (wanted is not None and dtype.vendor not in wanted):
                continue
            try:
                per_pod = decode_pod_devices(value)
            except AnnotationError:
                continue
            for index, devices in enumerate(per_pod):
                for position, slice_ in enumerate(devices):
                    if uuid_node.get(slice_.uuid) != node_name:
                        continue  # not a device of the pod's node: not a real allocation
                    labels = [
                        str(meta.get("namespace", "")),
                        node_name,
                        str(meta.get("name", "")),
                        str(index),
                        slice_.uuid,
                    ]
                    yield labels, slice_, (index, position)

    def _handshakes(
        self, g: _Families, node: Any, types: tuple[Any, ...], now: dt.datetime
    ) -> None:
        meta = node.get("metadata") or {}
        ann = meta.get("annotations") or {}
        for t in types:
            value = ann.get(t.handshake_annotation)
            if not value:
                continue
            try:
                hs = decode_handshake(value)
            except AnnotationError:
                continue
            g.handshake_age.add_metric(
                [str(meta.get("name", "")), t.vendor, hs.state.value],
                max(0.0, (now - hs.at).total_seconds()),
            )

    def _quotas(self, g: _Families, types: tuple[Any, ...]) -> None:
        """HAMi's quota metrics: ``quota_name`` is the limited resource (the key less
        ``limits.``, e.g. ``nvidia.com/gpumem``), ``limit`` the hard limit as text."""
        store = self.scheduler.store
        # every namespace with a device quota, pods or none (the store may hold only our
        # scheduler's pods: a namespace's quota shows whatever runs there)
        for ns in self.scheduler.quota_namespaces():
            limits = quota_limits(store.list_quotas(ns), types)
            if not limits:
                continue
            used = namespace_usage(
                store.list_pods(namespace=ns),
                types,
                scheduler_name=self.scheduler.manager.config.scheduler_name,
                requested=lambda p: requested_vendors(p, self.scheduler.manager),
            )
            for limit in limits:
                resource = limit.key.removeprefix("limits.").removeprefix("requests.")
                value = used.of(limit.vendor, limit.measure)
                g.quota_used.add_metric([ns, resource, str(limit.hard)], value)
                g.quota_limit.add_metric([ns, resource], limit.hard)


def _compute(dtype: DeviceTypeInfo | None, usage: DeviceUsage) -> tuple[CoresUnit, int]:
    """``(unit, capacity)`` of a device's compute, the capacity counted in the unit
    (AWS Neuron: the bits of the core mask, so 3 is 2 NeuronCores; an Ascend chip
    registered with its AI Core count is 100 %: ``DeviceTypeInfo.cores_capacity``); 0
    when the vendor accounts no compute (Biren, Vastai)."""
    if dtype is None:
        return PERCENT, usage.device.cores_pct
    unit = dtype.cores_unit
    return unit, unit.amount(dtype.cores_capacity(usage)) if unit.accounted else 0


#: What the core gauges' HELP says of their unit (PROTOCOL.md §9).
_CORES_UNIT_HELP = (
    " percent for most vendors; the device list's own unit for AMD (compute units),"
    " AWS Neuron (NeuronCore bit mask) and Moore Threads (sGPU cores, 16 per GPU),"
    " as HAMi writes them."
)


class _Families:
    def __init__(self) -> None:
        self.mem_limit = GaugeMetricFamily(
            "hami_gpu_memory_limit_bytes", "Schedulable memory of a device.", labels=DEVICE_LABELS
        )
        self.core_limit = GaugeMetricFamily(
            "hami_gpu_core_limit_ratio",
            "Schedulable compute of a device:" + _CORES_UNIT_HELP,
            labels=DEVICE_LABELS,
        )
        self.mem_alloc = GaugeMetricFamily(
            "hami_gpu_memory_allocated_bytes",
            "Memory allocated on a device.",
            labels=["node", "device_uuid", "device_index", "device_cores", "device_type"],
        )
        self.shared = GaugeMetricFamily(
            "hami_gpu_shared_count", "Containers sharing a device.", labels=DEVICE_LABELS
        )
        self.core_alloc = GaugeMetricFamily(
            "hami_gpu_core_allocated_ratio",
            "Compute allocated on a device:" + _CORES_UNIT_HELP,
            labels=DEVICE_LABELS,
        )
        # ours, not HAMi's: the core gauges above carry vendor units (AWS Neuron's are
        # bit masks, which PromQL cannot count), so dashboards read these
        self.core_share = GaugeMetricFamily(
            "hami_gpu_core_allocated_share",
            "Compute allocated on a device as a fraction of its compute (0..1), in every"
            " vendor's unit (AWS Neuron: NeuronCores counted); absent where none is"
            " accounted.",
            labels=DEVICE_LABELS,
        )
        self.core_units_limit = GaugeMetricFamily(
            "hami_gpu_core_limit_units",
            "Schedulable compute of a device counted in its vendor's unit (label unit:"
            " %, CU, NeuronCores, sGPU cores).",
            labels=[*DEVICE_LABELS, "unit"],
        )
        self.core_units_alloc = GaugeMetricFamily(
            "hami_gpu_core_allocated_units",
            "Compute allocated on a device counted in its vendor's unit (label unit:"
            " %, CU, NeuronCores, sGPU cores).",
            labels=[*DEVICE_LABELS, "unit"],
        )
        self.overview = GaugeMetricFamily(
            "hami_node_gpu_overview",
            "A device of a node: memory allocated (value), compute and memory (labels).",
            labels=[
                "node",
                "device_uuid",
                "device_index",
                "device_cores",
                "device_memory_limit",
                "device_type",
            ],
        )
        self.mem_ratio = GaugeMetricFamily(
            "hami_node_gpu_memory_allocated_ratio",
            "Memory allocated on a device over its memory, 0..1.",
            labels=DEVICE_LABELS,
        )
        self.healthy = GaugeMetricFamily(
            "hami_gpu_healthy",
            "1 when the device plugin reports the device healthy, else 0.",
            labels=DEVICE_LABELS,
        )
        self.cordoned = GaugeMetricFamily(
            "hami_gpu_cordoned",
            "1 when the node cordons the device (hami.io/device-cordon).",
            labels=DEVICE_LABELS,
        )
        self.unregistered = GaugeMetricFamily(
            "hami_node_unregistered",
            "1 when a vendor's inventory of a node is unusable (malformed, or its "
            "handshake unanswered with nothing allocatable).",
            labels=["node", "vendor"],
        )
        self.handshake_age = GaugeMetricFamily(
            "hami_node_handshake_age_seconds",
            "Seconds since the node's handshake stamp, by state (Requesting: the "
            "scheduler asked and the device plugin has not answered yet).",
            labels=["node", "vendor", "state"],
        )
        self.pod_mem = GaugeMetricFamily(
            "hami_vgpu_memory_allocated_bytes",
            "Memory allocated to a container on a device.",
            labels=CONTAINER_LABELS,
        )
        self.pod_cores = GaugeMetricFamily(
            "hami_vgpu_core_allocated_ratio",
            "Compute allocated to a container on a device:" + _CORES_UNIT_HELP,
            labels=CONTAINER_LABELS,
        )
        self.pod_core_share = GaugeMetricFamily(
            "hami_vgpu_core_allocated_share",
            "Compute allocated to a container on a device as a fraction of the device's"
            " compute (0..1), in every vendor's unit; absent where none is accounted.",
            labels=CONTAINER_LABELS,
        )
        self.mig_instance = GaugeMetricFamily(
            "hami_node_gpu_mig_instance_info",
            "Realized MIG instance identity and scheduler placement.",
            labels=[
                "node",
                "device_uuid",
                "device_index",
                "mig_uuid",
                "profile",
                "gpu_instance_id",
                "compute_instance_id",
                "placement_start",
                "placement_size",
            ],
        )
        self.quota_used = GaugeMetricFamily(
            "hami_resource_quota_used",
            "Device quota used in a namespace (MiB, percent or devices).",
            labels=["namespace", "quota_name", "limit"],
        )
        self.quota_limit = GaugeMetricFamily(
            "hami_resource_quota_limit",
            "Device quota limit of a namespace (MiB, percent or devices).",
            labels=["namespace", "quota_name"],
        )

    def all(self) -> list[Metric]:
        return list(vars(self).values())
