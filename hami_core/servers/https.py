"""A production HTTPS server for the WSGI apps (webhook, and the extender with TLS).

Why cheroot (``cheroot.wsgi.Server`` + ``cheroot.ssl.builtin.BuiltinSSLAdapter``):

- waitress, our plain-HTTP server, has no TLS at all; ``werkzeug.serving`` is a
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
one certificate per Secret for its whole validity).
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from typing import Any

from cheroot.ssl.builtin import BuiltinSSLAdapter
from cheroot.wsgi import Server

log = logging.getLogger(__name__)

#: Connections the kernel queues before a worker accepts them (cheroot's default is 5,
#: too few for a burst of pod creations).
LISTEN_BACKLOG = 128


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
    ) -> None:
        """Load the key pair and bind the socket.

        Args:
            app: a WSGI application (a Flask app).
            host: address to listen on (``0.0.0.0``, ``127.0.0.1``, ``::``).
            port: TCP port; 0 picks a free one (read it from ``port``).
            cert_file: PEM certificate chain, serving certificate first.
            key_file: PEM private key of that certificate (unencrypted).
            threads: worker threads answering requests.

        Raises:
            OSError: the files cannot be read, do not match, or the port cannot be bound.
            ssl.SSLError: the PEM data is not a certificate / key.
        """
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        adapter = BuiltinSSLAdapter(cert_file, key_file)
        adapter.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._server = Server(
            (host, port),
            app,
            numthreads=threads,
            max=threads,
            request_queue_size=LISTEN_BACKLOG,
            server_name="hami",
        )
        self._server.ssl_adapter = adapter
        self._server.prepare()  # binds now, so errors surface here and port 0 is resolved
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


def make_https_server(
    app: Callable[..., Any],
    *,
    host: str,
    port: int,
    cert_file: str,
    key_file: str,
    threads: int = 8,
) -> HttpsServer:
    """A bound ``HttpsServer``; call ``run()`` (blocking) and later ``close()``.

    See ``HttpsServer`` for the arguments and errors.
    """
    return HttpsServer(
        app, host=host, port=port, cert_file=cert_file, key_file=key_file, threads=threads
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
    log.info("serving HTTPS on %s:%d with %d threads", server.host, server.port, threads)
    if on_ready is not None:
        on_ready(server.port)
    try:
        while not done.wait(0.5):
            if not worker.is_alive():
                raise RuntimeError("the HTTPS server stopped unexpectedly") from server.error
    finally:
        server.close()
        worker.join(timeout=10)
