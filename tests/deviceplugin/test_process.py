"""The real ``hami device-plugin`` process: the stand-in libnvidia-ml.so.1 through
LD_LIBRARY_PATH, the official Kubernetes client against a fake API server, and the
fake kubelet on unix sockets. Nothing in the process is replaced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.protocol import annotations as keys

from .conftest import BindPod, FakeGpus, ctr, gpu_pod, gpu_uuid, nvidia_manager
from .fake_apiserver import FakeApiServer
from .fake_kubelet import FakeKubelet

NODE = "node-a"
HAMI = str(Path(sys.executable).parent / "hami")


class PluginProcess:
    def __init__(self, popen: subprocess.Popen[str], log: Path) -> None:
        self.popen = popen
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def cpu_seconds(self) -> float:
        """CPU time the process has used (user + system, /proc/<pid>/stat, proc(5))."""
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                # the shutdown's own deadlines (gRPC grace, threads joined) take seconds;
                # a loaded machine stretches them: an exit by 60 s is a clean one
                self.popen.wait(60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode


@pytest.fixture
def cluster() -> MemoryCluster:
    c = MemoryCluster()
    c.add_node({"metadata": {"name": NODE}})
    return c


@pytest.fixture
def api(cluster: MemoryCluster) -> Iterator[FakeApiServer]:
    server = FakeApiServer(cluster).start()
    yield server
    server.stop()


@pytest.fixture
def launch(
    api: FakeApiServer, fake_gpus: FakeGpus, fake_nvml_dir: Path, short_dir: Path, tmp_path: Path
):
    started: list[PluginProcess] = []

    def start(*extra: str) -> PluginProcess:
        config = tmp_path / "hami.yaml"
        config.write_text(
            f"version: v1\nnvidia:\n  hookPath: {tmp_path / 'vgpu'}\n  healthRecoverySeconds: 1\n"
        )
        log = tmp_path / f"plugin-{len(started)}.log"
        popen = subprocess.Popen(
            [
                HAMI,
                "device-plugin",
                "--kubeconfig",
                str(api.write_kubeconfig(tmp_path / "kubeconfig")),
                "--config",
                str(config),
                "--device-plugin-path",
                str(short_dir),
                "--health-interval",
                "0.2",
                "--register-interval",
                "1",
                *extra,
            ],
            stdout=open(log, "w"),  # noqa: SIM115 (the process owns it)
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                **fake_gpus.env(fake_nvml_dir),
                "NODE_NAME": NODE,
                "PYTHONUNBUFFERED": "1",
            },
        )
        process = PluginProcess(popen, log)
        started.append(process)
        return process

    yield start
    for p in started:
        p.stop()


@pytest.fixture
def kubelet(short_dir: Path) -> Iterator[FakeKubelet]:
    k = FakeKubelet(short_dir).start()
    yield k
    k.stop()


def health_of(cluster: MemoryCluster) -> list[bool]:
    value = cluster.get_node(NODE)["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    return [d.get("health", False) for d in json.loads(value)]


def wait_for(ok, *, timeout: float = 15.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.05)


#: Deadlines of the plugin's reactions (a health poll every 0.2 s, a list to kubelet, an
#: annotation patch): they take well under a second on an idle machine; what is asserted
#: is that and in which order they happen, so the window allows for a loaded one.
REACT_S = 60.0


def registered(plugin: PluginProcess, kubelet: FakeKubelet, n: int, *, cpu_s: float = 30.0):  # type: ignore[no-untyped-def]
    """The ``n``-th registration with kubelet, within ``cpu_s`` of the plugin's own CPU
    time: its start (the interpreter importing grpc and the kubernetes client) is CPU
    bound, so on a loaded machine wall-clock seconds say nothing about it. Fails at once
    if the process exits, and after 300 s of wall clock if it hangs without using CPU."""
    start_cpu, deadline = plugin.cpu_seconds(), time.monotonic() + 300
    while len(kubelet.registrations) < n:
        assert plugin.popen.poll() is None, f"the plugin exited: {plugin.output()}"
        used = plugin.cpu_seconds() - start_cpu
        assert used < cpu_s, f"no registration #{n} after {used:.1f} s of the plugin's CPU"
        assert time.monotonic() < deadline, f"no registration #{n} in 300 s: {plugin.output()}"
        time.sleep(0.05)
    return kubelet.registrations[n - 1]


def healthy(n: int):  # type: ignore[no-untyped-def]
    return lambda seen: len(seen) == n and all(s.health == "Healthy" for s in seen)


def test_the_plugin_process_serves_kubelet_end_to_end(
    launch,
    kubelet: FakeKubelet,
    api: FakeApiServer,
    cluster: MemoryCluster,
    fake_gpus: FakeGpus,
    bound_pod: BindPod,
    tmp_path: Path,
):
    plugin = launch()
    request = registered(plugin, kubelet, 1)
    assert (request.resource_name, request.endpoint) == ("nvidia.com/gpu", "nvidia-gpu.sock")
    seen = kubelet.wait_list(healthy(20), timeout=REACT_S)
    assert {s.numa for s in seen if s.id.startswith(gpu_uuid(0))} == {(1,)}  # from sysfs

    # The inventory, as the scheduler reads it.
    ann = cluster.get_node(NODE)["metadata"]["annotations"]
    inventory = json.loads(ann["hami.io/node-nvidia-register"])
    assert [
        (d["id"], d["count"], d["devmem"], d["devcore"], d["type"], d.get("numa", 0), d["health"])
        for d in inventory
    ] == [
        (gpu_uuid(0), 10, 16384, 100, "NVIDIA A100-PCIE-16GB", 1, True),
        (gpu_uuid(1), 10, 16384, 100, "NVIDIA A100-PCIE-16GB", 0, True),
    ]
    assert ann["hami.io/node-handshake"].startswith("Reported_")

    # A pod bound by the scheduler gets its own limits.
    manager = nvidia_manager(tmp_path / "vgpu")
    pod = bound_pod(
        cluster, manager, gpu_pod("p", ctr("main", gpu=1, gpumem=3000, gpucores=30)), NODE
    )
    (answer,) = kubelet.allocate([f"{gpu_uuid(0)}-0"]).container_responses
    assert answer.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert answer.envs["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] in (gpu_uuid(0), gpu_uuid(1))
    assert (tmp_path / "vgpu" / "containers" / f"{pod['metadata']['uid']}_main").is_dir()
    # The lock and the phase go after kubelet has its answer: the lock in one conditional
    # write (test + remove), the progress and phase in one patch.
    wait_for(
        lambda: keys.NODE_LOCK not in cluster.get_node(NODE)["metadata"]["annotations"],
        timeout=REACT_S,
        what="the node lock released after Allocate",
    )
    wait_for(
        lambda: (
            cluster.get_pod("default", "p")["metadata"]["annotations"][keys.BIND_PHASE] == "success"
        ),
        timeout=REACT_S,
        what="bind-phase success after Allocate",
    )

    # An XID from NVML's event set: the whole list again, GPU 1 unhealthy (and kept so
    # while NVML does not find it by UUID); then recovery once it answers.
    fake_gpus.fail(1, "nvmlDeviceGetHandleByUUID", 15)
    fake_gpus.event(1, 79)
    kubelet.wait_list(
        lambda s: sum(x.health == "Unhealthy" for x in s) == 10, timeout=REACT_S, what="XID 79"
    )
    wait_for(
        lambda: health_of(cluster) == [True, False], timeout=REACT_S, what="unhealthy inventory"
    )
    fake_gpus.heal(1, "nvmlDeviceGetHandleByUUID")
    kubelet.wait_list(healthy(20), timeout=REACT_S, what="recovery")
    wait_for(
        lambda: health_of(cluster) == [True, True], timeout=REACT_S, what="recovered inventory"
    )

    # kubelet restarts: the plugin serves a new socket and registers again.
    kubelet.restart()
    registered(plugin, kubelet, 2)
    kubelet.wait_list(healthy(20), timeout=REACT_S)

    assert plugin.stop() == 0, plugin.output()
    assert not (kubelet.plugin_dir / "nvidia-gpu.sock").exists()
    log = plugin.output()
    assert "registration #2" in log


def test_a_quiet_node_gets_no_writes(launch, kubelet: FakeKubelet, api: FakeApiServer):
    plugin = launch()
    kubelet.wait_list(healthy(20))
    path = f"/api/v1/nodes/{NODE}"
    deadline = time.monotonic() + 10
    while api.count("GET", path) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)  # several --register-interval (1 s) rounds

    assert api.count("GET", path) >= 4, plugin.output()
    assert api.count("PATCH", path) == 1  # the first inventory + handshake only


def test_nvml_init_failure_exits_with_the_reason(launch, fake_gpus: FakeGpus, short_dir: Path):
    fake_gpus.fail(None, "nvmlInit", 9)

    plugin = launch()

    assert plugin.popen.wait(30) == 2
    out = plugin.output()
    assert (
        "error: nvmlInit failed: Driver Not Loaded: NVML does not initialise; is the NVIDIA "
        "driver loaded and libnvidia-ml.so.1 the one of that driver? (NVML error 9)"
    ) in out
    assert not (short_dir / "nvidia-gpu.sock").exists()


def test_without_fail_on_init_error_it_idles_unregistered(
    launch, fake_gpus: FakeGpus, kubelet: FakeKubelet
):
    fake_gpus.fail(None, "nvmlInit", 9)

    plugin = launch("--no-fail-on-init-error")
    wait_for(lambda: "idling without registering" in plugin.output(), timeout=30, what="idle log")
    time.sleep(1.5)  # more than one watch period of the kubelet socket

    assert plugin.popen.poll() is None, plugin.output()
    assert kubelet.registrations == []
    assert "nvmlInit failed: Driver Not Loaded" in plugin.output()
    assert plugin.stop() == 0


MIG_KEY = "hami.io/vgpu-mig-allocations"


def _instances(fake_gpus: FakeGpus, lib: Path, script: str) -> list[list[object]]:
    """Run ``script`` over the stand-in's NVML (``n``: a ``PynvmlLibrary``) and return
    GPU 0's instances as ``[start, MIG UUID]``."""
    body = (
        "import json\nfrom hami_nvidia.nvml import PynvmlLibrary\nn = PynvmlLibrary()\n"
        + script
        + "\nprint(json.dumps([[m.start, m.mig_uuid] for m in n.mig_instances(0)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", body],
        env={**os.environ, **fake_gpus.env(lib)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_restart_keeps_what_live_pods_hold_and_refuses_a_changed_strategy(
    launch, cluster: MemoryCluster, fake_gpus: FakeGpus, fake_nvml_dir: Path, tmp_path: Path
):
    # Dynamic MIG: a Running pod holds the 1g.10gb at slice 6 of GPU 0; the one at 5 is
    # a leftover. The restarted process reads the pods before its caches have listed (live),
    # so it frees the leftover only; restarted again with migstrategy single (the pod's
    # GPU would be published as its instances) it stops, naming the pod (MIG item 3).
    for d in fake_gpus.doc["devices"]:
        d.update(name="NVIDIA A100-SXM4-80GB", memory_mib=81920, mig=True)
    fake_gpus.write()
    made = _instances(
        fake_gpus,
        fake_nvml_dir,
        "n.create_mig_instance(0, 0, 6, 1)\nn.create_mig_instance(0, 0, 5, 1)",
    )
    held_uuid = next(u for s, u in made if s == 6)
    gpu0 = fake_gpus.uuid(0)
    p = gpu_pod("p", ctr("main", gpu=1, gpumem=8000))
    p["spec"]["nodeName"] = NODE
    p["metadata"]["annotations"] = {
        keys.VGPU_NODE: NODE,
        "hami.io/vgpu-devices-allocated": f"{gpu0},NVIDIA,9856,15:;",
        MIG_KEY: json.dumps([{
            "containerIndex": 0, "deviceIndex": 0, "gpuUUID": gpu0, "profile": "1g.10gb",
            "placement": {"start": 6, "size": 1}, "migUUID": held_uuid,
            "gpuInstanceID": 1, "computeInstanceID": 0,
        }]),
    }  # fmt: skip
    cluster.add_pod(p)
    cluster.set_pod_phase("default", "p", "Running")
    node_config = tmp_path / "node-config.json"
    node_config.write_text(json.dumps({"nodeconfig": [{"name": NODE, "operatingmode": "mig"}]}))

    plugin = launch("--node-config", str(node_config))
    wait_for(
        lambda: (
            "hami.io/node-nvidia-register"
            in (cluster.get_node(NODE)["metadata"].get("annotations") or {})
        ),
        timeout=30,
        what="inventory",
    )
    wait_for(lambda: "released MIG instance" in plugin.output(), timeout=30, what="release")
    assert _instances(fake_gpus, fake_nvml_dir, "") == [[6, held_uuid]], plugin.output()
    assert plugin.stop() == 0

    _instances(fake_gpus, fake_nvml_dir, "n.create_mig_instance(1, 0, 0, 1)")  # single needs one
    node_config.write_text(json.dumps({"nodeconfig": [{"name": NODE, "migstrategy": "single"}]}))
    before = cluster.get_node(NODE)["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    again = launch("--node-config", str(node_config))
    assert again.popen.wait(30) == 2, again.output()
    out = again.output()
    assert f"pod default/p holds {gpu0} (now published as its MIG instances {held_uuid})" in out
    assert (
        cluster.get_node(NODE)["metadata"]["annotations"]["hami.io/node-nvidia-register"] == before
    )
    assert _instances(fake_gpus, fake_nvml_dir, "") == [[6, held_uuid]]
