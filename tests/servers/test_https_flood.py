"""Issue 24 attack run, row 8 of docs/threat-model.md: tenants that reconnect to the
webhook in a loop, each connection a TLS handshake of the server's CPU (a 1 GiB body
declared, answered 413, again at once). Through a real kube-apiserver on 2 cores, 1-3 of
200 pod creations failed in 5 of 9 runs: the starved server's pressure rule cut some of
the API server's own handshakes. An address whose connections fail is now paced: past a
few failures its next connection waits, without a worker or a handshake, for a token
(one a second), so a flood costs the server a handshake a second per address, and an
address whose requests succeed is never paced."""

from __future__ import annotations

import socket
import ssl
import threading
import time

import pytest

from hami_core.servers.https import _Guard
from tests.servers.test_https_guard import pki, review_seconds, serve  # noqa: F401

FLOODERS = 8


def _flood(port: int, address: str, stop: threading.Event, done: list[int]) -> None:
    """Reconnect from ``address`` as fast as the server lets it: handshake, declare a
    1 GiB review (answered 413), again. ``done[0]`` counts completed handshakes."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    while not stop.is_set():
        try:
            s = socket.socket()
            s.bind((address, 0))
            s.settimeout(10)
            s.connect(("127.0.0.1", port))
            with ctx.wrap_socket(s) as t:
                done[0] += 1
                t.sendall(
                    b"POST /webhook HTTP/1.1\r\nHost: x\r\n"
                    + f"Content-Length: {1 << 30}\r\n\r\n".encode()
                )
                while t.recv(4096):
                    pass
        except OSError:
            pass


def test_a_flood_of_failing_reconnections_is_paced_per_address(pki):  # noqa: F811
    server, _ = serve(pki, threads=8, failure_burst=4, failure_rate_per_s=1.0)
    stop = threading.Event()
    counts = [[0] for _ in range(FLOODERS)]
    flooders = [
        threading.Thread(
            target=_flood, args=(server.port, f"127.0.4.{i + 1}", stop, counts[i]), daemon=True
        )
        for i in range(FLOODERS)
    ]
    try:
        for t in flooders:
            t.start()
        time.sleep(1.0)  # past the burst of free failures
        before = [c[0] for c in counts]
        started = time.monotonic()
        waits = [review_seconds(pki, server.port) for _ in range(5)]
        time.sleep(max(0.0, 3.0 - (time.monotonic() - started)))
        during = [c[0] - b for c, b in zip(counts, before, strict=True)]
    finally:
        stop.set()
        for t in flooders:
            t.join(15)
        server.close()
    # ~3 s at one a second (plus what was left of the burst); unpaced, a flooder
    # completes dozens of handshakes a second
    assert max(during) <= 6, during
    assert max(waits) < 1.0, waits  # the API server's address is never paced


def test_a_paced_address_gets_its_turn_and_its_successes_give_it_back(pki):  # noqa: F811
    """A client whose connections failed (its pods' probes, a bad deploy) is paced, not
    shut out: its next review waits at most a token's time, and each success gives the
    token back, so sequential reviews then run unpaced."""
    server, _ = serve(pki, threads=4)
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        for _ in range(12):  # failures: a handshake then nothing
            s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            with s, ctx.wrap_socket(s):
                pass
        time.sleep(0.2)
        first = review_seconds(pki, server.port)
        rest = [review_seconds(pki, server.port) for _ in range(10)]
    finally:
        server.close()
    assert first < 2.5, first
    assert max(rest) < 0.5, rest


def test_the_pressure_rule_spares_a_request_whose_bytes_wait_for_the_server():
    """The other half of row 8: with the CPU starved, the API server's handshake sat
    unread past the 0.5 s pressure deadline and was cut as if the API server were slow.
    A connection whose bytes wait unread in the kernel is the server's delay, not the
    client's: only a connection that has nothing to read is cut under pressure."""
    guard = _Guard(max_per_client=2, handshake_s=30, read_s=30, request_s=30, pressure_s=0.2)
    guard.queued = lambda: 1  # others wait for a worker
    waiting, waiting_peer = socket.socketpair()
    silent, silent_peer = socket.socketpair()
    try:
        waiting_peer.sendall(b"\x16\x03\x01 a ClientHello nobody has read yet")
        guard.arm(waiting, 30, receiving=True)
        guard.arm(silent, 30, receiving=True)
        time.sleep(0.8)
        assert silent_peer.recv(10) == b""  # cut: shut down by the watchdog
        waiting_peer.settimeout(0.2)
        with pytest.raises(TimeoutError):
            waiting_peer.recv(10)  # still open
    finally:
        guard.stop()
        for s in (waiting, waiting_peer, silent, silent_peer):
            s.close()
