"""``hami monitor``: the node monitor's HTTP edge (``/metrics`` on port 9394, ``/healthz``).

The domain logic is ``hami_core.monitor.NodeMonitor``; this module renders its families
with prometheus_client, watches this node's pods (a node-scoped informer,
``fieldSelector=spec.nodeName=<node>``), writes Events and evictions about containers
over their allocation (``overuse``) and serves through ``metrics_http``'s guarded
waitress server.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_core.cluster.kube import Informer, make_api_client
from hami_core.errors import ConfigError
from hami_core.monitor import Family, NodeMonitor, Scan
from hami_core.monitor.overuse import OveruseEnforcer
from hami_core.plugin import BackendManager
from hami_core.protocol.config import load_config

from .address import url_host
from .metrics_http import create_guarded_server
from .options import MonitorOptions
from .overuse import KubeOveruseActions, NamespacePolicies

log = logging.getLogger(__name__)


class FamilyCollector(Collector):
    """Renders the plain ``Family`` objects a callable returns on every scrape."""

    def __init__(self, families: Callable[[], Sequence[Family]]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        for fam in self.families():
            metric: GaugeMetricFamily | CounterMetricFamily
            if fam.kind == "counter":
                metric = CounterMetricFamily(fam.name, fam.help, labels=list(fam.labels))
            else:
                metric = GaugeMetricFamily(fam.name, fam.help, labels=list(fam.labels))
            for values, value in fam.samples:
                metric.add_metric(list(values), value)
            yield metric


def monitor_registry(monitor: NodeMonitor) -> CollectorRegistry:
    """A registry whose only collector is ``monitor`` (one fresh scan per collect)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamilyCollector(monitor.collect))
    return registry


def render_scan(scan: Scan) -> bytes:
    """One scan in the Prometheus text format (``CONTENT_TYPE_LATEST``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FamilyCollector(lambda: scan.families))
    return generate_latest(registry)


#: Default oldest scan /metrics and /healthz serve, seconds (``--scan-max-age``).
SCAN_MAX_AGE_S = 5.0


def create_monitor_app(
    monitor: NodeMonitor,
    *,
    is_ready: Callable[[], bool] = lambda: True,
    scan_max_age_s: float = SCAN_MAX_AGE_S,
) -> Any:
    """WSGI app: ``/metrics`` (Prometheus text format), ``/healthz`` and ``/readyz``.

    Every request within ``scan_max_age_s`` of the last scan is served that scan,
    rendered once (``NodeMonitor.latest``: concurrent requests share one scan), so a
    client looping /metrics costs one scan per ``scan_max_age_s`` and Prometheus' own
    scrape never queues behind a line of full scans. /metrics always answers 200 with
    what the scan read; /healthz answers 503 with the reason while the last scan failed
    as a whole (``hami_monitor_scan_errors_total{part="scan"}`` counts them), so a
    broken monitor shows in its probe rather than only in missing series.
    """
    rendered: dict[int, bytes] = {}
    render_lock = threading.Lock()

    def metrics_text() -> bytes:
        scan = monitor.latest(scan_max_age_s)
        with render_lock:
            body = rendered.get(scan.seq)
            if body is None:
                body = render_scan(scan)
                rendered.clear()
                rendered[scan.seq] = body
            return body

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            scan = monitor.latest(scan_max_age_s)
            if scan.error is not None:
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [f"the last scan failed: {scan.error}\n".encode(errors="replace")]
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if path == "/readyz":
            ok = is_ready()
            start_response(
                "200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")]
            )
            return [b"ok\n" if ok else b"pods not listed yet\n"]
        if path in ("/metrics", "/"):
            body = metrics_text()
            start_response(
                "200 OK",
                [("Content-Type", CONTENT_TYPE_LATEST), ("Content-Length", str(len(body)))],
            )
            return [body]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


def scan_periodically(monitor: NodeMonitor, interval_s: float, stop: threading.Event) -> None:
    """Scan at least every ``interval_s`` seconds until ``stop`` is set, whether or not
    anyone scrapes: a scan is what truncates grown regions, removes gone pods'
    directories and runs the host-side overuse check (Events, evictions). A scrape in
    between makes the next one unnecessary (``NodeMonitor.latest`` with ``interval_s``
    as the age), so scrapes and this loop never scan twice within the interval. A scan
    that fails is logged and retried at the next interval; it never ends the loop."""
    while not stop.wait(interval_s):
        try:
            monitor.latest(interval_s)
        except Exception:  # a bug in a scan must not end enforcement for good
            log.exception("periodic scan failed")


def run_monitor(opts: MonitorOptions, *, stop: threading.Event | None = None) -> None:
    """Serve until SIGTERM / SIGINT (or ``stop`` is set).

    Raises:
        ConfigError: no node name, or a bad configuration file.
    """
    if not opts.node_name:
        raise ConfigError("--node-name (NODE_NAME) is required: the monitor serves one node")
    manager = BackendManager.from_entry_points()
    manager = manager.with_config(load_config(opts.config, backends=manager.infos))
    api = make_api_client(opts.kubeconfig)
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(api)
    pods = Informer(
        "pods",
        functools.partial(
            core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={opts.node_name}"
        ),
    )
    pods.start()

    def node_pods() -> list[Any] | None:
        return pods.items() if pods.wait_synced(0) else None

    enforcer = OveruseEnforcer(
        KubeOveruseActions(core, node_name=opts.node_name),
        default_policy=opts.overuse_policy,
        namespace_policy=NamespacePolicies(core),
    )
    monitor = NodeMonitor(
        manager,
        root=opts.containers_dir,
        node_name=opts.node_name,
        pods=node_pods,
        grace_s=opts.gc_grace_s,
        proc_root=opts.proc_root,
        overuse=enforcer,
        overuse_tolerance_bytes=opts.overuse_tolerance_mib << 20,
    )
    app = create_monitor_app(
        monitor, is_ready=lambda: pods.wait_synced(0), scan_max_age_s=opts.scan_max_age_s
    )
    # waitress with slow-client guards (metrics_http): a tenant's idle or slow connections
    # must not make Prometheus' scrape of this node fail
    server = create_guarded_server(
        app, host=opts.bind_address, port=opts.port, threads=opts.threads, name="monitor-http"
    )
    done = stop or threading.Event()

    def shutdown(*_: Any) -> None:
        done.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, shutdown)
        signal.signal(signal.SIGINT, shutdown)
    server.start()
    scanner = threading.Thread(
        target=scan_periodically,
        args=(monitor, opts.scan_interval_s, done),
        name="monitor-scan",
        daemon=True,
    )
    scanner.start()
    log.info(
        "hami monitor for node %s on %s:%s, reading %s",
        opts.node_name,
        url_host(opts.bind_address),
        opts.port,
        opts.containers_dir,
    )
    done.wait()
    server.close()
    pods.stop()
