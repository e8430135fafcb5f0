"""Every server's address setting takes IPv6, bare (``::1``) or in brackets as a URL
writes it (``[::1]``), through one reading (``servers.address``): ``hami ui --address
'[::1]'`` failed to bind (the brackets reached ``getaddrinfo`` as a name), and so did
every server but the one that checked for a colon. Each server kind is bound on ``::1``
and answers there: the plain HTTP server (web view, extender), the guarded metrics
server (monitor, scheduler and device-plugin metrics) and the HTTPS server (webhook,
extender and web view with TLS)."""

from __future__ import annotations

import http.client
import ssl
import threading
from collections.abc import Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner

from hami_core.errors import ConfigError
from hami_core.options import UiOptions, all_commands
from hami_core.servers import certs
from hami_core.servers.address import is_loopback, listen_host, split_host_port, url_host
from hami_core.servers.https import HttpsServer
from hami_core.servers.keepalive import KeepAliveServer
from hami_core.servers.metrics_http import create_guarded_server
from hami_core.servers.options import (
    DevicePluginOptions,
    MonitorOptions,
    SchedulerOptions,
    WebhookOptions,
)
from hami_core.servers.scheduler_main import check_exposure
from hami_core.settings import click_options, settings_of
from hami_core.simulate.runner import make_manager
from hami_core.ui.main import make_server
from tests.ui.cluster import write_snapshot


@pytest.mark.parametrize(
    ("value", "host"),
    [
        ("::1", "::1"),
        ("[::1]", "::1"),
        ("::", "::"),
        ("[::]", "::"),
        ("fe80::1%lo", "fe80::1%lo"),
        ("127.0.0.1", "127.0.0.1"),
        ("0.0.0.0", "0.0.0.0"),
        ("localhost", "localhost"),
        ("hami-ui.example.com", "hami-ui.example.com"),
        ("", ""),
    ],
)
def test_an_address_is_read_to_the_host_a_socket_binds(value, host):
    assert listen_host(value, "--x") == host


@pytest.mark.parametrize(
    "value", ["[::1", "::1]", "[127.0.0.1]", "[localhost]", "[]", "a b", "127.0.0.1:80", "-x"]
)
def test_what_is_no_address_is_refused_naming_the_flag(value):
    with pytest.raises(ConfigError, match=r"^--x: .* is not an address to listen on"):
        listen_host(value, "--x")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("[::1]:443", ("::1", 443)),
        ("[::]:9395", ("::", 9395)),
        ("[::1]", ("::1", None)),
        ("::1", ("::1", None)),
        (":9395", ("", 9395)),
        ("0.0.0.0:443", ("0.0.0.0", 443)),
    ],
)
def test_go_host_port_reads_the_host_as_an_address(value, expected):
    assert split_host_port(value, "--x") == expected


@pytest.mark.parametrize("value", ["[::1]:0", "[::1]:x", "[::1:443", "1.2.3.4:99999"])
def test_a_bad_host_port_is_refused(value):
    with pytest.raises(ConfigError, match="--x"):
        split_host_port(value, "--x")


def test_loopback_and_url_forms_of_an_ipv6_address():
    assert is_loopback("[::1]") and is_loopback("::1") and not is_loopback("[::]")
    assert url_host("::1") == url_host("[::1]") == "[::1]"
    assert url_host("127.0.0.1") == "127.0.0.1"


def parsed(cls: type, *args: str) -> Any:
    """``cls`` as its command builds it from ``args`` (the generated options), resolved
    as the process resolves it."""
    got: dict[str, Any] = {}

    @click.command()
    @click_options(cls)
    def command(**opts: Any) -> None:
        got.update(opts)

    result = CliRunner().invoke(command, list(args))
    assert result.exit_code == 0, result.output
    options = cls(**got)
    return options.resolved() if hasattr(options, "resolved") else options


#: Each address setting: (class, required flags, flag, value, the field bound, host).
ADDRESS_SETTINGS = [
    (UiOptions, (), "--address", "[::1]", "address", "::1"),
    (SchedulerOptions, (), "--bind-address", "[::1]", "bind_address", "::1"),
    (SchedulerOptions, (), "--metrics-bind-address", "[::1]", "metrics_bind_address", "::1"),
    (SchedulerOptions, (), "--metrics-bind-address", "[::1]:9000", "metrics_port", 9000),
    (SchedulerOptions, (), "--http_bind", "[::1]:8443", "bind_address", "::1"),
    (WebhookOptions, (), "--bind-address", "[::]", "bind_address", "::"),
    (WebhookOptions, (), "--http_bind", "[::1]:443", "bind_address", "::1"),
    (MonitorOptions, ("--node-name", "n"), "--bind-address", "[::1]", "bind_address", "::1"),
    (
        DevicePluginOptions,
        ("--node-name", "n"),
        "--metrics-bind-address",
        "[::1]",
        "metrics_bind_address",
        "::1",
    ),
]


