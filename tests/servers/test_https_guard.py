"""The HTTPS server against slow and unauthenticated clients (issue #12 items 3 and 10)."""

import json
import socket
import ssl
import threading
import time
import urllib.request

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import ConfigError
from hami_core.servers import certs
from hami_core.servers.https import HttpsServer
from hami_core.servers.scheduler_main import SchedulerOptions, check_exposure
from hami_core.servers.webhook import create_webhook_app
from hami_core.webhook import Admission
from tests.builders import manager
from tests.servers.slowclients import tls_loris
from tests.servers.test_webhook import pod_review

OTHER_CLIENT = "127.0.0.2"  # a second source address on loopback: another client


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca_pem, ca_key = certs.generate_ca()
    cert, key = certs.issue_serving_cert(
        ca_pem, ca_key, dns_names=["hami"], ip_addresses=["127.0.0.1"]
    )
    client_cert, client_key = certs.issue_serving_cert(
        ca_pem, ca_key, dns_names=["kube-scheduler"], client_auth=True
    )
    stranger_ca, stranger_key = certs.generate_ca(common_name="stranger")
    s_cert, s_key = certs.issue_serving_cert(
        stranger_ca, stranger_key, dns_names=["kube-scheduler"], client_auth=True
    )
    files = {
        "ca": ca_pem,
        "cert": cert,
        "key": key,
        "client.crt": client_cert,
        "client.key": client_key,
        "stranger.crt": s_cert,
        "stranger.key": s_key,
    }
    out = {}
    for name, data in files.items():
        (d / name).write_bytes(data)
        out[name] = str(d / name)
    out["ca_pem"] = ca_pem
    return out


