"""A production HTTPS server for the WSGI apps (webhook, and the extender with TLS).

Why cheroot (``cheroot.wsgi.Server`` + ``cheroot.ssl.builtin.BuiltinSSLAdapter``):

- waitress (the ``/metrics`` ports) and ``keepalive.py`` (the extender on loopback)
  serve plain HTTP only; ``werkzeug.serving`` is a
  development server.
- gunicorn serves TLS, but it is a pre-forking process manager: it owns the main
  thread and the signals, forks workers after loading the app (the API-server watch
  threads of ``KubeCluster`` would not survive the fork without ``post_fork`` hooks),
  and cannot be started inside a test process and stopped again.
- cheroot (the CherryPy server, maintained by the jaraco/CherryPy team) is a pure-Python,
  thread-pooled HTTP/1.1 server with TLS through the standard ``ssl`` module. It runs
  inside our process beside the watch threads, can be embedded, started on port 0 and
  stopped by a test, and answers a plain-HTTP request on the TLS port with a 400
  instead of hanging.

TLS: at least TLS 1.2 (the Python defaults for ciphers). The certificate and key are
read once at start; a rotated file needs a restart (the webhook's ``auto`` mode keeps
one certificate per Secret for its whole validity). With ``client_ca_file`` every client
must present a certificate signed by that CA (mutual TLS, for the extender).

Slow clients (issue #12 item 10): cheroot does the TLS handshake on its one accept thread,
so one idle TCP connection delays every other client by the socket timeout. Here the
handshake is deferred to the worker that serves the connection, each request gets
deadlines (``handshake_timeout_s`` for the handshake, ``read_timeout_s`` to receive the
request line, headers and body, ``request_timeout_s`` in all; a watchdog shuts the socket
of a connection past one), and one client address may keep at most ``max_per_client``
workers busy at once (its *share*).

A connection from an address whose share is busy waits, without a worker, until one of
that address's requests ends (issue 24 item 12). kube-apiserver is one address, and its
webhook client (HTTP/1.1 only: it offers no ``h2`` by ALPN, so HTTP/2 would not change
this) opens one connection per review in flight: a Deployment or Job scale-up
puts 48 and more reviews in flight at once, and when those past the share were closed,
the API server reported ``failed calling webhook ... EOF`` for 180 of 200 creations
(``failurePolicy: Fail`` refuses those pods; ``Ignore`` admits them unmutated). Waiting
is bounded: at most ``max_waiting_per_client`` connections per address (more are closed
at once) and for at most ``handshake_timeout_s`` each, so a tenant's address parks
sockets, never workers, and not for long. The admission is made where cheroot hands a
ready connection to the worker queue (``process_conn``), so a waiting connection is
owned by the guard alone until it is handed a slot.

The read deadline is what keeps many slow clients (a tenant's pods, each its own address,
trickling headers or a body: slowloris) from holding every worker: the API server sends
a review at once, so a request still arriving after a few seconds is cut, the worker
goes to the next connection in the queue, and a real review waits at most about that
long (the attack run found 16 such clients from 16 addresses stopping every review while
the only deadline was the 30 s one). The body is read whole, under the read deadline,
before the application runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import io
import logging
import os
import socket
import ssl
import sys
import termios
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from cheroot.server import HTTPConnection
from cheroot.ssl.builtin import BuiltinSSLAdapter
from cheroot.wsgi import Server

from hami_core.servers.address import listen_host, url_host

log = logging.getLogger(__name__)

#: Connections the kernel queues before a worker accepts them (cheroot's default is 5,
#: too few for a burst of pod creations).
LISTEN_BACKLOG = 128
#: Seconds a client has to finish its TLS handshake (the API server needs milliseconds).
HANDSHAKE_TIMEOUT_S = 5.0
#: Seconds a client has, after its handshake, to send the whole request (line, headers,
#: body). The API server and kube-scheduler send a request in one go; well under the
#: chart's webhook ``timeoutSeconds`` (10) and kube-scheduler's extender timeout (5 s).
READ_TIMEOUT_S = 3.0
#: Seconds one request may take in all, handshake and reading included. The API server
#: gives a webhook at most 30 s (``timeoutSeconds``), kube-scheduler an extender 5 s.
REQUEST_TIMEOUT_S = 30.0
#: Seconds a connection may take to send its request (handshake included) while others
#: wait for a worker: the API server needs milliseconds; a slow client yields its worker.
PRESSURE_READ_S = 0.5
#: Connections one address may have waiting for its share of workers; more are closed.
#: kube-apiserver's default ``--max-mutating-requests-inflight`` is 200, so it has no more
#: pod creations in flight than fit here beside its share; each is an open file.
MAX_WAITING_PER_CLIENT = 256
#: Failed connections (a TLS handshake that fails or is cut, a request cut by a
#: deadline or answered 4xx/5xx) an address may have before its new connections are
#: paced, and the pace then (connections a second). A flood of reconnections costs a TLS
#: handshake of CPU each; paced, a failing address's next connection waits (a socket, no
#: worker, no handshake) for its turn. An address whose connections succeed is never
#: paced, and one that is gets its turn back with every success.
FAILURE_BURST = 16
FAILURE_RATE_PER_S = 1.0
#: Bytes of a request body read at most when the application states no limit (Flask's
#: ``MAX_CONTENT_LENGTH``): the extender's largest, 5000 nodes' ``ExtenderArgs``.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: The socket of the connection a worker thread serves (for the body reader below).
_serving = threading.local()


class _DeferredHandshakeAdapter(BuiltinSSLAdapter):
    """Wraps accepted sockets without a handshake; the serving worker does it."""

    def wrap(self, sock: socket.socket) -> tuple[ssl.SSLSocket, dict[str, str]]:
        wrapped = self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return wrapped, {"wsgi.url_scheme": "https", "HTTPS": "on"}


class _Guard:
    """Per-connection deadlines (a watchdog thread) and busy workers per client address.

    A connection is *receiving* during its handshake and until its body is in, then
    *serving*. While connections wait for a worker (``queued()`` > 0), one that has been
    receiving for more than ``pressure_s`` is cut at once: a real client has sent its
    request by then, and its worker is owed to the connections behind it; unless bytes
    it sent wait unread (``_unread``): then the server is the slow one.

    An address whose connections fail is *paced* (a token bucket per address,
    ``failure_burst`` tokens, ``failure_rate`` a second): each of its connections then
    takes a token to be admitted, and gives it back when its request succeeds; without
    one it is *parked* (no worker, no handshake yet) until a token comes, at most
    ``handshake_s``. A failure of a connection admitted without a token takes one.
    """

    def __init__(
        self,
        *,
        max_per_client: int,
        handshake_s: float,
        read_s: float,
        request_s: float,
        pressure_s: float = PRESSURE_READ_S,
        max_waiting_per_client: int = MAX_WAITING_PER_CLIENT,
        failure_burst: int = FAILURE_BURST,
        failure_rate: float = FAILURE_RATE_PER_S,
    ) -> None:
        self.failure_burst = failure_burst
        self.failure_rate = failure_rate
        self.max_per_client = max_per_client
        self.handshake_s = handshake_s
        self.read_s = read_s
        self.request_s = request_s
        self.pressure_s = pressure_s
        self.max_waiting = max_waiting_per_client
        self.queued: Callable[[], int] = lambda: 0
        #: hands a connection that was given a slot to the worker queue (set by the server)
        self.dispatch: Callable[[Any], None] = lambda conn: None
        self._lock = threading.Lock()
        self._busy: dict[str, int] = {}
        # address -> connections waiting for a slot of its share: (give up at, connection)
        self._waiting: dict[str, deque[tuple[float, Any]]] = {}
        # paced address -> [tokens, refilled at (monotonic)]
        self._paces: dict[str, list[float]] = {}
        # paced address -> connections waiting for a token: (give up at, connection)
        self._parked: dict[str, deque[tuple[float, Any]]] = {}
        # id(sock) -> (deadline, sock, receiving since (monotonic) or None when serving)
        self._deadlines: dict[int, tuple[float, socket.socket, float | None]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="https-deadlines", daemon=True)
        self._thread.start()

    def admit(self, client: str, conn: Any) -> bool | None:
        """A slot of ``client``'s share for ``conn``: True when taken (dispatch it now),
        False when ``conn`` waits for one or, the address being paced, for a token
        (``leave`` or the watchdog dispatches it), None when the address already has
        ``max_waiting`` connections waiting (close ``conn``)."""
        now = time.monotonic()
        with self._lock:
            handshake = not getattr(conn, "_handshaken", False)
            if client in self._paces and handshake and not self._take_token(client, conn, now):
                parked = self._parked.setdefault(client, deque())
                if len(parked) >= self.max_waiting:
                    return None
                parked.append((now + self.handshake_s, conn))
                return False
            return self._take_slot(client, conn, now)

    def _take_slot(self, client: str, conn: Any, now: float) -> bool | None:
        """``admit``'s share part (under the lock)."""
        busy = self._busy.get(client, 0)
        if busy < self.max_per_client:
            self._busy[client] = busy + 1
            return True
        waiting = self._waiting.setdefault(client, deque())
        if len(waiting) >= self.max_waiting:
            self._give_token(client, conn)
            return None
        waiting.append((now + self.handshake_s, conn))
        return False

    def _refill(self, client: str, now: float) -> list[float]:
        pace = self._paces[client]
        pace[0] = min(self.failure_burst, pace[0] + (now - pace[1]) * self.failure_rate)
        pace[1] = now
        return pace

    def _take_token(self, client: str, conn: Any, now: float) -> bool:
        pace = self._refill(client, now)
        if pace[0] < 1:
            return False
        pace[0] -= 1
        conn._hami_token = True
        return True

    def _give_token(self, client: str, conn: Any) -> None:
        if getattr(conn, "_hami_token", False):
            conn._hami_token = False
            pace = self._paces.get(client)
            if pace is not None:
                pace[0] = min(self.failure_burst, pace[0] + 1)

    def ended(self, client: str, conn: Any, *, failed: bool) -> None:
        """A request of ``client`` on ``conn`` ended (before ``leave``): a success gives
        back the token it took; a failure of a connection admitted without one takes
        one (and starts pacing the address)."""
        now = time.monotonic()
        with self._lock:
            if not failed:
                self._give_token(client, conn)
                if client in self._paces:  # and one more: it serves
                    pace = self._refill(client, now)
                    pace[0] = min(self.failure_burst, pace[0] + 1)
            elif getattr(conn, "_hami_token", False):
                conn._hami_token = False  # spent
            else:
                if client not in self._paces:
                    log.debug("pacing new connections from %s: they fail", client)
                    self._paces[client] = [float(self.failure_burst), now]
                pace = self._refill(client, now)
                pace[0] = max(pace[0] - 1, 0.0)
            go, drop = self._unpark(client, now)
        self._hand_over(go, drop)

    def _unpark(self, client: str, now: float) -> tuple[list[Any], list[Any]]:
        """Parked connections of ``client`` that now have a token and a slot (to
        dispatch) or no room to wait for one (to close); under the lock."""
        go: list[Any] = []
        drop: list[Any] = []
        parked = self._parked.get(client)
        while parked and self._take_token(client, parked[0][1], now):
            conn = parked.popleft()[1]
            slot = self._take_slot(client, conn, now)
            if slot:
                go.append(conn)
            elif slot is None:
                drop.append(conn)
        if parked is not None and not parked:
            del self._parked[client]
        return go, drop

    def _hand_over(self, go: list[Any], drop: list[Any]) -> None:
        for conn in go:
            self.dispatch(conn)
        for conn in drop:
            with contextlib.suppress(Exception):
                conn.close()

    def leave(self, client: str) -> None:
        """A request of ``client`` ended: its slot goes to the oldest connection of the
        same address that waits for one, else it is freed."""
        with self._lock:
            waiting = self._waiting.get(client)
            successor = waiting.popleft()[1] if waiting else None
            if waiting is not None and not waiting:
                del self._waiting[client]
            if successor is None:
                left = self._busy.get(client, 1) - 1
                if left > 0:
                    self._busy[client] = left
                else:
                    self._busy.pop(client, None)
        if successor is not None:
            self.dispatch(successor)

    def drop_waiting(self) -> list[Any]:
        """Every waiting connection, no longer waiting (to close at shutdown)."""
        with self._lock:
            conns = [
                conn
                for queues in (self._waiting, self._parked)
                for waiting in queues.values()
                for _, conn in waiting
            ]
            self._waiting.clear()
            self._parked.clear()
        return conns

    def arm(self, sock: socket.socket, seconds: float, *, receiving: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            since = None
            if receiving:
                prev = self._deadlines.get(id(sock))
                since = prev[2] if prev is not None and prev[2] is not None else now
            self._deadlines[id(sock)] = (now + seconds, sock, since)

    def disarm(self, sock: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(id(sock), None)

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            now = time.monotonic()
            try:
                pressed = self.queued() > 0
            except Exception:  # the pool's size is advisory
                pressed = False
            with self._lock:
                late = [
                    k
                    for k, (at, sock, since) in self._deadlines.items()
                    if at <= now
                    or (
                        pressed
                        and since is not None
                        and now - since > self.pressure_s
                        and not _unread(sock)
                    )
                ]
                socks = [self._deadlines.pop(k)[1] for k in late]
                expired: list[Any] = []
                for queues in (self._waiting, self._parked):
                    for client in list(queues):
                        waiting = queues[client]
                        while waiting and waiting[0][0] <= now:
                            expired.append(waiting.popleft()[1])
                        if not waiting:
                            del queues[client]
                go: list[Any] = []
                for client in list(self._paces):
                    more, drop = self._unpark(client, now)
                    go += more
                    expired += drop
                    if self._refill(client, now)[0] >= self.failure_burst and (
                        client not in self._parked
                    ):
                        del self._paces[client]  # forgiven
            # waited for its share or a token past the handshake deadline
            self._hand_over(go, expired)
            for sock in socks:
                # The plain socket's shutdown: unblocks the worker's read at once.
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _unread(sock: socket.socket) -> bool:
    """Whether bytes the client sent wait in the kernel for us to read: then a slow
    request is the server's slowness (its CPU taken), not the client's, and the pressure
    rule spares it (a client that trickles is read as its bytes come; the read and
    handshake deadlines still hold). False when it cannot be told."""
    try:
        count = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return False
    return int.from_bytes(count, sys.byteorder) > 0


class _GuardedConnection(HTTPConnection):
    """A cheroot connection that does its TLS handshake under a deadline, in the worker."""

    guard: _Guard

    def communicate(self) -> bool:
        """Serve one request; the connection holds a slot of its address's share
        (taken by ``_GuardedServer.process_conn``), given back here."""
        client = _client_of(self)
        sock = self.socket
        shook = False  # a handshake (attempted) or request bytes: a failure counts
        read_before = getattr(self.rfile, "bytes_read", 0)
        _serving.status = None
        try:
            if isinstance(sock, ssl.SSLSocket) and not getattr(self, "_handshaken", False):
                shook = True
                self.guard.arm(sock, self.guard.handshake_s, receiving=True)
                try:
                    sock.do_handshake()
                except (OSError, ValueError) as exc:
                    log.debug("TLS handshake with %s failed: %s", client, exc)
                    return False
                self._handshaken = True
            # until the body is in (``_read_body_first``), then the rest of request_s
            self.guard.arm(sock, min(self.guard.read_s, self.guard.request_s), receiving=True)
            _serving.sock, _serving.guard, _serving.start = sock, self.guard, time.monotonic()
            return bool(super().communicate())
        finally:
            _serving.sock = None
            self.guard.disarm(sock)
            status = getattr(_serving, "status", None)
            tried = shook or getattr(self.rfile, "bytes_read", 0) != read_before
            failed = tried and (status is None or status >= 400)
            self.guard.ended(client, self, failed=failed)
            self.guard.leave(client)


def _client_of(conn: Any) -> str:
    """The address a connection comes from (its share is counted per address)."""
    return str(getattr(conn, "remote_addr", "") or "")


class _GuardedServer(Server):
    """cheroot's WSGI server whose dispatch of a ready connection to the worker queue
    takes a slot of the connection's address's share first (``_Guard.admit``)."""

    guard: _Guard

    def process_conn(self, conn: Any) -> None:
        client = _client_of(conn)
        admitted = self.guard.admit(client, conn)
        if admitted:
            super().process_conn(conn)
        elif admitted is None:
            log.warning(
                "closing a connection from %s: %d requests busy and %d waiting",
                client,
                self.guard.max_per_client,
                self.guard.max_waiting,
            )
            with contextlib.suppress(Exception):
                conn.close()


@contextlib.contextmanager
def _naming_the_files(*paths: str) -> Iterator[None]:
    """Re-raise a failure to load PEM files as an ``OSError`` that names them: ``ssl``
    says only ``[Errno 2] No such file or directory`` or ``[SSL] PEM lib``."""
    try:
        yield
    except OSError as exc:
        for path in paths:
            if not os.path.isfile(path):
                raise OSError(f"{path}: no such file") from exc
            if not os.access(path, os.R_OK):
                raise OSError(f"{path}: not readable") from exc
        what = " and ".join(paths)
        reason = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else exc
        raise OSError(
            f"{what}: not a PEM certificate and its private key, or they do not match ({reason})"
            if len(paths) == 2
            else f"{what}: not a PEM CA bundle ({reason})"
        ) from exc


def _read_body_first(app: Callable[..., Any], max_body_bytes: int) -> Callable[..., Any]:
    """WSGI middleware: read the whole body under the read deadline (the connection's
    socket is cut when it passes), then give the application the rest of the request
    deadline. A body that does not arrive in time ends the connection before ``app`` runs.

    At most ``max_body_bytes`` are read: a declared ``Content-Length`` above it is
    answered 413 at once, unread, and a body without one (chunked) is read up to one byte
    more and refused the same way. Reading first must not hold more than the
    application would accept: a client declaring gigabytes and sending them as fast as
    the network goes would otherwise have them held in memory for the whole read
    deadline, per worker (issue 24 attack run).
    """

    def wrapped(environ: dict[str, Any], respond: Callable[..., Any]) -> Any:
        def start_response(status: str, *args: Any) -> Any:
            with contextlib.suppress(ValueError, IndexError):
                _serving.status = int(status.split(None, 1)[0])
            return respond(status, *args)

        stream = environ.get("wsgi.input")
        if stream is not None:
            try:
                length = int(environ.get("CONTENT_LENGTH") or -1)
            except ValueError:
                length = -1
            if length > max_body_bytes:
                return _too_large(start_response, max_body_bytes)
            body = stream.read(length) if length >= 0 else stream.read(max_body_bytes + 1)
            if len(body) > max_body_bytes:
                return _too_large(start_response, max_body_bytes)
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        sock = getattr(_serving, "sock", None)
        if sock is not None:
            guard: _Guard = _serving.guard
            left = guard.request_s - (time.monotonic() - _serving.start)
            guard.arm(sock, max(left, 0.0))
        return app(environ, start_response)

    return wrapped


def _body_limit(app: Any, stated: int | None) -> int:
    """``stated``, else the application's own limit (a Flask app's
    ``MAX_CONTENT_LENGTH``), else ``MAX_BODY_BYTES``."""
    if stated is not None:
        return stated
    config = getattr(app, "config", None)
    own = config.get("MAX_CONTENT_LENGTH") if isinstance(config, dict) else None
    return int(own) if isinstance(own, int) and own > 0 else MAX_BODY_BYTES


def _too_large(start_response: Callable[..., Any], limit: int) -> list[bytes]:
    """A 413 that closes the connection (the rest of the body is never read)."""
    body = f"request body over {limit} bytes\n".encode()
    start_response(
        "413 Request Entity Too Large",
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ],
    )
    return [body]


class HttpsServer:
    """A bound, not yet serving, thread-pooled HTTPS server around a WSGI app.

    ``run()`` serves until ``close()`` (from another thread); ``port`` is the bound
    port (useful with port 0).
    """

    def __init__(
        self,
        app: Callable[..., Any],
        *,
        host: str,
        port: int,
        cert_file: str,
        key_file: str,
        threads: int = 8,
        client_ca_file: str | None = None,
        max_per_client: int | None = None,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
        max_waiting_per_client: int = MAX_WAITING_PER_CLIENT,
        max_body_bytes: int | None = None,
        failure_burst: int = FAILURE_BURST,
        failure_rate_per_s: float = FAILURE_RATE_PER_S,
    ) -> None:
        """Load the key pair and bind the socket.

        Args:
            app: a WSGI application (a Flask app).
            host: address to listen on (``0.0.0.0``, ``127.0.0.1``, ``::``, ``[::1]``:
                ``servers.address.listen_host``).
            port: TCP port; 0 picks a free one (read it from ``port``).
            cert_file: PEM certificate chain, serving certificate first.
            key_file: PEM private key of that certificate (unencrypted).
            threads: worker threads answering requests.
            client_ca_file: PEM CA bundle; when given, clients must present a
                certificate it signed (``ssl.CERT_REQUIRED``).
            max_per_client: workers one client address may keep busy at once
                (default: half the threads, at least 2); its further connections wait.
            max_waiting_per_client: connections of one address that may wait for its
                share (each at most ``handshake_timeout_s``); more are closed at once.
            max_body_bytes: request body bytes read at most (a larger one is answered
                413 unread); default the application's ``MAX_CONTENT_LENGTH`` (Flask),
                else ``MAX_BODY_BYTES``.
            failure_burst, failure_rate_per_s: failed connections an address may have
                before its new ones are paced, and the pace then (a second); see
                ``FAILURE_BURST``.
            handshake_timeout_s, read_timeout_s, request_timeout_s: the per-connection
                deadlines (seconds): the TLS handshake, receiving the whole request after
                it, and the request in all.

        Raises:
            OSError: the files cannot be read, do not match, or the port cannot be bound.
            ConfigError: ``host`` is not an address to listen on.
            ssl.SSLError: the PEM data is not a certificate / key.
        """
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        with _naming_the_files(cert_file, key_file):
            adapter = _DeferredHandshakeAdapter(cert_file, key_file)
        adapter.context.minimum_version = ssl.TLSVersion.TLSv1_2
        if client_ca_file:
            with _naming_the_files(client_ca_file):
                adapter.context.load_verify_locations(cafile=client_ca_file)
            adapter.context.verify_mode = ssl.CERT_REQUIRED
        self._guard = _Guard(
            max_per_client=max_per_client or max(2, threads // 2),
            handshake_s=handshake_timeout_s,
            read_s=read_timeout_s,
            request_s=request_timeout_s,
            max_waiting_per_client=max_waiting_per_client,
            failure_burst=failure_burst,
            failure_rate=failure_rate_per_s,
        )
        guard = self._guard

        class Connection(_GuardedConnection):
            pass

        Connection.guard = guard
        self._server = _GuardedServer(
            (listen_host(host), port),
            _read_body_first(app, _body_limit(app, max_body_bytes)),
            numthreads=threads,
            max=threads,
            request_queue_size=LISTEN_BACKLOG,
            server_name="hami",
        )
        self._server.guard = guard
        self._server.ssl_adapter = adapter
        self._server.ConnectionClass = Connection
        self._server.prepare()  # binds now, so errors surface here and port 0 is resolved
        pool = self._server.requests
        guard.queued = lambda: int(pool.qsize)
        # a slot handed over by ``leave``: straight to the worker queue, not admitted again
        guard.dispatch = functools.partial(Server.process_conn, self._server)
        self.error: BaseException | None = None

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self._server.bind_addr[1])

    @property
    def host(self) -> str:
        """The bound address."""
        return str(self._server.bind_addr[0])

    def run(self) -> None:
        """Serve requests until ``close()`` is called (blocks). An error that ends the
        loop is kept in ``error`` and raised."""
        try:
            self._server.serve()
        except BaseException as exc:
            self.error = exc
            raise

    def close(self) -> None:
        """Stop accepting, finish the requests in flight (up to cheroot's shutdown
        timeout, 5 s) and release the port. Safe to call more than once."""
        self._server.stop()
        self._guard.stop()
        for conn in self._guard.drop_waiting():
            with contextlib.suppress(Exception):
                conn.close()


def raise_open_files_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit, as Go servers do at
    start, and return the soft limit now in force. Every connection, waiting or idle, is
    an open file, and a container's soft limit may be the kernel's default, 1024. Never
    raises: a limit that cannot be changed is kept (and logged)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (OSError, ValueError) as exc:
        log.warning("open files limit stays %d (hard %d): %s", soft, hard, exc)
        return soft
    return hard


def make_https_server(
    app: Callable[..., Any],
    *,
    host: str,
    port: int,
    cert_file: str,
    key_file: str,
    threads: int = 8,
    client_ca_file: str | None = None,
) -> HttpsServer:
    """A bound ``HttpsServer``; call ``run()`` (blocking) and later ``close()``.

    See ``HttpsServer`` for the arguments and errors. Raises the open files limit
    (``raise_open_files_limit``).
    """
    raise_open_files_limit()
    return HttpsServer(
        app,
        host=host,
        port=port,
        cert_file=cert_file,
        key_file=key_file,
        threads=threads,
        client_ca_file=client_ca_file,
    )


def serve_https(
    app: Callable[..., Any],
    *,
    host: str,
    port: int,
    cert_file: str,
    key_file: str,
    threads: int = 8,
    stop: threading.Event | None = None,
    on_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve ``app`` over HTTPS until ``stop`` is set (blocks the calling thread).

    Args:
        app, host, port, cert_file, key_file, threads: as ``HttpsServer``.
        stop: set it (from any thread or a signal handler) to shut down; None serves
            until the process ends.
        on_ready: called with the bound port once the socket listens.

    Raises:
        OSError, ssl.SSLError: as ``HttpsServer``; ``RuntimeError`` when the server loop
            ends on its own (the cause is chained).
    """
    server = make_https_server(
        app, host=host, port=port, cert_file=cert_file, key_file=key_file, threads=threads
    )
    done = stop or threading.Event()
    worker = threading.Thread(target=server.run, name="https-server", daemon=True)
    worker.start()
    log.info("serving HTTPS on %s:%d with %d threads", url_host(server.host), server.port, threads)
    if on_ready is not None:
        on_ready(server.port)
    try:
        while not done.wait(0.5):
            if not worker.is_alive():
                raise RuntimeError("the HTTPS server stopped unexpectedly") from server.error
    finally:
        server.close()
        worker.join(timeout=10)
