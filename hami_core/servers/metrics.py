"""Scheduler metrics (PROTOCOL.md §9, scheduler part), served on their own port (9395).

Durations and bind outcomes are recorded as they happen; allocation and quota gauges
are computed at scrape time from the cluster store, so they never drift from the
allocations of live pods.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_core.errors import AnnotationError
from hami_core.scheduling.quota import namespace_usage, quota_limits
from hami_core.scheduling.scheduler import Scheduler
from hami_core.scheduling.usage import is_live, pod_allocation

MIB = 1024 * 1024
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class SchedulerMetrics:
    """The scheduler's metrics in their own registry."""

    def __init__(self, scheduler: Scheduler) -> None:
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
        self.registry.register(AllocationCollector(scheduler))


class AllocationCollector(Collector):
    """Allocated memory and cores per device and per pod; quota used and limit."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        store = self.scheduler.store
        types = self.scheduler.manager.device_types()
        dev_limit = GaugeMetricFamily(
            "hami_gpu_memory_limit_bytes",
            "Schedulable memory of a device.",
            labels=["node", "device", "type"],
        )
        dev_mem = GaugeMetricFamily(
            "hami_gpu_memory_allocated_bytes",
            "Memory allocated on a device.",
            labels=["node", "device", "type"],
        )
        dev_cores = GaugeMetricFamily(
            "hami_gpu_core_allocated_ratio",
            "Compute allocated on a device, 0..1.",
            labels=["node", "device", "type"],
        )
        dev_shares = GaugeMetricFamily(
            "hami_gpu_shared_containers",
            "Containers sharing a device.",
            labels=["node", "device", "type"],
        )
        pod_mem = GaugeMetricFamily(
            "hami_vgpu_memory_allocated_bytes",
            "Memory allocated to a container on a device.",
            labels=["namespace", "pod", "container", "device"],
        )
        pod_cores = GaugeMetricFamily(
            "hami_vgpu_core_allocated_ratio",
            "Compute allocated to a container on a device, 0..1.",
            labels=["namespace", "pod", "container", "device"],
        )
        for node in store.list_nodes():
            info = self.scheduler.node_info(node)
            for uuid, u in sorted(self.scheduler.node_usage(info).items()):
                labels = [info.name, uuid, u.device.vendor]
                dev_limit.add_metric(labels, u.device.memory_mib * MIB)
                dev_mem.add_metric(labels, u.used_memory_mib * MIB)
                dev_cores.add_metric(labels, u.used_cores_pct / 100)
                dev_shares.add_metric(labels, u.used_count)
        for pod in store.list_pods():
            if not is_live(pod):
                continue
            meta = pod.get("metadata") or {}
            try:
                allocation = pod_allocation(pod, types)
            except AnnotationError:
                continue
            spec = pod.get("spec") or {}
            names = [
                c.get("name", "")
                for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
            ]
            for per_pod in allocation.values():
                for name, devices in zip(names, per_pod, strict=False):
                    for d in devices:
                        labels = [meta.get("namespace", ""), meta.get("name", ""), name, d.uuid]
                        pod_mem.add_metric(labels, d.memory_mib * MIB)
                        pod_cores.add_metric(labels, d.cores_pct / 100)
        yield from (dev_limit, dev_mem, dev_cores, dev_shares, pod_mem, pod_cores)
        yield from self._quotas(types)

    def _quotas(self, types: tuple) -> Iterator[Metric]:  # type: ignore[type-arg]
        store = self.scheduler.store
        used_m = GaugeMetricFamily(
            "hami_quota_used",
            "Device quota used (MiB, percent or devices).",
            labels=["namespace", "quota", "resource"],
        )
        limit_m = GaugeMetricFamily(
            "hami_quota_limit",
            "Device quota limit (MiB, percent or devices).",
            labels=["namespace", "quota", "resource"],
        )
        namespaces = sorted(
            {(p.get("metadata") or {}).get("namespace", "") for p in store.list_pods()}
        )
        seen: set[str] = set()
        for ns in [*namespaces, "default"]:
            if ns in seen:
                continue
            seen.add(ns)
            limits = quota_limits(store.list_quotas(ns), types)
            if not limits:
                continue
            used = namespace_usage(store.list_pods(namespace=ns), types)
            for limit in limits:
                labels = [ns, limit.quota, limit.key]
                limit_m.add_metric(labels, limit.hard)
                used_m.add_metric(labels, used.get((limit.vendor, limit.measure), 0))
        yield used_m
        yield limit_m