def serve(pki, **kw):
    server = HttpsServer(
        create_webhook_app(Admission(manager())),
        host="127.0.0.1",
        port=0,
        cert_file=pki["cert"],
        key_file=pki["key"],
        threads=kw.pop("threads", 4),
        **kw,
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    return server, thread


def review_seconds(pki, port, *, cert=None):
    ctx = ssl.create_default_context(cadata=pki["ca_pem"].decode())
    if cert:
        ctx.load_cert_chain(pki[f"{cert}.crt"], pki[f"{cert}.key"])
    body = pod_review()
    req = urllib.request.Request(
        f"https://127.0.0.1:{port}/webhook",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    start = time.monotonic()
    with urllib.request.urlopen(req, context=ctx, timeout=20) as resp:
        out = json.loads(resp.read())
    assert out["response"]["uid"] == body["request"]["uid"]
    return time.monotonic() - start


def slow_client(port, *, send=b"\x16\x03\x01"):
    """A TCP client from another address that starts a TLS handshake and stalls."""
    s = socket.socket()
    s.bind((OTHER_CLIENT, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    if send:
        s.sendall(send)
    return s


def test_an_idle_connection_does_not_delay_the_next_review(pki):
    server, thread = serve(pki)
    try:
        idle = [slow_client(server.port, send=b"") for _ in range(3)]
        assert review_seconds(pki, server.port) < 2.0
        for s in idle:
            s.close()
    finally:
        server.close()
        thread.join(10)


def test_sixteen_slow_handshakes_neither_stop_reviews_nor_hold_forever(pki):
    server, thread = serve(pki, threads=4, handshake_timeout_s=1.5)
    try:
        slow = [slow_client(server.port) for _ in range(16)]
        assert review_seconds(pki, server.port) < 3.0
        start = time.monotonic()
        for s in slow:
            assert s.recv(100) == b""  # closed by the server at its deadline (or the cap)
        assert time.monotonic() - start < 8.0
    finally:
        server.close()
        thread.join(10)


def test_one_client_keeps_at_most_its_share_of_workers(pki):
    # The deadline alone would not rescue this review: 30 s to finish a handshake.
    server, thread = serve(pki, threads=4, max_per_client=2, handshake_timeout_s=30)
    try:
        slow = [slow_client(server.port) for _ in range(8)]
        time.sleep(0.3)
        assert review_seconds(pki, server.port) < 3.0
        for s in slow:
            s.close()
    finally:
        server.close()
        thread.join(10)


def test_mutual_tls_serves_only_clients_with_a_certificate_of_the_ca(pki):
    server, thread = serve(pki, client_ca_file=pki["ca"])
    try:
        assert review_seconds(pki, server.port, cert="client") < 5.0
        for cert in (None, "stranger"):
            with pytest.raises((OSError, ssl.SSLError)):
                review_seconds(pki, server.port, cert=cert)
    finally:
        server.close()
        thread.join(10)


def test_deeply_nested_json_is_a_400():
    client = create_webhook_app(Admission(manager())).test_client()
    for depth in (150, 1000, 100000):
        body = b"[" * depth + b"]" * depth
        resp = client.post("/webhook", data=body, content_type="application/json")
        assert resp.status_code == 400, depth
        assert "nested deeper" in resp.get_json()["error"]
    deep_pod = pod_review()
    obj = deep_pod["request"]["object"]["metadata"].setdefault("annotations", {})
    nest: dict = {}
    cur = nest
    for _ in range(500):
        cur["x"] = {}
        cur = cur["x"]
    deep_pod["request"]["object"]["spec"]["extra"] = nest
    resp = client.post("/webhook", data=json.dumps(deep_pod), content_type="application/json")
    assert resp.status_code == 400 and obj == {}


# -- item 3: the extender listens on loopback unless it authenticates clients -----------


def test_the_extender_defaults_to_loopback_and_refuses_open_binds_without_mtls():
    assert SchedulerOptions().bind_address == "127.0.0.1"
    check_exposure(SchedulerOptions())
    check_exposure(SchedulerOptions(bind_address="::1"))
    with pytest.raises(ConfigError, match="authenticates no client"):
        check_exposure(SchedulerOptions(bind_address="0.0.0.0"))
    with pytest.raises(ConfigError, match="authenticates no client"):
        check_exposure(
            SchedulerOptions(bind_address="0.0.0.0", tls_cert_file="c", tls_private_key_file="k")
        )
    check_exposure(
        SchedulerOptions(
            bind_address="0.0.0.0",
            tls_cert_file="c",
            tls_private_key_file="k",
            tls_client_ca_file="ca",
        )
    )
    with pytest.raises(ConfigError, match="needs --tls-cert-file"):
        check_exposure(SchedulerOptions(tls_client_ca_file="ca"))


def test_the_scheduler_cli_refuses_an_open_address_before_contacting_anything():
    result = CliRunner().invoke(cli, ["scheduler", "--bind-address", "0.0.0.0"])
    assert result.exit_code == 2  # a bad configuration (cli.ConfigFailure), one line
    assert result.output.startswith("error: --bind-address 0.0.0.0: the extender authenticates")
    assert result.output.count("\n") == 1
    help_text = CliRunner().invoke(cli, ["scheduler", "--help"], terminal_width=200).output
    assert "default: 127.0.0.1" in help_text and "--tls-client-ca-file" in help_text
    assert "--metrics-bind-address" in help_text


@pytest.mark.parametrize("mode", ["headers", "body", "handshake"])
def test_many_slow_clients_from_many_addresses_do_not_stop_reviews(pki, mode):
    """Issue #12 item 10, found again by the attack run: 16 slowloris clients, each from
    its own address (a tenant's pods), held all 8 workers for the 30 s request deadline
    and every review timed out. Now a request must arrive within the read deadline, and
    within half a second once others wait for a worker."""
    server, _ = serve(pki, threads=8)
    stop = threading.Event()
    clients = [
        threading.Thread(
            target=tls_loris, args=(server.port, f"127.0.1.{i + 1}", stop, mode), daemon=True
        )
        for i in range(32)
    ]
    try:
        for c in clients:
            c.start()
        time.sleep(2)
        waits = [review_seconds(pki, server.port) for _ in range(3)]
        assert max(waits) < 5, waits  # the API server gives the chart's webhook 10 s
    finally:
        stop.set()
        server.close()


# -- issue 24 item 12: the API server is one address that opens a connection per review --


def _slow_app(seconds: float, seen: dict):
    """A WSGI app that answers after ``seconds`` and records, per client address, how
    many of its requests ran at once (``seen[address] = peak``)."""
    lock = threading.Lock()
    running: dict[str, int] = {}

    def app(environ, start_response):
        who = environ.get("REMOTE_ADDR", "")
        with lock:
            running[who] = running.get(who, 0) + 1
            seen[who] = max(seen.get(who, 0), running[who])
        try:
            time.sleep(seconds)
        finally:
            with lock:
                running[who] -= 1
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    return app


def _serve_app(pki, app, **kw):
    server = HttpsServer(
        app, host="127.0.0.1", port=0, cert_file=pki["cert"], key_file=pki["key"], **kw
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    return server, thread


def _burst(pki, port, n: int, *, source: str = "127.0.0.1") -> list[str]:
    """``n`` requests at once from ``source``, each on its own TLS connection (what the API
    server's HTTP/1.1 client does for reviews in flight); the errors seen, one per failure."""
    ctx = ssl.create_default_context(cadata=pki["ca_pem"].decode())
    go = threading.Barrier(n)
    errors: list[str] = []

    def one() -> None:
        try:
            raw = socket.create_connection(
                ("127.0.0.1", port), timeout=20, source_address=(source, 0)
            )
            go.wait(10)
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(b"GET /x HTTP/1.1\r\nHost: hami\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
            if not data.startswith(b"HTTP/1.1 200"):
                errors.append(f"answer {data[:40]!r}")
        except (OSError, threading.BrokenBarrierError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def test_a_burst_from_one_address_waits_for_its_share_instead_of_being_closed(pki):
    """Issue 24 item 12: kube-apiserver (one address, HTTP/1.1) opens a connection per
    review in flight; with 48 creations at once through the default 32 workers, the
    connections past the per-address cap (16) were closed and the API server reported
    ``failed calling webhook: EOF``. They now wait for a worker of the address's share:
    every request is answered, and the address still never holds more than its share."""
    seen: dict[str, int] = {}
    server, thread = _serve_app(pki, _slow_app(0.2, seen), threads=4, max_per_client=2)
    try:
        errors = _burst(pki, server.port, 24)
        assert errors == []
        assert seen["127.0.0.1"] == 2  # its share was used, and not exceeded
    finally:
        server.close()
        thread.join(10)


def test_a_tenant_holding_its_share_does_not_stop_the_api_servers_burst(pki):
    """The other side of the share: a tenant address that parks 40 connections in slow
    TLS handshakes (each would hold a worker 30 s) keeps at most its share busy, and a
    burst of 24 reviews from the API server's address is all answered meanwhile."""
    seen: dict[str, int] = {}
    server, thread = _serve_app(
        pki, _slow_app(0.05, seen), threads=4, max_per_client=2, handshake_timeout_s=30
    )
    try:
        slow = [slow_client(server.port) for _ in range(40)]
        time.sleep(0.3)
        start = time.monotonic()
        assert _burst(pki, server.port, 24) == []
        assert time.monotonic() - start < 10
        assert OTHER_CLIENT not in seen  # the tenant's handshakes never reached the app
        for s in slow:
            s.close()
    finally:
        server.close()
        thread.join(10)


def test_connections_waiting_for_a_share_are_bounded_and_expire(pki):
    """A tenant cannot park connections without bound: past ``max_waiting_per_client``
    they are closed at once, and a waiting one is closed at the handshake deadline."""
    server, thread = _serve_app(
        pki,
        _slow_app(0.0, {}),
        threads=4,
        max_per_client=1,
        max_waiting_per_client=3,
        handshake_timeout_s=1.0,
    )
    try:
        first = slow_client(server.port)
        time.sleep(0.3)  # it holds the address's one worker
        waiting = [slow_client(server.port) for _ in range(3)]
        time.sleep(0.3)
        over = slow_client(server.port)
        start = time.monotonic()
        assert over.recv(100) == b""  # closed: no room to wait
        assert time.monotonic() - start < 0.8
        for s in [first, *waiting]:
            assert s.recv(100) == b""  # the one served and the waiting all by ~2 s
        assert time.monotonic() - start < 4.0
    finally:
        server.close()
        thread.join(10)


def test_the_production_servers_raise_the_open_files_soft_limit(pki, monkeypatch):
    """Every waiting or idle connection is an open file: ``make_https_server`` (the
    extender) and ``serve_https`` (the webhook) raise the soft ``RLIMIT_NOFILE`` to the
    hard limit at start, as Go servers do: a container's soft limit may be the kernel's
    default, 1024."""
    import resource

    from hami_core.servers.https import make_https_server

    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda what: (1024, 65536))
    monkeypatch.setattr(resource, "setrlimit", lambda what, lim: set_to.append(lim))
    server = make_https_server(
        create_webhook_app(Admission(manager())),
        host="127.0.0.1",
        port=0,
        cert_file=pki["cert"],
        key_file=pki["key"],
    )
    server.close()
    assert set_to == [(65536, 65536)]
