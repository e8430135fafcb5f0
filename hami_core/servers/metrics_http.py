"""The HTTP server of every ``/metrics`` port: waitress, with slow-client guards.

prometheus_client's ``start_http_server`` is a ``ThreadingHTTPServer``: one thread per
connection, no deadline, no bound, so a client that opens connections and sends nothing
(slowloris) or reads slowly ties up threads and memory without limit. waitress instead
reads and writes every connection on one asyncore loop and only hands a *complete*
request to its worker threads, buffering the response, so no idle or slow socket holds a
worker. What waitress does not bound is added here:

- ``IDLE_TIMEOUT_S``: a connection with no request running and no byte received or sent
  for this long is closed (waitress's ``channel_timeout``, checked every
  ``CLEANUP_INTERVAL_S``).
- ``READ_TIMEOUT_S``: a request whose line and headers have not all arrived this long
  after its first byte is dropped, however slowly the client keeps dripping bytes (which
  resets the idle clock).
- ``WRITE_TIMEOUT_S``: a finished response the client has not taken in full this long
  after it was ready is dropped, however slowly the client keeps reading (which also
  resets the idle clock).
- ``MAX_PER_CLIENT``: open connections one client address may hold; a further one is
  closed at accept, so one noisy client cannot take the slots Prometheus needs.
- ``CONNECTION_LIMIT``: open connections in all. At the limit a new connection is still
  accepted and takes the place of the quietest connection (no request being served, no
  response pending) of the address holding the most; only when every connection is busy
  is the new one closed. waitress's own limit stops accepting instead, which left a
  scrape in the listen backlog behind the reconnections of a crowd on several addresses
  for several idle timeouts (issue 24 attack run): now an address that holds one
  connection, as Prometheus does, keeps it while any address holds more.

Prometheus' own scrape needs one connection and its default ``scrape_timeout`` is 10 s
(Prometheus ``config/config.go``); its HTTP client (Go ``net/http``) reconnects when an
idle keep-alive connection was closed, so the idle timeout costs it nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import socket
import struct
import termios
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import MultiSocketServer, TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from hami_core.servers.address import listen_host, url_host

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 10
READ_TIMEOUT_S = 10
WRITE_TIMEOUT_S = 10
CLEANUP_INTERVAL_S = 1
MAX_PER_CLIENT = 8
CONNECTION_LIMIT = 100
THREADS = 4
#: Seconds between two warnings of one kind about one client address.
LOG_INTERVAL_S = 60.0


class _DeadlineChannel(HTTPChannel):  # type: ignore[misc]
    """An ``HTTPChannel`` that remembers when its request in progress began (monotonic
    seconds; None between requests)."""

    request_started: float | None = None
    output_pending_since: float | None = None
    dropping = False

    def received(self, data: bytes) -> bool:
        before = self.request
        now = time.monotonic()
        result = bool(super().received(data))
        if self.request is None:
            self.request_started = None
        elif self.request is not before:  # a new request began in this chunk
            self.request_started = now
        return result


def _unacked(channel: HTTPChannel) -> int:
    """Bytes written to the channel's socket the client has not acknowledged (Linux
    ``SIOCOUTQ``, tcp(7)); a slow reader's response can wait there rather than in
    waitress's buffers. 0 where the query is not supported."""
    try:
        return int.from_bytes(
            fcntl.ioctl(channel.socket.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"), "little"
        )
    except (OSError, AttributeError, ValueError):
        return 0


def _drop(channel: _DeadlineChannel) -> None:
    """Close ``channel`` with a reset, discarding what its client has not taken.

    Called from ``maintenance``, which waitress runs while it builds ``select``'s lists:
    closing there would hand ``select`` a closed descriptor, so the close runs as a
    trigger thunk, on the loop's thread after ``select`` returns. Only setting
    ``will_close``, as waitress's idle timeout does, would wait for the socket to be
    writable, which a client that stopped reading never makes it.
    """
    if channel.dropping:
        return
    channel.dropping = True
    channel.will_close = True  # read no more; a worker never picks it up again

    def close() -> None:
        # linger 0: a reset, so the kernel drops the unsent rest at once
        with contextlib.suppress(OSError):
            channel.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        channel.handle_close()

    with contextlib.suppress(OSError):  # the trigger is closed: the server is stopping
        channel.server.trigger.pull_trigger(close)


_LINGER_RESET = struct.pack("ii", 1, 0)


class GuardedServer(TcpWSGIServer):  # type: ignore[misc]
    """waitress's TCP server with the module's read/write deadlines and per-client cap."""

    channel_class = _DeadlineChannel

    def __init__(
        self,
        *args: Any,
        read_timeout_s: float,
        write_timeout_s: float,
        max_per_client: int,
        **kwargs: Any,
    ) -> None:
        self.read_timeout_s = read_timeout_s
        self.write_timeout_s = write_timeout_s
        self.max_per_client = max_per_client
        super().__init__(*args, **kwargs)

    def readable(self) -> bool:
        """waitress's, except that the listening socket is always read: the connection
        limit is kept by ``handle_accept`` (a new connection displaces a quiet one)
        rather than by leaving connections in the listen backlog."""
        now = time.time()  # waitress's clock for its maintenance (the idle timeout)
        due: float = getattr(self, "next_channel_cleanup", 0.0)
        if now >= due:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        return bool(self.accepting)

    def _open_channels(self) -> list[HTTPChannel]:
        return [
            ch
            for ch in list(self._map.values())
            if isinstance(ch, HTTPChannel) and not ch.will_close
        ]

    def _make_room(self, channels: list[HTTPChannel]) -> bool:
        """Drop one quiet connection (no request being served, no response pending) of
        the address holding the most connections, the longest quiet first; False when
        every connection is busy."""
        per_address: dict[str, int] = {}
        for ch in channels:
            per_address[ch.addr[0]] = per_address.get(ch.addr[0], 0) + 1
        quiet = [
            ch
            for ch in channels
            if isinstance(ch, _DeadlineChannel)
            and not ch.requests
            and not ch.total_outbufs_len
            and not _unacked(ch)
        ]
        if not quiet:
            return False
        victim = min(quiet, key=lambda ch: (-per_address[ch.addr[0]], ch.last_activity))
        self._log_limited(
            f"room:{victim.addr[0]}",
            "metrics: %d connections open (the limit); closing quiet ones of %s",
            len(channels),
            victim.addr[0],
        )
        _drop(victim)
        return True

    def _log_limited(self, key: str, fmt: str, *args: Any) -> None:
        """A warning at most once per ``LOG_INTERVAL_S`` per ``key``: a client that
        reconnects in a loop must not write a log line per connection."""
        now = time.monotonic()
        logged = self.__dict__.setdefault("_logged_at", {})
        if now - logged.get(key, -LOG_INTERVAL_S) < LOG_INTERVAL_S:
            return
        if len(logged) >= 1024:  # keys name client addresses: stay bounded
            logged.clear()
        logged[key] = now
        log.warning(fmt, *args)

    def handle_accept(self) -> None:
        try:
            accepted = self.accept()
        except OSError:  # the peer went away before accept(): nothing to serve
            return
        if accepted is None:
            return
        conn, addr = accepted
        peer = addr[0] if isinstance(addr, tuple) else addr
        channels = self._open_channels()
        held = sum(1 for ch in channels if ch.addr[0] == peer)
        if held >= self.max_per_client:
            self._log_limited(
                f"cap:{peer}",
                "metrics: %s already holds %d connections (the most one client may); "
                "closing its new ones",
                peer,
                held,
            )
            conn.close()
            return
        if len(channels) >= self.adj.connection_limit and not self._make_room(channels):
            self._log_limited(
                "busy", "metrics: all %d connections are busy; closing new ones", len(channels)
            )
            conn.close()
            return
        try:
            self.set_socket_options(conn)
        except OSError:
            conn.close()
            return
        self.channel_class(self, conn, self.fix_addr(addr), self.adj, map=self._map)

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # the idle timeout
        mono = time.monotonic()
        for channel in list(self.active_channels.values()):
            if not isinstance(channel, _DeadlineChannel) or channel.requests:
                continue  # a worker is on it: the deadlines start when it is done
            started = channel.request_started
            if started is not None and mono - started > self.read_timeout_s:
                log.info("metrics: %s sent no whole request in time; closing", channel.addr)
                _drop(channel)
                continue
            if not (channel.total_outbufs_len or _unacked(channel)):
                channel.output_pending_since = None
            elif channel.output_pending_since is None:
                channel.output_pending_since = mono
            elif mono - channel.output_pending_since > self.write_timeout_s:
                log.info("metrics: %s did not read its response in time; closing", channel.addr)
                _drop(channel)


class MetricsServer:
    """A bound, guarded HTTP server for one WSGI app, run on a daemon thread.

    Attributes:
        port: the bound TCP port (resolved when 0 was asked for).
    """

    def __init__(
        self, server: Any, port: int, name: str, socket_map: dict[int, Any], dispatcher: Any
    ) -> None:
        self._server = server
        self._map = socket_map
        self._dispatcher = dispatcher
        self.port = port
        self._thread = threading.Thread(target=server.run, name=name, daemon=True)

    def start(self) -> MetricsServer:
        """Start serving (returns self)."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: close the port and every open connection, stop the workers.
        Safe to call more than once."""
        self._dispatcher.shutdown(timeout=5)
        wasyncore.close_all(self._map)  # ends the loop: what waitress's own close does
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def create_guarded_server(
    app: Callable[..., Any],
    *,
    host: str,
    port: int,
    threads: int = THREADS,
    idle_timeout_s: int = IDLE_TIMEOUT_S,
    read_timeout_s: float = READ_TIMEOUT_S,
    write_timeout_s: float = WRITE_TIMEOUT_S,
    max_per_client: int = MAX_PER_CLIENT,
    connection_limit: int = CONNECTION_LIMIT,
    cleanup_interval_s: int = CLEANUP_INTERVAL_S,
    name: str = "metrics-http",
) -> MetricsServer:
    """Bind ``host:port`` and return a ``MetricsServer`` for ``app`` (not yet started).

    Args:
        app: the WSGI application.
        host, port: where to listen (an address, IPv6 bare or in brackets, or a name;
            every address the name resolves to is bound, as waitress does:
            ``servers.address.listen_host``); port 0 picks a free port.
        threads: worker threads (only whole requests reach them).
        idle_timeout_s, read_timeout_s, write_timeout_s, max_per_client,
        connection_limit, cleanup_interval_s: the guards described in the module docstring (seconds,
            connections).

    Raises:
        OSError: the address cannot be bound (in use, not local, no permission).
        ConfigError: ``host`` is not an address to listen on.
        ValueError: a limit below 1.
    """
    for key, value in (
        ("threads", threads),
        ("idle_timeout_s", idle_timeout_s),
        ("max_per_client", max_per_client),
        ("connection_limit", connection_limit),
        ("cleanup_interval_s", cleanup_interval_s),
    ):
        if value < 1:
            raise ValueError(f"{key} must be at least 1, got {value}")
    adj = Adjustments(
        host=listen_host(host),
        port=port,
        threads=threads,
        channel_timeout=idle_timeout_s,
        cleanup_interval=cleanup_interval_s,
        connection_limit=connection_limit,
        # the page is built in memory; a slow reader's copy waits in waitress's buffer
        # (not in a worker) until the idle timeout drops it
        asyncore_loop_timeout=1,
    )
    dispatcher = ThreadedTaskDispatcher()
    dispatcher.set_thread_count(threads)
    socket_map: dict[int, Any] = {}
    servers = [
        GuardedServer(
            app,
            socket_map,
            dispatcher=dispatcher,
            adj=adj,
            sockinfo=sockinfo,
            read_timeout_s=read_timeout_s,
            write_timeout_s=write_timeout_s,
            max_per_client=max_per_client,
        )
        for sockinfo in adj.listen
    ]
    if len(servers) == 1:
        server: Any = servers[0]
    else:
        listen = [(s.effective_host, s.effective_port) for s in servers]
        server = MultiSocketServer(socket_map, adj, listen, dispatcher, servers[0].log_info)
    return MetricsServer(server, int(servers[0].effective_port), name, socket_map, dispatcher)


def serve_metrics(
    registry: CollectorRegistry, *, host: str, port: int, name: str = "metrics-http"
) -> MetricsServer:
    """Serve ``registry`` on ``http://host:port/metrics`` (any path answers the page, as
    prometheus_client's ``start_http_server`` does) through a guarded server, started.

    Raises:
        OSError: as ``create_guarded_server``, with the address named.
    """
    try:
        server = create_guarded_server(make_wsgi_app(registry), host=host, port=port, name=name)
    except OSError as exc:
        raise OSError(
            exc.errno, f"metrics on {url_host(host)}:{port}: {exc.strerror or exc}"
        ) from exc
    return server.start()


__all__ = [
    "CLEANUP_INTERVAL_S",
    "CONNECTION_LIMIT",
    "IDLE_TIMEOUT_S",
    "MAX_PER_CLIENT",
    "READ_TIMEOUT_S",
    "MetricsServer",
    "create_guarded_server",
    "WRITE_TIMEOUT_S",
    "serve_metrics",
]
