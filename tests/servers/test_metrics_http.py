"""The /metrics ports' slow-client guards (hami_core.servers.metrics_http), on real
sockets: idle connections, dripped requests and slow readers neither block a scrape nor
stay open past their deadline, and one client cannot take every connection."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_core.servers.metrics_http import (
    MetricsServer,
    create_guarded_server,
    serve_metrics,
)
from tests.servers.slowclients import (
    REQUEST,
    closed_by_server,
    connect,
    crowd,
    has_data,
    is_open,
    scrape,
)

SERIES = 40_000  # about 5 MB of page: more than the kernel buffers a slow reader's socket

# Scheduling slack on a loaded 2-core CI machine: added to deadlines, never the property.
SLACK_S = 3.0


class Big(Collector):
    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("hami_test_series", "one of many", labels=["device_uuid", "pad"])
        for i in range(SERIES):
            g.add_metric([f"GPU-{i:08d}", "x" * 80], float(i))
        yield g


def big_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Big())
    return registry


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[MetricsServer]:
    """A guarded server of the big registry; ``@pytest.mark.parametrize('served',
    [{...}], indirect=True)`` sets its guards."""
    from prometheus_client import make_wsgi_app

    kwargs = {"threads": 2, **getattr(request, "param", {})}
    server = create_guarded_server(
        make_wsgi_app(big_registry()), host="127.0.0.1", port=0, **kwargs
    ).start()
    yield server
    server.close()


def full(families: dict[str, list[float]]) -> bool:
    return families.get("hami_test_series") == [float(i) for i in range(SERIES)]


@pytest.mark.parametrize("served", [{"idle_timeout_s": 60, "write_timeout_s": 60}], indirect=True)
def test_a_scrape_gets_through_idle_and_slow_clients(served: MetricsServer) -> None:
    """64 idle connections and 16 requests whose responses are never read, on a server
    with two worker threads: the scrape is whole and prompt while every one of them is
    still open (so it got through them, not after they were dropped)."""
    with crowd(served.port, idle=64, slow_readers=16, per_address=8) as socks:
        # each slow reader's page built (CPU the scrape must not queue behind: building
        # is not the property) and stalled on its socket, so none can hold a worker
        deadline = time.monotonic() + 60
        while not all(has_data(s) for s in socks[64:]):
            assert time.monotonic() < deadline, "the slow readers' pages were never sent"
            time.sleep(0.1)
        families, took = scrape(served.port, timeout_s=30)
        assert full(families)
        assert took < 2 * SLACK_S, f"scrape took {took:.1f}s behind idle and slow clients"
        assert all(is_open(s) for s in socks[:64])


@pytest.mark.parametrize("served", [{"idle_timeout_s": 2}], indirect=True)
def test_idle_connections_are_closed_after_the_idle_timeout(served: MetricsServer) -> None:
    """One that never sent a byte and one kept alive after a whole response: both closed
    no sooner than the timeout, and within it plus the cleanup interval."""
    silent = connect(served.port, "127.0.0.2")
    kept = connect(served.port, "127.0.0.3")
    kept.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
    for s in (silent, kept):
        took = closed_by_server(s, within_s=2 + 1 + SLACK_S)
        assert took is not None, "an idle connection outlived the idle timeout"
    assert not is_open(silent) and not is_open(kept)
    late = connect(served.port, "127.0.0.4")
    start = time.monotonic()
    took = closed_by_server(late, within_s=2 + 1 + SLACK_S)
    assert took is not None and took >= 2 - 0.2, f"closed after {took}s, before the timeout"
    assert time.monotonic() - start < 2 + 1 + SLACK_S


@pytest.mark.parametrize("served", [{"idle_timeout_s": 60, "read_timeout_s": 2}], indirect=True)
def test_a_request_dripped_a_byte_at_a_time_is_dropped_at_the_read_deadline(
    served: MetricsServer,
) -> None:
    """Never idle (a byte every 0.25 s), never complete: closed after the read timeout."""
    s = connect(served.port, "127.0.0.2")
    start = time.monotonic()
    closed_at = None
    for byte in b"GET /metrics HTTP/1.1\r\n" + b"X-Drip: " + b"a" * 200:
        try:
            s.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.monotonic() - start
            break
        if not is_open(s):
            closed_at = time.monotonic() - start
            break
        time.sleep(0.25)
    assert closed_at is not None, "a never-finished request kept its connection"
    assert 2 - 0.2 <= closed_at < 2 + 1 + SLACK_S, closed_at


@pytest.mark.parametrize("served", [{"idle_timeout_s": 60, "write_timeout_s": 2}], indirect=True)
def test_a_response_read_a_trickle_at_a_time_is_dropped_at_the_write_deadline(
    served: MetricsServer,
) -> None:
    """Never idle (256 bytes taken every 0.1 s), never done: closed after the write
    timeout with most of the page unread."""
    s = connect(served.port, "127.0.0.2", rcvbuf=1024)
    s.sendall(REQUEST)
    got = 0
    start = time.monotonic()
    s.settimeout(5)
    while time.monotonic() - start < 30:
        try:
            chunk = s.recv(256)
        except ConnectionResetError:
            break
        if not chunk:
            break
        got += len(chunk)
        time.sleep(0.1)
    took = time.monotonic() - start
    assert got < SERIES * 100 / 2, f"read {got} bytes: the page was not held back"
    assert took < 2 + 1 + SLACK_S + 2, f"a trickling reader kept its response {took:.1f}s"


@pytest.mark.parametrize("served", [{"max_per_client": 4}], indirect=True)
def test_one_client_cannot_take_every_connection(served: MetricsServer) -> None:
    """Ten connections from one address: four stay, the others are closed at once, and
    another client's scrape is served."""
    socks = [connect(served.port, "127.0.0.2") for _ in range(10)]
    try:
        deadline = time.monotonic() + SLACK_S
        while sum(not is_open(s) for s in socks) < 6 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)  # and no more than those six
        assert [is_open(s) for s in socks] == [True] * 4 + [False] * 6
        families, _ = scrape(served.port, timeout_s=30)
        assert full(families)
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize(
    "served", [{"connection_limit": 12, "max_per_client": 2, "idle_timeout_s": 2}], indirect=True
)
def test_past_the_connection_limit_a_scrape_waits_at_most_the_idle_timeout(
    served: MetricsServer,
) -> None:
    """Many addresses fill every connection with silence: the scrape queues in the listen
    backlog and is whole once the idle ones are dropped (the guarantee is bounded time)."""
    with crowd(served.port, idle=12, slow_readers=0, per_address=2):
        families, took = scrape(served.port, timeout_s=30)
    assert full(families)
    assert took < 2 + 1 + SLACK_S, f"scrape took {took:.1f}s past the connection limit"


def test_serve_metrics_names_the_address_it_cannot_bind() -> None:
    first = serve_metrics(CollectorRegistry(), host="127.0.0.1", port=0)
    try:
        with pytest.raises(OSError, match=f"metrics on 127.0.0.1:{first.port}"):
            serve_metrics(CollectorRegistry(), host="127.0.0.1", port=first.port)
    finally:
        first.close()


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_per_client must be at least 1"):
        create_guarded_server(lambda e, s: [], host="127.0.0.1", port=0, max_per_client=0)
