"""Slow clients for the /metrics guards: idle connections (slowloris), requests dripped a
byte at a time, responses read a trickle at a time, each from its own loopback address
(127.0.0.0/8 is all local on Linux) so the scraper's 127.0.0.1 is a separate client;
and ``tls_loris``, the same against the HTTPS servers (webhook, extender)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"


def connect(port: int, source: str, *, rcvbuf: int | None = None) -> socket.socket:
    """A TCP connection to 127.0.0.1:``port`` from ``source`` (a loopback address)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # before connect, so the window offered is small
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


@contextlib.contextmanager
def crowd(
    port: int, *, idle: int, slow_readers: int, per_address: int, first_address: int = 2
) -> Iterator[list[socket.socket]]:
    """``idle`` connections that send nothing and ``slow_readers`` that send a request
    and never read, ``per_address`` from each of 127.0.0.<first_address>, ... ; closed on
    exit. Yields every socket."""
    socks: list[socket.socket] = []
    try:
        for i in range(idle + slow_readers):
            source = f"127.0.0.{first_address + i // per_address}"
            if i < idle:
                socks.append(connect(port, source))
            else:
                s = connect(port, source, rcvbuf=1024)
                s.sendall(REQUEST)
                socks.append(s)
        yield socks
    finally:
        for s in socks:
            s.close()


def closed_by_server(s: socket.socket, within_s: float) -> float | None:
    """Seconds until the server closed ``s`` (EOF or reset), reading and discarding
    whatever it sends; None when it is still open after ``within_s``."""
    start = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - start < within_s:
        try:
            if not s.recv(65536):
                return time.monotonic() - start
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - start
    return None


def has_data(s: socket.socket) -> bool:
    """Bytes wait to be read on ``s`` (its response has begun to arrive)."""
    s.setblocking(False)
    try:
        return bool(s.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False
    finally:
        s.setblocking(True)


def is_open(s: socket.socket) -> bool:
    """The server has not closed ``s`` (nothing pending to read either)."""
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False
    finally:
        s.setblocking(True)


def tls_loris(port: int, address: str, stop: threading.Event, mode: str) -> None:
    """A client from ``address`` that keeps one TLS connection to 127.0.0.1:``port``
    sending as slowly as it can until ``stop`` (re-connecting when cut): with ``mode``
    "headers" or "body" a ``POST /webhook`` whose headers or body come one piece a second,
    with "handshake" a TLS handshake that never ends."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    while not stop.is_set():
        try:
            s = socket.socket()
            s.bind((address, 0))
            s.settimeout(10)
            s.connect(("127.0.0.1", port))
            if mode == "handshake":
                s.sendall(b"\x16\x03\x01")
                while not stop.is_set() and s.recv(1):
                    pass
                continue
            t = ctx.wrap_socket(s)
            head = b"POST /webhook HTTP/1.1\r\nHost: x\r\n"
            if mode == "body":
                head += b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
            t.sendall(head)
            while not stop.is_set():
                t.sendall(b" " if mode == "body" else b"X-a: b\r\n")
                time.sleep(1)
        except OSError:
            time.sleep(0.05)


def scrape(port: int, timeout_s: float) -> tuple[dict[str, list[float]], float]:
    """``({metric family: [sample values]}, seconds taken)`` of one full /metrics GET from
    127.0.0.1 (raises on a short or failed read)."""
    start = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as r:
        text = r.read().decode()
    took = time.monotonic() - start
    families = {f.name: [s.value for s in f.samples] for f in text_string_to_metric_families(text)}
    return families, took


__all__ = [
    "REQUEST",
    "closed_by_server",
    "connect",
    "crowd",
    "has_data",
    "is_open",
    "scrape",
    "tls_loris",
]
