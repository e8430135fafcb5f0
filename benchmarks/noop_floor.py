"""``bench_pipeline.py --noop``: the floor any extender pays, and where each pod's CPU goes.

``start_noop`` runs a no-op extender in its own process (``noop_extender.py``, hami
scheduler's transport, or ``noop_extender.go``, Go's); kube-scheduler against it pays the
extender protocol's round trips and a Binding per pod and nothing else, so ``ours /
no-op`` is the part of the pace our extender's own work sets and ``no-op / alone`` the
part no extender can change. ``process_cpu`` reads each process's CPU time, so a phase's
CPU per pod is known by process (on a shared machine the pace follows it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pipeline_stack import _ok

from tests.e2e.controlplane import LOOPBACK, ControlPlane, free_port

HERE = Path(__file__).resolve().parent


def process_cpu(cp: ControlPlane, extra: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system, ``/proc/PID/stat``) each running process of the
    control plane and of ``extra`` (name -> pid) has used so far."""
    pids = {name: p.popen.pid for name, p in cp._procs.items() if p.alive()}
    pids.update(extra)
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / tick
    return out


def settle(
    cp: ControlPlane, extra: dict[str, int], *, idle_ms_per_s: float = 40.0, timeout_s: float = 30.0
) -> float:
    """Wait until the stack is idle: the processes of ``process_cpu`` together spend
    under ``idle_ms_per_s`` of CPU per second over half a second (the watches of every
    process have taken in the previous phase's deletions), at most ``timeout_s``.
    Each phase of a run starts so, so none pays for the one before it. Returns the
    seconds waited."""
    start = time.monotonic()
    before = sum(process_cpu(cp, extra).values())
    while time.monotonic() - start < timeout_s:
        time.sleep(0.5)
        now = sum(process_cpu(cp, extra).values())
        if (now - before) * 1000 < idle_ms_per_s * 0.5:
            break
        before = now
    return time.monotonic() - start


def cpu_per_pod(before: dict[str, float], after: dict[str, float], pods_n: int) -> str:
    """``name ms, ...``: CPU milliseconds per pod each process spent between two
    ``process_cpu`` readings (one started in between counts from 0), busiest first;
    idle ones left out."""
    spent = {n: (after[n] - before.get(n, 0.0)) * 1000 / pods_n for n in after}
    busy = sorted(((n, ms) for n, ms in spent.items() if ms >= 0.05), key=lambda x: -x[1])
    return ", ".join(f"{n} {ms:.1f}" for n, ms in busy) + f" (total {sum(spent.values()):.1f})"


def start_noop(cp: ControlPlane, language: str) -> str:
    """Start the no-op extender (``python`` or ``go``, built here with the ``go`` on
    PATH) as the control plane's process ``noop-extender``; its URL once it answers.

    Raises:
        SystemExit: ``go`` asked and no Go toolchain found.
    """
    assert cp.kubeconfig_path is not None and cp.workdir is not None
    port = free_port()
    if language == "go":
        go = shutil.which("go")
        if go is None:
            raise SystemExit("--noop go: no `go` on PATH (install Go, or use --noop python)")
        binary = cp.workdir / "noop-extender"
        subprocess.run(
            [go, "build", "-o", str(binary), str(HERE / "noop_extender.go")],
            check=True,
            env={
                **os.environ,
                "GO111MODULE": "off",
                "GOCACHE": str(cp.workdir / "gocache"),
                "GOPATH": str(cp.workdir / "gopath"),
            },
        )
        argv = [str(binary), "-addr", f"{LOOPBACK}:{port}", "-api", str(cp.api_url)]
        argv += ["-token", str(cp.token), "-ca", str(cp.ca_cert_path)]
    else:
        argv = [sys.executable, str(HERE / "noop_extender.py"), "--port", str(port)]
        argv += ["--kubeconfig", str(cp.kubeconfig_path)]
    cp.start_process(f"noop-extender-{language}", argv)
    url = f"http://{LOOPBACK}:{port}"
    cp.wait_for(lambda: _ok(f"{url}/healthz", b"ok"), timeout=60, message="no-op extender")
    return url
