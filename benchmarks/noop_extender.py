"""A no-op scheduler extender in its own process: the floor any extender pays.

kube-scheduler 1.20 calls an extender's ``/filter`` and ``/prioritize`` one pod at a time
in its scheduling cycle, and ``/bind`` beside it; whatever the extender does, each pod
costs kube-scheduler two HTTP round trips (JSON encode of the pod and node names, the
exchange, JSON decode) and the extender one Binding. This server does nothing else:
``/filter`` keeps every node named, ``/prioritize`` scores each 0, ``/bind`` writes the
Binding (``kubernetes`` client, as ``hami scheduler`` does). HTTP/1.1 keep-alive, one
thread per connection that answers what it reads, ``TCP_NODELAY``: the same transport as
``hami_core/servers/keepalive.py``. ``bench_pipeline.py --noop`` runs kube-scheduler
against it, so ``ours / no-op`` is the part of the pace an extender's own work sets, and
``no-op / alone`` the part it cannot change.

    python benchmarks/noop_extender.py --port P --kubeconfig FILE
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def filter_answer(args: dict[str, Any]) -> dict[str, Any]:
    """``ExtenderFilterResult`` keeping every node of ``ExtenderArgs`` (names or objects)."""
    names = args.get("NodeNames")
    if names is None:
        names = [n["metadata"]["name"] for n in (args.get("Nodes") or {}).get("items") or []]
    return {"NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""}


def prioritize_answer(args: dict[str, Any]) -> list[dict[str, Any]]:
    """``HostPriorityList``: every named node scores 0."""
    return [{"Host": n, "Score": 0} for n in args.get("NodeNames") or []]


def make_handler(bind: Any) -> type[BaseHTTPRequestHandler]:
    """The request handler; ``bind(args) -> ExtenderBindingResult``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
            )

        def do_GET(self) -> None:
            self._reply("ok")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            path = self.path.rstrip("/")
            if path == "/filter":
                self._reply(filter_answer(body))
            elif path == "/prioritize":
                self._reply(prioritize_answer(body))
            else:
                self._reply(bind(body))

    return Handler


def kube_binder(kubeconfig: str) -> Any:
    """``bind(args)`` writing the Binding through the ``kubernetes`` client."""
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(kubeconfig))

    def bind(args: dict[str, Any]) -> dict[str, str]:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": args["PodName"], "uid": args.get("PodUID")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": args["Node"]},
        }
        try:
            answer = api.create_namespaced_binding(
                args["PodNamespace"], body, _preload_content=False
            )
            answer.read()  # read to the end, so the connection goes back to the pool
            answer.release_conn()
        except Exception as exc:  # kube-scheduler retries the pod
            return {"Error": f"binding failed: {exc}"}
        return {"Error": ""}

    return bind


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--kubeconfig", required=True)
    args = ap.parse_args(argv)
    sys.setswitchinterval(0.0005)  # as hami scheduler: a request thread never waits 5 ms
    server = ThreadingHTTPServer((args.host, args.port), make_handler(kube_binder(args.kubeconfig)))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
