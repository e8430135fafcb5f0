"""The extender's plain-HTTP server (loopback only, beside kube-scheduler): one thread per
keep-alive connection, which reads each request, runs the WSGI app and writes the answer
itself.

Why not waitress (its server before): kube-scheduler 1.20 waits for ``/filter`` and then
``/prioritize`` one pod at a time over one or two kept-alive connections, so each
request's latency is the pace. waitress reads a request in its event-loop thread and
hands it to a worker thread; cheroot's selector thread hands a ready connection to a
worker. On a loaded machine every such hand-over waits for the woken thread to get a
core; here the thread blocked in ``recv`` on the connection is the one that answers, one
wake-up per request. ``benchmarks/bench_extender_http.py`` with four busy processes: 3.4
ms per pod over the handlers' own time against waitress's 7.6 (docs/performance.md).

Limits: at most ``max_connections`` connections are served at once (a further one waits
in the listen backlog until one ends); a connection idle or stalled for ``timeout_s``
is closed; a body must state its ``Content-Length`` (Go's client does) and at most
``max_body_bytes`` are read (larger: 413, connection closed). Malformed requests get
``http.server``'s 400. TLS is ``https.py``'s (cheroot, with per-client guards).
"""

from __future__ import annotations

import io
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hami_core.servers.address import address_family, listen_host

log = logging.getLogger(__name__)

#: Seconds a connection may sit idle or stall mid-request before it is closed: above Go's
#: 90 s ``IdleConnTimeout`` (kube-scheduler's client), so the client closes an idle
#: connection first and never races a POST against our close (waitress's was 120 s too).
IDLE_TIMEOUT_S = 120.0


class KeepAliveServer:
    """A bound, not yet serving, thread-per-connection HTTP/1.1 server around a WSGI app.

    ``run()`` serves until ``close()`` (from another thread); ``port`` / ``effective_port``
    is the bound port (useful with port 0).
    """

    def __init__(
        self,
        app: Callable[..., Iterable[bytes]],
        *,
        host: str,
        port: int,
        max_connections: int = 16,
        max_body_bytes: int = 64 * 1024 * 1024,
        timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        """Bind the socket.

        Args:
            app: a WSGI application (the extender's Flask app).
            host, port: where to listen (``servers.address.listen_host``: an IPv6 address
                bare or in brackets); port 0 picks a free one.
            max_connections: connections served at once (each holds a thread).
            max_body_bytes: request body bytes accepted at most.
            timeout_s: a connection idle or stalled this long is closed.

        Raises:
            OSError: the address cannot be bound.
            ConfigError: ``host`` is not an address to listen on.
            ValueError: ``max_connections`` below 1.
        """
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        slots = threading.BoundedSemaphore(max_connections)
        handler = type(
            "Handler",
            (_Handler,),
            {"app": staticmethod(app), "max_body": max_body_bytes, "timeout": timeout_s},
        )
        host = listen_host(host)
        family = address_family(host)

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True
            block_on_close = False

            def process_request(self, request: Any, client_address: Any) -> None:
                slots.acquire()  # the accept loop waits here; the backlog holds the rest
                try:
                    super().process_request(request, client_address)
                except BaseException:
                    slots.release()
                    raise

            def process_request_thread(self, request: Any, client_address: Any) -> None:
                try:
                    super().process_request_thread(request, client_address)
                finally:
                    slots.release()

        self._server = Server((host, port), handler)

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self._server.server_address[1])

    effective_port = port

    def run(self) -> None:
        """Serve until ``close()`` is called (blocks)."""
        self._server.serve_forever(poll_interval=0.5)

    def close(self) -> None:
        """Stop accepting and release the port; connections in flight end on their own
        (their threads are daemons). Safe to call more than once."""
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    """One connection: each request in turn through the WSGI app."""

    protocol_version = "HTTP/1.1"  # keep-alive unless the client says close
    default_request_version = "HTTP/1.0"  # errors before the version is read keep a status line
    server_version = "hami"
    sys_version = ""
    app: Callable[..., Iterable[bytes]]
    max_body: int

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._serve(b"")

    def do_HEAD(self) -> None:
        self._serve(b"")

    def do_POST(self) -> None:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self._refuse(411, "Length Required", "a body must state its Content-Length")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self._refuse(400, "Bad Request", "Content-Length is not a number")
            return
        if length > self.max_body:
            self._refuse(
                413, "Request Entity Too Large", f"request body over {self.max_body} bytes"
            )
            return
        body = self.rfile.read(length)
        if len(body) < length:  # the client went away mid-body
            self.close_connection = True
            return
        self._serve(body)

    # Every other method reaches the app too, which refuses what it does not serve
    # (405 from Flask and the web view) instead of http.server's 501.
    do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_TRACE = do_POST

    def __getattr__(self, name: str) -> Any:
        """``do_<METHOD>`` of any other method token (CONNECT, PROPFIND, ...): the app
        refuses it too, rather than http.server's 501 without the app's headers."""
        if name.startswith("do_") and name[3:].isalpha() and name[3:].isupper():
            return self.do_POST
        raise AttributeError(name)

    def _refuse(self, code: int, reason: str, message: str) -> None:
        data = f"{message}\n".encode()
        self.send_response(code, reason)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def _serve(self, body: bytes) -> None:
        path, _, query = self.path.partition("?")
        address: Any = self.server.server_address
        environ = {
            "REQUEST_METHOD": self.command,
            "SCRIPT_NAME": "",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "SERVER_NAME": str(address[0]),
            "SERVER_PORT": str(address[1]),
            "SERVER_PROTOCOL": self.request_version,
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type") or "",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.version": (1, 0),
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": "http",
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for key, value in self.headers.items():
            name = "HTTP_" + key.upper().replace("-", "_")
            if name not in ("HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                environ[name] = value
        answer: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
            answer["status"], answer["headers"] = status, headers

        result = self.app(environ, start_response)
        try:
            data = b"".join(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        length = len(data)
        if self.command == "HEAD":  # the length of the GET's body, and no body (RFC 9110)
            stated = [v for k, v in answer["headers"] if k.lower() == "content-length"]
            length, data = int(stated[0]) if stated else 0, b""
        lines = [f"HTTP/1.1 {answer['status']}\r\n"]
        for key, value in answer["headers"]:
            if key.lower() not in ("content-length", "connection"):
                lines.append(f"{key}: {value}\r\n")
        lines.append(f"Content-Length: {length}\r\n")
        if self.close_connection:
            lines.append("Connection: close\r\n")
        lines.append("\r\n")
        self.wfile.write("".join(lines).encode("latin-1") + data)  # one send: one packet
