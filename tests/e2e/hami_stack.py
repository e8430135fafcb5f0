"""Our servers around a real control plane: ``hami scheduler`` replicas (real processes,
real HTTP), a failover proxy in front of them (what a Service does), kube-scheduler
pointed at it, and a fake allocator that plays the device plugin's part for nodes
without kubelets (sets ``bind-phase`` and releases the node lock, PROTOCOL.md §3-4).
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from hami_core.cluster.kube import KubeCluster
from hami_core.deviceplugin.allocate import finish_allocation
from hami_core.protocol import annotations as keys
from tests.e2e.controlplane import LOOPBACK, ControlPlane, free_port
from tests.e2e.hami_servers import spawn_scheduler

MANAGED = [
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/cores",
    "nvidia.com/priority",
    # kube-scheduler calls the extender only for pods asking a managed resource
    "cambricon.com/vmlu",
    "cambricon.com/mlu.smlu.vmemory",
    "cambricon.com/mlu.smlu.vcore",
    "huawei.com/Ascend910B3",
    "huawei.com/Ascend910B3-memory",
]


class FailoverProxy:
    """Forwards each request to the first backend that answers (like a Service)."""

    def __init__(self, backends: list[str]) -> None:
        self.backends = backends
        self.port = free_port()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                for url in proxy.backends:
                    host, port = url.removeprefix("http://").split(":")
                    try:
                        conn = http.client.HTTPConnection(host, int(port), timeout=30)
                        conn.request("POST", self.path, body, {"Content-Type": "application/json"})
                        resp = conn.getresponse()
                        data = resp.read()
                    except OSError:
                        continue
                    self.send_response(resp.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_error(502, "no extender replica answers")

            def log_message(self, *args: object) -> None:
                return

        self.server = http.server.ThreadingHTTPServer((LOOPBACK, self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def close(self) -> None:
        self.server.shutdown()


class FakeAllocator:
    """Marks bound pods allocated and releases node locks, as the device plugin would."""

    def __init__(self, cp: ControlPlane) -> None:
        self.store = KubeCluster(cp.api_client(new=True), component="fake-allocator")
        self.store.start()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            for pod in self.store.list_pods():
                ann = pod["metadata"].get("annotations") or {}
                if ann.get(keys.BIND_PHASE) == keys.BIND_PHASE_ALLOCATING and (
                    pod.get("spec") or {}
                ).get("nodeName"):
                    with contextlib.suppress(Exception):  # retried on the next round
                        finish_allocation(
                            self.store, pod, node=pod["spec"]["nodeName"], success=True
                        )

    def stop(self) -> None:
        self._stop.set()
        self.store.stop()


class HamiStack:
    """Scheduler replicas + proxy + kube-scheduler + fake allocator on one control plane."""

    def __init__(self, cp: ControlPlane, workdir: Path) -> None:
        self.cp = cp
        self.workdir = workdir
        self.replicas: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
        self.proxy: FailoverProxy | None = None
        self.allocator: FakeAllocator | None = None
        #: replica name -> more ``hami scheduler`` flags for it (set before ``start``)
        self.extra_args: dict[str, tuple[str, ...]] = {}

    def start(self, replicas: tuple[str, ...] = ("hami-a", "hami-b")) -> HamiStack:
        for name in replicas:
            self.start_replica(name)
            self.wait_leader(name) if name == replicas[0] else None
        self.proxy = FailoverProxy([url for _, url in self.replicas.values()])
        self.cp.start_scheduler(extender_url=self.proxy.url, managed_resources=MANAGED)
        self.allocator = FakeAllocator(self.cp)
        return self

    def start_replica(self, name: str) -> None:
        proc, url, metrics = spawn_scheduler(
            self.cp,
            self.workdir / f"{name}.log",
            "--identity",
            name,
            "--lease-duration",
            "4",
            "--renew-deadline",
            "3",
            "--retry-period",
            "0.5",
            *self.extra_args.get(name, ()),
        )
        self.replicas[name] = (proc, url)
        self.metrics_ports = getattr(self, "metrics_ports", {})
        self.metrics_ports[name] = metrics
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"hami scheduler {name} exited: {self.log(name)}")
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"hami scheduler {name} not ready: {self.log(name)}")

    def leader(self, name: str) -> bool:
        _, url = self.replicas[name]
        try:
            with urllib.request.urlopen(f"{url}/-/leader", timeout=1) as r:
                import json

                return bool(json.loads(r.read())["leader"])
        except OSError:
            return False

    def wait_leader(self, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not self.leader(name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} never became leader: {self.log(name)}")
            time.sleep(0.2)

    def kill(self, name: str) -> None:
        proc, _ = self.replicas[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        if self.allocator:
            self.allocator.stop()
        self.cp.stop_scheduler()
        for proc, _ in self.replicas.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if self.proxy:
            self.proxy.close()
