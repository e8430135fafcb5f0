"""The device plugin's metrics (the handbook's names, PROTOCOL.md §9), served on
``--metrics-port`` when it is set: Allocate durations by outcome, and the devices the
plugin serves with their health as kubelet sees it (``ListAndWatch``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_core.model import DeviceInfo

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
OUTCOMES = ("success", "error", "timeout")


class DevicePluginMetrics:
    """The registry of one device plugin process.

    Args:
        node: this node (the ``node`` label).
        vendor: the vendor key served (the ``vendor`` label).
        devices: the devices served now (``DeviceState.devices``).
    """

    def __init__(
        self, *, node: str, vendor: str, devices: Callable[[], Sequence[DeviceInfo]]
    ) -> None:
        self.registry = CollectorRegistry()
        self.allocate_seconds = Histogram(
            "hami_device_plugin_allocate_duration_seconds",
            "Time to answer kubelet's Allocate, by outcome (success, error, timeout).",
            ["outcome"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        for outcome in OUTCOMES:
            self.allocate_seconds.labels(outcome)
        self.registry.register(_DeviceCollector(node, vendor, devices))

    def observe_allocate(self, seconds: float, outcome: str) -> None:
        """Record one Allocate answer of ``seconds``; ``outcome`` is one of ``OUTCOMES``."""
        self.allocate_seconds.labels(outcome).observe(seconds)


class _DeviceCollector(Collector):
    def __init__(self, node: str, vendor: str, devices: Callable[[], Sequence[DeviceInfo]]) -> None:
        self.node = node
        self.vendor = vendor
        self.devices = devices

    def collect(self) -> Iterator[Metric]:
        devices = list(self.devices())
        count = GaugeMetricFamily(
            "hami_device_plugin_device_count",
            "Physical devices the device plugin serves.",
            labels=["node", "vendor"],
        )
        count.add_metric([self.node, self.vendor], len(devices))
        healthy = GaugeMetricFamily(
            "hami_device_plugin_healthy_status",
            "1 when the device plugin reports the device healthy to kubelet, else 0.",
            labels=["node", "device_uuid", "device_index", "device_type"],
        )
        for d in devices:
            healthy.add_metric(
                [self.node, d.uuid, str(d.index), d.model or d.vendor], 1 if d.healthy else 0
            )
        yield count
        yield healthy
