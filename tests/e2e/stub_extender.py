"""A minimal scheduler extender on the standard library, for proving the e2e harness.

It records every request body kube-scheduler sends. ``/filter`` keeps every node in
``NodeNames`` except those in ``deny`` (reported in ``FailedNodes``), ``/prioritize``
scores from ``scores`` (default 0), and ``/bind`` creates the Binding through the official
``kubernetes`` client. It is not the project's extender; that one lives in the package.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StubExtender:
    def __init__(self, api_client_factory: Callable[[], Any], host: str = "127.0.0.1") -> None:
        self._api_client_factory = api_client_factory
        self.requests: list[tuple[str, Any]] = []  # (path, parsed JSON body)
        self.deny: dict[str, str] = {}  # node -> reason
        self.scores: dict[str, int] = {}
        self.bind_errors: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> StubExtender:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="stub-extender", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> StubExtender:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def bodies(self, path: str) -> list[Any]:
        with self._lock:
            return [b for p, b in self.requests if p == path]

    # -- verbs -----------------------------------------------------------------------

    def filter(self, args: dict) -> dict:
        names = args.get("NodeNames")
        if names is None:  # full Nodes form (not nodeCacheCapable)
            names = [n["metadata"]["name"] for n in (args.get("Nodes") or {}).get("items", [])]
        ok = [n for n in names if n not in self.deny]
        failed = {n: self.deny[n] for n in names if n in self.deny}
        return {
            "NodeNames": ok,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }

    def prioritize(self, args: dict) -> list:
        names = args.get("NodeNames") or []
        return [{"Host": n, "Score": int(self.scores.get(n, 0))} for n in names]

    def bind(self, args: dict) -> dict:
        from kubernetes import client

        core = client.CoreV1Api(self._api_client_factory())
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name=args["PodName"], uid=args.get("PodUID")),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=args["Node"]),
        )
        try:
            # _preload_content=False: the API answers a Status, which the generated client
            # cannot deserialise into V1Binding.
            core.create_namespaced_binding(args["PodNamespace"], body, _preload_content=False)
        except Exception as e:  # report any failure to kube-scheduler
            self.bind_errors.append(str(e))
            return {"Error": f"binding failed: {e}"}
        return {"Error": ""}

    # -- HTTP ------------------------------------------------------------------------

    def _handler_class(self):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # keep test output quiet
                pass

            def _reply(self, code: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path in ("/healthz", "/readyz"):
                    self._reply(200, "ok")
                else:
                    self._reply(404, {"Error": f"no such path {self.path}"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"null")
                except ValueError as e:
                    self._reply(200, {"Error": f"bad JSON: {e}"})
                    return
                path = self.path.rstrip("/")
                with stub._lock:
                    stub.requests.append((path, body))
                if path == "/filter":
                    self._reply(200, stub.filter(body))
                elif path in ("/prioritize", "/score"):
                    self._reply(200, stub.prioritize(body))
                elif path == "/bind":
                    self._reply(200, stub.bind(body))
                else:
                    self._reply(404, {"Error": f"no such path {self.path}"})

        return Handler
