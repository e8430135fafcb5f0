"""The web view's HTTP face: a WSGI application with GET and HEAD routes only.

Routes: ``/`` (the page), ``/ui.js``, ``/ui.css`` (the assets shipped in the package,
``hami_core/ui/static``; no other origin is ever fetched), ``/api/view`` (the page's data
for this viewer, JSON, gzip when asked for), ``/healthz``. Any other method is answered
405 with ``Allow: GET, HEAD``; any other path 404. The page and its assets hold no data
of the cluster and need no token; ``/api/view`` is the viewer's (``access.Gate``).

Every answer forbids framing, sniffing and referrers; the Content-Security-Policy lets
the page load only its own script and style and talk only to this server, so markup a
tenant puts in a pod's name could not run even if the page failed to escape it.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

from hami_core.errors import HamiError
from hami_core.protocol.documents import shown_text

from .access import Gate, Refused, Viewer
from .page import for_viewer, page_namespaces

log = logging.getLogger(__name__)

#: The assets: path -> (file under static/, Content-Type).
ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/ui.js": ("ui.js", "text/javascript; charset=utf-8"),
    "/ui.css": ("ui.css", "text/css; charset=utf-8"),
}
METHODS = ("GET", "HEAD")
SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
]

StartResponse = Callable[..., Any]


def read_asset(name: str) -> bytes:
    """The bytes of ``static/<name>`` as shipped in the package."""
    return resources.files("hami_core.ui").joinpath("static", name).read_bytes()


def make_app(page: Callable[[], dict[str, Any]], gate: Gate) -> Callable[..., Iterable[bytes]]:
    """The WSGI application.

    Args:
        page: the page for a viewer who sees everything (``reading.PageCache.get``); may
            raise ``HamiError`` (answered 503 with its message).
        gate: decides each request's viewer.
    """
    assets = {path: (read_asset(name), kind) for path, (name, kind) in ASSETS.items()}
    encoded = _Encoded()

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "")
        path = environ.get("PATH_INFO", "") or "/"
        if path not in assets and path not in ("/api/view", "/healthz"):
            return _answer(start_response, method, 404, b"not found\n", "text/plain")
        if method not in METHODS:
            return _answer(
                start_response,
                method,
                405,
                b"read-only: GET and HEAD only\n",
                "text/plain",
                [("Allow", ", ".join(METHODS))],
            )
        if path == "/healthz":
            return _answer(start_response, method, 200, b"ok\n", "text/plain")
        if path in assets:
            body, kind = assets[path]
            return _answer(start_response, method, 200, body, kind)
        return _view(environ, start_response, method, page, gate, encoded)

    return app


class _Encoded:
    """The answers of the last page, by viewer (user, namespaces): JSON and its gzip.
    At a thousand nodes the page is megabytes; encoding it again for every poll of
    every viewer would cost more than drawing it."""

    MAX = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._page: object = None
        self._answers: dict[tuple[str | None, frozenset[str] | None], tuple[bytes, bytes]] = {}

    def get(self, full: dict[str, Any], viewer: Viewer) -> tuple[bytes, bytes]:
        key = (viewer.user.name if viewer.user else None, viewer.namespaces)
        with self._lock:
            if self._page is not full:
                self._page, self._answers = full, {}
            hit = self._answers.get(key)
        if hit is not None:
            return hit
        shown = for_viewer(full, user=key[0], namespaces=viewer.namespaces)
        body = json.dumps(shown, separators=(",", ":")).encode()
        answer = (body, gzip.compress(body, compresslevel=5))
        with self._lock:
            if self._page is full:
                if len(self._answers) >= self.MAX:
                    self._answers.clear()
                self._answers[key] = answer
        return answer


def _view(
    environ: dict[str, Any],
    start_response: StartResponse,
    method: str,
    page: Callable[[], dict[str, Any]],
    gate: Gate,
    encoded: _Encoded,
) -> Iterable[bytes]:
    try:
        full = page()
        viewer = gate.viewer(environ.get("HTTP_AUTHORIZATION"), page_namespaces(full))
    except Refused as exc:
        extra = [("WWW-Authenticate", 'Bearer realm="hami"')] if exc.status == 401 else []
        return _json(start_response, method, exc.status, {"error": str(exc)}, extra)
    except HamiError as exc:
        log.warning("cannot build the page: %s", exc)
        return _json(start_response, method, 503, {"error": shown_text(str(exc), 500)})
    body, zipped = encoded.get(full, viewer)
    headers = [("Vary", "Authorization, Accept-Encoding")]
    if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
        body = zipped
        headers.append(("Content-Encoding", "gzip"))
    return _answer(start_response, method, 200, body, "application/json", headers)


def _json(
    start_response: StartResponse,
    method: str,
    status: int,
    data: Any,
    headers: list[tuple[str, str]] | None = None,
) -> Iterable[bytes]:
    body = json.dumps(data).encode()
    return _answer(start_response, method, status, body, "application/json", headers)


_REASONS = {
    200: "OK",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    503: "Service Unavailable",
}


def _answer(
    start_response: StartResponse,
    method: str,
    status: int,
    body: bytes,
    kind: str,
    headers: list[tuple[str, str]] | None = None,
) -> Iterable[bytes]:
    """The answer; a HEAD's has the headers (Content-Length included) and no body."""
    start_response(
        f"{status} {_REASONS[status]}",
        [
            ("Content-Type", kind),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            *SECURITY_HEADERS,
            *(headers or []),
        ],
    )
    return [b""] if method == "HEAD" else [body]