@pytest.mark.parametrize(
    ("cls", "required", "flag", "value", "field", "bound"),
    [pytest.param(*row, id=f"{row[0].__name__} {row[2]} {row[3]}") for row in ADDRESS_SETTINGS],
)
def test_every_address_setting_takes_ipv6_in_brackets_and_bare(
    cls, required, flag, value, field, bound
):
    assert getattr(parsed(cls, *required, flag, value), field) == bound
    bare = value.replace("[", "").replace("]", "") if "]:" not in value else None
    if bare is not None:
        assert getattr(parsed(cls, *required, flag, bare), field) == bound


def test_every_address_setting_is_in_that_list():
    """A new address setting is read by the same parser: it must be listed above."""
    listed = {(cls, flag) for cls, _, flag, *_ in ADDRESS_SETTINGS}
    for _, cls in all_commands():
        for field, meta in settings_of(cls):
            if field.name.endswith("address") or field.name == "http_bind":
                assert (cls, meta.flags[0]) in listed, (cls.__name__, meta.flags[0])


@pytest.mark.parametrize(
    ("cls", "required", "flag"),
    sorted({(c, r, f) for c, r, f, *_ in ADDRESS_SETTINGS}, key=str),
)
def test_a_bad_address_stops_the_command_at_start_naming_the_flag(cls, required, flag):
    got: dict[str, Any] = {}

    @click.command()
    @click_options(cls)
    def command(**opts: Any) -> None:
        got.update(opts)

    result = CliRunner().invoke(command, [*required, flag, "[::1"])
    assert result.exit_code == 2 and f"Invalid value for {flag}: '[::1' is not an address" in (
        result.output
    )
    assert not got


def test_the_extender_on_ipv6_loopback_needs_no_client_certificate():
    check_exposure(parsed(SchedulerOptions, "--bind-address", "[::1]"))
    check_exposure(parsed(SchedulerOptions, "--http_bind", "[::1]:8443"))
    with pytest.raises(ConfigError, match="--bind-address ::"):
        check_exposure(parsed(SchedulerOptions, "--bind-address", "[::]"))


def hello(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"over " + environ["REMOTE_ADDR"].encode()]


def get(port: int, path: str = "/", *, context: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    """GET ``path`` from ``[::1]:port`` (HTTPS with ``context``)."""
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection("::1", port, timeout=10, context=context)
        if context
        else http.client.HTTPConnection("::1", port, timeout=10)
    )
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.fixture(params=["[::1]", "::1"])
def host(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_plain_http_server_binds_ipv6(host):
    server = KeepAliveServer(hello, host=host, port=0)
    threading.Thread(target=server.run, daemon=True).start()
    try:
        assert get(server.port) == (200, b"over ::1")
    finally:
        server.close()


def test_the_metrics_server_binds_ipv6(host):
    server = create_guarded_server(hello, host=host, port=0).start()
    try:
        assert get(server.port) == (200, b"over ::1")
    finally:
        server.close()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, ssl.SSLContext]]:
    d = tmp_path_factory.mktemp("pki")
    ca_pem, ca_key = certs.generate_ca()
    cert, key = certs.issue_serving_cert(ca_pem, ca_key, dns_names=["hami"], ip_addresses=["::1"])
    (d / "cert").write_bytes(cert)
    (d / "key").write_bytes(key)
    context = ssl.create_default_context(cadata=ca_pem.decode())
    yield str(d / "cert"), str(d / "key"), context


def test_the_https_server_binds_ipv6(host, tls):
    cert, key, context = tls
    server = HttpsServer(hello, host=host, port=0, cert_file=cert, key_file=key, threads=2)
    threading.Thread(target=server.run, daemon=True).start()
    try:
        assert get(server.port, context=context) == (200, b"over ::1")
    finally:
        server.close()


def test_hami_ui_address_in_brackets_serves_the_page_on_ipv6(tmp_path):
    """The report: ``hami ui --address '[::1]'``, the page read over IPv6 loopback."""
    snapshot = write_snapshot(tmp_path / "snapshot.json")
    options = parsed(UiOptions, "--address", "[::1]", "--port", "0", "--snapshot", str(snapshot))
    server = make_server(options, make_manager(None))
    threading.Thread(target=server.run, daemon=True).start()
    try:
        status, body = get(server.port)
        assert status == 200 and b"<html" in body.lower()
    finally:
        server.close()
