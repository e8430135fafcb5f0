"""The extender's plain-HTTP server (hami_core.servers.keepalive): the thread that reads
a request answers it (one wake-up per request on a loaded machine), and a bad or hostile
client gets a clear refusal without stopping the server."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hami_core.servers.keepalive import KeepAliveServer


def echo_app(seen: list[int]) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(threading.get_ident())
        body = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ["PATH_INFO"].encode() + b":" + body]

    return app


@pytest.fixture
def serving(request: pytest.FixtureRequest) -> Iterator[tuple[KeepAliveServer, list[int]]]:
    seen: list[int] = []
    kwargs = getattr(request, "param", {})
    server = KeepAliveServer(echo_app(seen), host="127.0.0.1", port=0, **kwargs)
    threading.Thread(target=server.run, daemon=True).start()
    yield server, seen
    server.close()


def raw(port: int, data: bytes, timeout_s: float = 5) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_the_thread_that_reads_a_request_answers_it(serving, monkeypatch):
    """waitress reads in its event-loop thread and answers in a worker, cheroot's
    selector thread hands the connection over: each hand-over waits for a core."""
    server, seen = serving
    readers: list[int] = []

    def recording(name: str, cls: type) -> None:
        real = getattr(cls, name)

        def read(self: Any, *args: Any) -> Any:
            got = real(self, *args)
            readers.append(threading.get_ident())  # once it returned: it read this request
            return got

        monkeypatch.setattr(cls, name, read)

    for name, cls in (("readinto", socket.SocketIO), ("recv", socket.socket)):
        recording(name, cls)
    recording("recv_into", socket.socket)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    for i in range(3):
        readers.clear()
        conn.request("POST", "/filter", f"body-{i}".encode())
        resp = conn.getresponse()
        assert resp.read() == f"/filter:body-{i}".encode()
        assert not resp.will_close
        server_reads = [t for t in readers if t != threading.get_ident()]
        assert server_reads and set(server_reads) == {seen[-1]}, (server_reads, seen)
    conn.close()


def test_malformed_and_refused_requests_leave_the_server_serving(serving):
    server, _ = serving
    assert raw(server.port, b"GET / HTTP/x.y\r\n\r\n").startswith(b"HTTP/1.1 400")
    chunked = (
        b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"
    )
    assert raw(server.port, chunked).startswith(b"HTTP/1.1 411")
    bad_length = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"
    assert raw(server.port, bad_length).startswith(b"HTTP/1.1 400")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("POST", "/ok", b"x")
    assert conn.getresponse().read() == b"/ok:x"


@pytest.mark.parametrize("serving", [{"max_body_bytes": 10}], indirect=True)
def test_a_body_over_the_limit_is_refused_unread(serving):
    server, seen = serving
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n"
    out = raw(server.port, head)
    assert out.startswith(b"HTTP/1.1 413") and b"over 10 bytes" in out
    assert seen == []


@pytest.mark.parametrize("serving", [{"max_connections": 1, "timeout_s": 0.5}], indirect=True)
def test_connections_beyond_the_cap_wait_and_idle_ones_are_closed(serving):
    """A client that opens a connection and says nothing holds its slot only until the
    idle timeout; the next connection is served after it."""
    server, _ = serving
    idle = socket.create_connection(("127.0.0.1", server.port))
    time.sleep(0.1)  # the idle connection holds the only slot
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("POST", "/after", b"y")
    assert conn.getresponse().read() == b"/after:y"
    assert time.monotonic() - start >= 0.3  # it waited for the idle one's timeout
    assert idle.recv(1) == b""  # closed by the server
    idle.close()
