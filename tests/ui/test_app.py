"""The web view's server over a real socket: GET and HEAD only (every other method 405,
nothing changes), the assets shipped in the package and nothing fetched from elsewhere,
and who sees what: no token or a bad one 401, a viewer with rights to no namespace shown
403, a viewer with some sees those only; loopback without a token sees all."""

from __future__ import annotations

import gzip
import http.client
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from hami_core.options import UiOptions
from hami_core.servers.keepalive import KeepAliveServer
from hami_core.simulate.runner import make_manager
from hami_core.ui.access import MAX_TOKEN_BYTES, Gate, User
from hami_core.ui.app import ASSETS, make_app, read_asset
from hami_core.ui.main import is_loopback, page_builder
from hami_core.ui.reading import PageCache
from tests.ui.cluster import write_snapshot

ROUTES = ["/", "/ui.js", "/ui.css", "/api/view", "/healthz"]


class FakeReviews:
    """The API server's answers: tokens -> users, and who may list pods where."""

    def __init__(self) -> None:
        self.users = {
            "admin-token": User(name="admin", groups=("system:masters",)),
            "b-token": User(name="bob"),
            "nobody-token": User(name="nobody"),
        }
        self.rights = {("admin", None), ("bob", "team-b")}
        self.asked: list[tuple[str, str | None]] = []

    def authenticate(self, token: str) -> User | None:
        return self.users.get(token)

    def may_list_pods(self, user: User, namespace: str | None) -> bool:
        self.asked.append((user.name, namespace))
        return (user.name, namespace) in self.rights


@contextmanager
def serve(tmp_path, *, require_token: bool, reviews=None) -> Iterator[tuple[int, FakeReviews]]:
    reviews = reviews or FakeReviews()
    snap = write_snapshot(tmp_path / "snap.json")
    build = page_builder(UiOptions(snapshot=str(snap)), make_manager(None))
    gate = Gate(require_token=require_token, reviews=reviews)
    cache = PageCache(build, refresh_s=60)
    server = KeepAliveServer(make_app(cache.get, gate), host="127.0.0.1", port=0)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield server.port, reviews
    finally:
        server.close()
        cache.close()  # its reader thread would read on beside later tests


def request(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_only_get_and_head_every_other_method_405(tmp_path):
    with serve(tmp_path, require_token=False) as (port, _):
        for path in ROUTES:
            status, headers, body = request(port, "GET", path)
            assert status == 200, path
            h_status, h_headers, h_body = request(port, "HEAD", path)
            assert h_status == 200 and h_body == b""
            if path != "/api/view":  # the view's time stamp may move between the two
                assert h_headers["content-length"] == str(len(body))
            for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
                status, headers, _ = request(port, method, path, body=b"{}")
                assert status == 405, (method, path)
                assert headers["allow"] == "GET, HEAD"
        assert request(port, "GET", "/nothing")[0] == 404


def test_assets_are_the_packaged_files_and_fetch_nothing_elsewhere(tmp_path):
    for name, _ in ASSETS.values():
        text = read_asset(name).decode()
        # no other origin: no scheme-qualified or protocol-relative URL at all
        assert not re.search(r"(https?:)?//[a-z0-9]", text.replace("'use strict'", "")), name
    with serve(tmp_path, require_token=False) as (port, _):
        status, headers, body = request(port, "GET", "/")
        assert status == 200 and body == read_asset("index.html")
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        assert "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert headers["x-content-type-options"] == "nosniff"


def test_the_wheel_declares_the_assets(tmp_path):
    """pyproject's package data carries static/ (the packaging tier builds and checks
    the wheel itself)."""
    import tomllib
    from pathlib import Path

    data = tomllib.loads(Path("pyproject.toml").read_text())
    patterns = data["tool"]["setuptools"]["package-data"]["hami_core"]
    assert "ui/static/*" in patterns


def test_loopback_without_token_sees_all_gzip_when_asked(tmp_path):
    with serve(tmp_path, require_token=False) as (port, reviews):
        status, headers, body = request(port, "GET", "/api/view", {"Accept-Encoding": "gzip"})
        assert status == 200 and headers["content-encoding"] == "gzip"
        data = json.loads(gzip.decompress(body))
        assert data["viewer"] == {"user": None, "namespaces": None}
        assert reviews.asked == []


def test_no_token_or_bad_token_is_401(tmp_path):
    with serve(tmp_path, require_token=True) as (port, _):
        for headers in (
            {},
            {"Authorization": "Basic YWRtaW46YWRtaW4="},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "Bearer"},
            {"Authorization": "Bearer " + "x" * (MAX_TOKEN_BYTES + 1)},
        ):
            status, got, body = request(port, "GET", "/api/view", headers)
            assert status == 401, headers
            assert got["www-authenticate"].startswith("Bearer")
            assert "team-" not in body.decode()
        # the page itself carries no data of the cluster
        status, _, body = request(port, "GET", "/")
        assert status == 200 and b"team-" not in body


