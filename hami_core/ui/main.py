"""``hami ui``: read the cluster, build the page, serve it until stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from hami_core.errors import ConfigError, HamiError
from hami_core.options import UiOptions
from hami_core.plugin import BackendManager
from hami_core.protocol.documents import shown_text
from hami_core.servers.address import is_loopback, url_host

from .access import Gate, KubeReviews
from .app import make_app
from .page import build_page
from .reading import PageCache, Reading, from_api, from_file

log = logging.getLogger(__name__)


class Server(Protocol):
    """What ``KeepAliveServer`` and ``HttpsServer`` share."""

    @property
    def port(self) -> int: ...

    def run(self) -> None: ...

    def close(self) -> None: ...


def url_of(scheme: str, address: str, port: int) -> str:
    """The page's URL: an IPv6 address in brackets (RFC 3986 §3.2.2)."""
    return f"{scheme}://{url_host(address)}:{port}/"


def page_builder(o: UiOptions, manager: BackendManager) -> Callable[[], dict[str, Any]]:
    """Reads the cluster (and the Prometheus, if given) and builds the page."""
    read: Callable[[], Reading] = (
        from_file(o.snapshot, manager) if o.snapshot else from_api(o.kubeconfig, manager)
    )

    def build() -> dict[str, Any]:
        reading = read()
        usage, problem = None, None
        if o.prometheus:
            from hami_core.top.sources import usage_from_prometheus

            try:
                usage = usage_from_prometheus(o.prometheus, timeout_s=5.0)
            except HamiError as exc:  # the allocations are still worth showing
                problem = shown_text(str(exc), 300)
        return build_page(
            reading.read,
            manager,
            usage=usage,
            usage_problem=problem,
            quota_namespaces=reading.quota_namespaces,
            pending_limit=o.pending_limit,
            refresh_s=o.refresh,
        )

    return build


class UiServer:
    """The HTTP server and the page's background reader, closed together."""

    def __init__(self, server: Server, cache: PageCache) -> None:
        self._server, self._cache = server, cache

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return self._server.port

    def run(self) -> None:
        """Serve until ``close()`` (blocks)."""
        self._server.run()

    def close(self) -> None:
        """Stop serving and reading the cluster."""
        self._cache.close()
        self._server.close()


def make_server(o: UiOptions, manager: BackendManager) -> UiServer:
    """The bound, not yet serving, server of ``o``.

    Raises:
        ConfigError: a certificate without its key, or the reverse.
        HamiError: a token is required and no API server configuration is found.
        OSError: the address cannot be bound.
    """
    if bool(o.tls_cert_file) != bool(o.tls_private_key_file):
        raise ConfigError("--tls-cert-file and --tls-private-key-file go together")
    require = o.require_token or not is_loopback(o.address)
    try:
        reviews = KubeReviews(o.kubeconfig) if require else None
    except HamiError as exc:  # --snapshot needs no API server, but a token does
        why = "--require-token" if o.require_token else f"--address {o.address} is off loopback"
        raise HamiError(
            f"a bearer token is required ({why}) and checked by the API server (TokenReview): {exc}"
        ) from None
    gate = Gate(require_token=require, reviews=reviews)
    cache = PageCache(page_builder(o, manager), refresh_s=o.refresh)
    app = make_app(cache.get, gate)
    if o.tls_cert_file and o.tls_private_key_file:
        from hami_core.servers.https import make_https_server

        https = make_https_server(
            app,
            host=o.address,
            port=o.port,
            cert_file=o.tls_cert_file,
            key_file=o.tls_private_key_file,
        )
        return UiServer(https, cache)
    from hami_core.servers.keepalive import KeepAliveServer

    if require:
        log.warning(
            "serving on %s without TLS: bearer tokens cross the network in clear "
            "(give --tls-cert-file and --tls-private-key-file)",
            o.address,
        )
    plain = KeepAliveServer(app, host=o.address, port=o.port, max_connections=32, timeout_s=30.0)
    return UiServer(plain, cache)


def run_ui(o: UiOptions, manager: BackendManager, *, ready: threading.Event | None = None) -> None:
    """Serve the web view until interrupted (blocks)."""
    server = make_server(o, manager)
    scheme = "https" if o.tls_cert_file else "http"
    log.info(
        "hami ui on %s (%s)",
        url_of(scheme, o.address, server.port),
        "bearer token required" if o.require_token or not is_loopback(o.address) else "loopback",
    )
    if ready is not None:
        ready.set()
    try:
        server.run()
    finally:
        server.close()
