"""A fake Kubernetes API server over a ``MemoryCluster``, for running the real
``hami device-plugin`` process (official client, real HTTP) in fast tests.

Serves only what the device plugin uses (``NodeKubeCluster``): get / merge-patch a
node, a JSON patch (``test`` + ``remove`` of an annotation) of a node, list nodes with
``fieldSelector=metadata.name=<node>``, get / merge-patch a pod, list pods with
``fieldSelector=spec.nodeName=<node>`` or ``spec.schedulerName=<name>`` (each selector
asked, list or watch, is recorded in ``pod_selectors``), get a namespace (every one exists; its labels are
the ``MemoryCluster``'s ``label_namespace``), list a namespace's pods with the same
selectors, list resource quotas (those in ``quotas``, none unless a test adds), create an
``events.k8s.io/v1`` Event. A node, pod or quota watch (``watch=true``, what an informer opens after its list) is held open without
events until its ``timeoutSeconds`` or ``stop()``, so the plugin's caches stay as first
listed and its live reads are exercised. Errors are ``Status`` objects with the codes the
API server uses (404, 409, 422). Every request is recorded in ``requests``.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from hami_core.cluster import MemoryCluster
from hami_core.errors import ConflictError, NotFoundError

_NODE = re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$")
_POD = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")
_PODS = re.compile(r"^/api/v1/pods$")
_NS_PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$")
_NODES = re.compile(r"^/api/v1/nodes$")
_NAMESPACE = re.compile(r"^/api/v1/namespaces/(?P<name>[^/]+)$")
_QUOTAS = re.compile(r"^/api/v1/resourcequotas$")
_EVENTS = re.compile(r"^/apis/events\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/events$")


class FakeApiServer:
    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        self.requests: list[tuple[str, str]] = []
        self.events: list[dict[str, Any]] = []
        self.pod_selectors: list[tuple[bool, str]] = []  # (watch, fieldSelector) per pod list
        self.quotas: list[dict[str, Any]] = []  # what a list of resource quotas answers
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_PATCH(self) -> None:
                server._handle(self, "PATCH")

            def do_POST(self) -> None:
                server._handle(self, "POST")

            def log_message(self, *args: object) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.server_address[1]}"

    def start(self) -> FakeApiServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self.http.shutdown()
        self.http.server_close()

    def write_kubeconfig(self, path: Path) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                    "current-context": "fake",
                }
            )
        )
        return path

    def count(self, method: str, path: str) -> int:
        with self._lock:
            return sum(1 for m, p in self.requests if m == method and p == path)

    # -- dispatch ----------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(h.path)
        with self._lock:
            self.requests.append((method, url.path))
        body: Any = None
        if method in ("PATCH", "POST"):
            raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
            body = json.loads(raw or b"{}")
        query = urllib.parse.parse_qs(url.query)
        watch = (query.get("watch") or [""])[0] == "true"
        listed = _PODS.match(url.path) or _NODES.match(url.path) or _QUOTAS.match(url.path)
        if method == "GET" and (_PODS.match(url.path) or _NS_PODS.match(url.path)):
            with self._lock:
                self.pod_selectors.append((watch, (query.get("fieldSelector") or [""])[0]))
        if method == "GET" and listed and watch:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.end_headers()
            self._stopping.wait(float((query.get("timeoutSeconds") or ["30"])[0]))
            return
        try:
            status, out = self._route(method, url.path, query, body)
        except NotFoundError as exc:
            status, out = 404, _status(404, "NotFound", str(exc))
        except ConflictError as exc:
            status, out = 409, _status(409, "Conflict", str(exc))
        data = json.dumps(out).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], body: Any
    ) -> tuple[int, Any]:
        if m := _NODE.match(path):
            name = m["name"]
            if method == "GET":
                return 200, self.cluster.get_node(name)
            if method == "PATCH" and isinstance(body, list):
                return self._json_patch_node(name, body)
            if method == "PATCH":
                meta = body.get("metadata") or {}
                return 200, self.cluster.patch_node_annotations(
                    name,
                    meta.get("annotations") or {},
                    resource_version=meta.get("resourceVersion"),
                )
        if m := _POD.match(path):
            ns, name = m["ns"], m["name"]
            if method == "GET":
                return 200, self.cluster.get_pod(ns, name)
            if method == "PATCH":
                meta = body.get("metadata") or {}
                return 200, self.cluster.patch_pod_metadata(
                    ns,
                    name,
                    annotations=meta.get("annotations"),
                    labels=meta.get("labels"),
                    resource_version=meta.get("resourceVersion"),
                )
        if _NODES.match(path) and method == "GET":
            selector = (query.get("fieldSelector") or [""])[0]
            wanted = selector.removeprefix("metadata.name=") if selector else None
            nodes = [
                n for n in self.cluster.list_nodes() if wanted in (None, n["metadata"]["name"])
            ]
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": nodes}
        if (m := _PODS.match(path) or _NS_PODS.match(path)) and method == "GET":
            selector = (query.get("fieldSelector") or [""])[0]
            field, _, value = selector.partition("=")
            if field not in ("", "spec.nodeName", "spec.schedulerName"):
                return 400, _status(400, "BadRequest", f"fake API server: field {field!r}")
            key = field.removeprefix("spec.")
            namespace = m.groupdict().get("ns")
            items = [
                p
                for p in self.cluster.list_pods(namespace=namespace)
                if not field or (p.get("spec") or {}).get(key) == value
            ]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        if (m := _NAMESPACE.match(path)) and method == "GET":
            labels = self.cluster.namespace_labels(m["name"])
            meta = {"name": m["name"], "labels": labels}
            return 200, {"kind": "Namespace", "apiVersion": "v1", "metadata": meta}
        if _QUOTAS.match(path) and method == "GET":
            return 200, {
                "kind": "ResourceQuotaList",
                "apiVersion": "v1",
                "metadata": {},
                "items": list(self.quotas),
            }
        if (m := _EVENTS.match(path)) and method == "POST":
            with self._lock:
                self.events.append(body)
            return 201, body
        return 404, _status(404, "NotFound", f"fake API server: no route for {method} {path}")

    def _json_patch_node(self, name: str, ops: list[dict[str, Any]]) -> tuple[int, Any]:
        """RFC 6902 on annotations: ``test`` then ``remove``, as the lock release sends."""
        ann = self.cluster.get_node(name)["metadata"].get("annotations") or {}
        changes: dict[str, str | None] = {}
        for op in ops:
            key = op["path"].removeprefix("/metadata/annotations/")
            key = key.replace("~1", "/").replace("~0", "~")
            if op["op"] == "test" and ann.get(key) != op.get("value"):
                return 422, _status(422, "Invalid", f"test failed for {op['path']}")
            if op["op"] == "remove":
                if key not in ann:
                    return 422, _status(422, "Invalid", f"no such path {op['path']}")
                changes[key] = None
        return 200, self.cluster.patch_node_annotations(name, changes)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