def test_viewer_without_rights_403_viewer_with_some_sees_those(tmp_path):
    with serve(tmp_path, require_token=True) as (port, reviews):
        status, _, body = request(
            port, "GET", "/api/view", {"Authorization": "Bearer nobody-token"}
        )
        assert status == 403 and "nobody" in json.loads(body)["error"]
        assert "team-" not in body.decode()
        status, _, body = request(port, "GET", "/api/view", {"Authorization": "Bearer b-token"})
        assert status == 200
        data = json.loads(body)
        assert data["viewer"] == {"user": "bob", "namespaces": ["team-b"]}
        assert "team-a" not in body.decode()
        status, _, body = request(port, "GET", "/api/view", {"Authorization": "Bearer admin-token"})
        data = json.loads(body)
        assert status == 200 and data["viewer"]["namespaces"] is None
        assert any(p["pod"] == "team-a/too-big" for p in data["pending"])
        # answers are kept: a second look asks the API server nothing new
        asked = len(reviews.asked)
        request(port, "GET", "/api/view", {"Authorization": "Bearer b-token"})
        assert len(reviews.asked) == asked


def test_api_server_unreachable_is_503_not_a_crash(tmp_path):
    from hami_core.errors import HamiError

    class Down(FakeReviews):
        def authenticate(self, token: str) -> User | None:
            raise HamiError("create tokenreview: the API server is unreachable")

    with serve(tmp_path, require_token=True, reviews=Down()) as (port, _):
        status, _, body = request(port, "GET", "/api/view", {"Authorization": "Bearer x"})
        assert status == 503 and "unreachable" in json.loads(body)["error"]
        assert request(port, "GET", "/healthz")[0] == 200


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("10.0.0.5", False),
        ("::", False),
    ],
)
def test_a_token_is_required_off_loopback(address, loopback):
    assert is_loopback(address) is loopback


def test_a_slow_or_failing_reading_never_holds_a_viewer():
    """The page is rebuilt in the background: a rebuild slower than the refresh serves
    the last page meanwhile, and a failed one keeps it, marked with the problem."""
    import time

    from hami_core.errors import HamiError

    calls = {"n": 0}
    gate = threading.Event()

    def build() -> dict:
        calls["n"] += 1
        if calls["n"] == 2:
            gate.wait(10)  # the second reading is slow
        if calls["n"] == 3:
            raise HamiError("list pods: the API server is unreachable")
        return {"n": calls["n"]}

    cache = PageCache(build, refresh_s=0.01)
    try:
        assert cache.get() == {"n": 1}
        started = time.monotonic()
        assert cache.get() == {"n": 1}  # the second reading is still running
        assert time.monotonic() - started < 1
        gate.set()
        deadline = time.monotonic() + 10
        while "problem" not in cache.get() and time.monotonic() < deadline:
            time.sleep(0.01)
        page = cache.get()
        assert page["n"] == 2 and "unreachable" in page["problem"]
    finally:
        cache.close()
        gate.set()


def test_no_first_page_is_503_with_the_reason(tmp_path):
    from hami_core.errors import HamiError

    def build() -> dict:
        raise HamiError("list nodes: the API server is unreachable")

    cache = PageCache(build, refresh_s=60)
    server = KeepAliveServer(
        make_app(cache.get, Gate(require_token=False, reviews=None)), host="127.0.0.1", port=0
    )
    threading.Thread(target=server.run, daemon=True).start()
    try:
        status, _, body = request(server.port, "GET", "/api/view")
        assert status == 503 and "unreachable" in json.loads(body)["error"]
    finally:
        server.close()
        cache.close()


def test_tls_serves_https_and_a_lone_certificate_is_refused(tmp_path):
    import ssl
    import urllib.request

    from hami_core.errors import ConfigError
    from hami_core.servers.certs import generate_bundle
    from hami_core.ui.main import make_server

    bundle = generate_bundle(dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(bundle.cert_pem)
    (tmp_path / "tls.key").write_bytes(bundle.key_pem)
    (tmp_path / "ca.crt").write_bytes(bundle.ca_pem)
    snap = write_snapshot(tmp_path / "snap.json")
    with pytest.raises(ConfigError, match="--tls-private-key-file"):
        make_server(
            UiOptions(snapshot=str(snap), port=0, tls_cert_file=str(tmp_path / "tls.crt")),
            make_manager(None),
        )
    server = make_server(
        UiOptions(
            snapshot=str(snap),
            port=0,
            tls_cert_file=str(tmp_path / "tls.crt"),
            tls_private_key_file=str(tmp_path / "tls.key"),
        ),
        make_manager(None),
    )
    threading.Thread(target=server.run, daemon=True).start()
    try:
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        with urllib.request.urlopen(
            f"https://127.0.0.1:{server.port}/api/view", context=ctx, timeout=30
        ) as r:
            assert r.status == 200 and json.loads(r.read())["schema"] == "hami.ui/v1"
    finally:
        server.close()


def test_a_method_http_server_does_not_know_is_405_too(tmp_path):
    """docs/web-view.md: any method but GET and HEAD is 405. CONNECT, PROPFIND and any
    other token got http.server's 501, without the page's security headers."""
    with serve(tmp_path, require_token=False) as (port, _):
        for method in ("CONNECT", "PROPFIND", "MKCOL", "FOO"):
            status, headers, _ = request(port, method, "/api/view")
            assert status == 405, method
            assert headers["allow"] == "GET, HEAD"
            assert "content-security-policy" in headers
