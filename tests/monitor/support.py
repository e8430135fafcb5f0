"""Helpers of the monitor tests: containers whose region the real shim writes."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.shim.support import GPU0, GPU1, Build, Shim, read_until_ready

NODE = "node-1"


def pod(uid: str, name: str, *containers: str, namespace: str = "team-a") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"nodeName": NODE, "containers": [{"name": c} for c in containers]},
        "status": {"phase": "Running"},
    }


class Container:
    """A container as the device plugin lays it out: ``<root>/<uid>_<name>/vgpu.cache``."""

    def __init__(self, build: Build, root: Path, uid: str, name: str, tmp: Path) -> None:
        self.dir = root / f"{uid}_{name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.shim = Shim(build, tmp / f"{uid}_{name}")
        self.shim.region = self.dir / "vgpu.cache"
        self.shim.base["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = str(self.shim.region)

    def hold(self, *ops: str, **env: str | None) -> subprocess.Popen:
        """Start a probe that runs ``ops`` and then waits (holding its memory)."""
        proc = self.shim.popen("probe", *ops, "ready", "wait", env=self.shim.env(**env))
        lines = read_until_ready(proc)
        assert all(line.get("rc", 0) == 0 for line in lines), lines
        return proc


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``{metric name: [(labels, value), ...]}`` of a /metrics page (counters keep _total)."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def value(metrics: dict, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [
        v for lab, v in metrics.get(name, []) if all(lab.get(k) == x for k, x in labels.items())
    ]
    assert len(found) == 1, f"{name}{labels}: {found} in {metrics.get(name)}"
    return found[0]


class Served:
    """A WSGI app on a loopback port, served by the monitor's guarded server in a thread."""

    def __init__(self, app: Any) -> None:
        from hami_core.servers.metrics_http import create_guarded_server

        self.server = create_guarded_server(app, host="127.0.0.1", port=0, threads=2).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/metrics"

    def close(self) -> None:
        self.server.close()


__all__ = ["GPU0", "GPU1", "NODE", "Container", "Served", "pod", "scrape", "value"]
