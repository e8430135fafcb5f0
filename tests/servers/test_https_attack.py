"""The issue-24 attack run on the HTTPS server of the webhook (hami_core.servers.https),
on real TLS sockets: a client that declares or streams a body far over the webhook's
16 MiB. The server read the whole body into memory before the application's own limit
was checked (``_read_body_first``), for as long as the read deadline let it: four such
clients sent ~100 MiB each in the 3 s and the process grew by ~750 MiB; 32 workers on
a fast pod network can take gigabytes and get the webhook OOM-killed (with
``failurePolicy: Fail``, every pod creation then fails). The declared length is now
refused at once, and a body without one is read up to the limit only."""

from __future__ import annotations

import socket
import ssl
import time

from hami_core.servers.webhook import MAX_BODY_BYTES
from tests.servers.test_https_guard import pki, serve  # noqa: F401  (pki: a fixture)

CLIENT = "127.0.0.3"


def _tls(port: int) -> ssl.SSLSocket:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    s = socket.socket()
    s.bind((CLIENT, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return ctx.wrap_socket(s)


def _status(sock: ssl.SSLSocket) -> str:
    """The status line of the answer, or "" when the server closed without one."""
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except (OSError, TimeoutError):
        pass
    return data.split(b"\r\n", 1)[0].decode(errors="replace")


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(pki):  # noqa: F811
    server, _ = serve(pki)
    try:
        t = _tls(server.port)
        t.sendall(
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {4 << 30}\r\n\r\n".encode()
        )
        started = time.monotonic()
        status = _status(t)
        took = time.monotonic() - started
        t.close()
    finally:
        server.close()
    assert " 413 " in f"{status} ", f"answered {status!r} after {took:.1f}s"
    assert took < 2.0, f"answered after {took:.1f}s: the body was waited for"


def test_a_streamed_body_over_the_limit_is_read_only_up_to_it(pki):  # noqa: F811
    server, _ = serve(pki)
    sent = 0
    try:
        t = _tls(server.port)
        t.sendall(
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"%x\r\n" % (1 << 20) + b" " * (1 << 20) + b"\r\n"
        try:
            while sent < 8 * MAX_BODY_BYTES:
                t.sendall(chunk)
                sent += 1 << 20
        except OSError:
            pass  # the server stopped reading and closed
        status = _status(t)
        t.close()
    finally:
        server.close()
    assert " 413 " in f"{status} " or status == "", status
    # what it took before it stopped reading: the limit and what the socket buffers hold
    assert sent < 2 * MAX_BODY_BYTES + (16 << 20), f"the server read {sent >> 20} MiB"
