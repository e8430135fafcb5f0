"""Pods asking two vendors through a real kubelet (issue 24 item 1, HAMi#2335, HAMi#2105).

kubelet 1.20 + containerd, registered to the real kube-apiserver, with ``hami
scheduler`` behind kube-scheduler, ``hami webhook``, and two ``hami device-plugin``
processes on one node, as the chart runs them: NVIDIA on the stand-in NVML (2 GPUs) and
Kunlunxin (``--backend kunlun``) on a recorded ``xpu-smi`` output (8 P800 XPUs). Each
plugin answers kubelet's ``Allocate`` for its own resource only.

Proves, with nothing faked between the processes: a pod whose containers ask different
vendors, and a pod whose one container asks both, start; each container gets the
devices of each vendor it asks for and none of the other; ``bind-phase`` ends
``success`` only when both vendors are answered and the node lock is gone after it, so
the next pod binds on the node at once.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from tests.deviceplugin import fakenvml
from tests.e2e.controlplane import LOOPBACK, ControlPlane, free_port
from tests.e2e.hami_servers import HAMI, scheduler_argv, start_webhook
from tests.e2e.hami_stack import MANAGED
from tests.e2e.kubenode import (
    BUSYBOX_IMAGE,
    DEVICE_PLUGIN_DIR,
    KubeletNode,
    NodeUnavailable,
    ensure_node_packages,
)

pytestmark = pytest.mark.e2e

NODE = "hami-kubelet-mixed"
GPUS = [f"GPU-e2e1000{i}-aaaa-bbbb-cccc-0123456789ab" for i in range(2)]
XPU_SMI = Path(__file__).parents[1] / "backends" / "kunlun" / "samples" / "xpu-smi-p800-oam.txt"
SELECT = "hami-e2e-mixed"
KUNLUN = ["kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory", "kunlunxin.com/xpu"]
GPU = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}
XPU = {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "24576"}
NVIDIA_LIST = "hami.io/vgpu-devices-allocated"
XPU_LIST = "hami.io/xpu-devices-allocated"


class Mixed:
    """What the module's tests share: the node, our servers, a namespace."""

    def __init__(self, cp: ControlPlane, node: KubeletNode, work: Path) -> None:
        self.cp = cp
        self.node = node
        self.work = work
        self.core = client.CoreV1Api(cp.api_client())
        self.suffix = uuid.uuid4().hex[:6]
        self.namespace = f"mixed-{self.suffix}"

    def pod(self, name: str) -> dict[str, Any]:
        resp = self.core.read_namespaced_pod(name, self.namespace, _preload_content=False)
        return json.loads(resp.data)

    def create(self, name: str, *limits: dict[str, str]) -> None:
        containers = [
            {
                "name": f"c{i}",
                "image": BUSYBOX_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["/bin/sh", "-c", "env; exec sleep 3600"],
                "resources": {"limits": lim},
            }
            for i, lim in enumerate(limits)
        ]
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": containers},
        }
        for _ in range(40):  # the webhook's certificate may still be on its way
            try:
                self.core.create_namespaced_pod(self.namespace, body)
                return
            except ApiException as exc:
                if "connection refused" in (exc.body or "") or "x509" in (exc.body or ""):
                    time.sleep(0.5)
                    continue
                raise
        raise AssertionError(f"cannot create pod {name}: the webhook never answered")

    def wait_running(self, name: str, timeout: float = 180) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.pod(name)
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Failed":
                raise AssertionError(
                    f"pod {name} failed: {json.dumps(pod.get('status'))}\n"
                    f"{self.cp.format_logs(4000)}"
                )
            return pod if phase == "Running" else None

        return self.cp.wait_for(running, timeout=timeout, interval=0.5, message=f"{name} Running")

    def env_of(self, pod: dict[str, Any], container: str) -> dict[str, str]:
        meta = pod["metadata"]

        def logged() -> str | None:
            text = self.node.pod_log(meta["namespace"], meta["name"], meta["uid"], container)
            return text if "NVIDIA_VISIBLE_DEVICES=" in text else None

        text = self.cp.wait_for(logged, timeout=30, message=f"the env of {container}")
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def node_lock(self) -> str | None:
        return (self.node.node()["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def _device_plugin(mixed: Mixed, backend: str, config: Path, env: dict[str, str]) -> None:
    mixed.cp.start_process(
        f"device-plugin-{backend}",
        [
            HAMI,
            "device-plugin",
            "--backend",
            backend,
            "--node-name",
            NODE,
            "--kubeconfig",
            str(mixed.cp.kubeconfig_path),
            "--config",
            str(config),
            "--device-plugin-path",
            str(DEVICE_PLUGIN_DIR),
            "--state-dir",
            str(mixed.work / f"state-{backend}"),
            "--register-interval",
            "2",
            "--health-interval",
            "1",
            "--log-level",
            "debug",
        ],
        env={"PYTHONUNBUFFERED": "1", **env},
    )


def _start(mixed: Mixed) -> None:
    cp = mixed.cp
    port, metrics = free_port(), free_port()
    cp.start_process(
        "hami-scheduler",
        scheduler_argv(cp, port, metrics, "--no-leader-elect", "--bind-lock-wait", "30"),
        env={"PYTHONUNBUFFERED": "1"},
    )
    url = f"http://{LOOPBACK}:{port}"

    def ready() -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    cp.wait_for(ready, timeout=90, message="hami scheduler ready")
    cp.start_scheduler(extender_url=url, managed_resources=[*MANAGED, *KUNLUN], http_timeout="30s")
    start_webhook(
        cp,
        config_name=f"hami-webhook-{mixed.suffix}",
        secret_name=f"hami-webhook-tls-{mixed.suffix}",
        namespace_labels={SELECT: mixed.suffix},
        extra=("--trusted-user", "admin"),
    )
    lib = fakenvml.build(mixed.work / "fakenvml")
    nvml = mixed.work / "fake-nvml.json"
    nvml.write_text(
        json.dumps(
            {
                "devices": [
                    {"uuid": u, "name": "NVIDIA A100-PCIE-16GB", "memory_mib": 16384} for u in GPUS
                ]
            }
        )
    )
    config = mixed.work / "hami.yaml"
    config.write_text(
        f"version: v1\nnvidia:\n  hookPath: {mixed.work / 'vgpu'}\n"
        f"kunlun:\n  xpuSmiCommand: cat {XPU_SMI}\n"
    )
    _device_plugin(
        mixed, "nvidia", config, {"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_CONFIG": str(nvml)}
    )
    _device_plugin(mixed, "kunlun", config, {})
    cp.wait_for(
        lambda: (
            mixed.node.allocatable("nvidia.com/gpu") == "20"
            and int(mixed.node.allocatable("kunlunxin.com/vxpu") or 0) > 0
        ),
        timeout=90,
        message="nvidia.com/gpu and kunlunxin.com/vxpu allocatable on the node",
    )


@pytest.fixture(scope="module")
def mixed(control_plane: ControlPlane, kube_bin_dir: Path) -> Iterator[Mixed]:
    try:
        ensure_node_packages()
        node = KubeletNode(control_plane, kube_bin_dir, name=NODE)
    except NodeUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    work = Path(control_plane.workdir or "/tmp") / "kubelet-mixed-e2e"
    work.mkdir(parents=True, exist_ok=True)
    m = Mixed(control_plane, node, work)
    node.namespaces.add(m.namespace)
    before = set(DEVICE_PLUGIN_DIR.glob("*.sock")) if DEVICE_PLUGIN_DIR.is_dir() else set()
    try:
        try:
            node.start()
        except NodeUnavailable as exc:
            pytest.fail(str(exc), pytrace=False)
        m.core.create_namespace({"metadata": {"name": m.namespace, "labels": {SELECT: m.suffix}}})
        _start(m)
        yield m
    finally:
        for name in (
            "device-plugin-nvidia",
            "device-plugin-kunlun",
            "hami-webhook",
            "hami-scheduler",
        ):
            control_plane.stop_process(name)
        control_plane.stop_scheduler()
        with contextlib.suppress(ApiException):
            m.core.delete_collection_namespaced_pod(m.namespace, grace_period_seconds=0)
        node.stop()
        with contextlib.suppress(ApiException):
            control_plane.delete_node(NODE)
        left = node.leftovers()
        assert left == [], f"the node's cleanup left {left}"
        with contextlib.suppress(ApiException):
            client.AdmissionregistrationV1Api(
                control_plane.api_client()
            ).delete_mutating_webhook_configuration(f"hami-webhook-{m.suffix}")
        for sock in set(DEVICE_PLUGIN_DIR.glob("*.sock")) - before:
            if sock.name != "kubelet.sock":
                with contextlib.suppress(OSError):
                    sock.unlink()


def _devices(pod: dict[str, Any], key: str) -> list[list[str]]:
    return [[d.uuid for d in c] for c in decode_pod_devices(pod["metadata"]["annotations"][key])]


def test_containers_asking_different_vendors_start(mixed: Mixed):
    """HAMi#2335: NVIDIA in one container, Kunlunxin in the other."""
    mixed.create("two-containers", GPU, XPU)
    pod = mixed.wait_running("two-containers")

    assert pod["metadata"]["annotations"][keys.BIND_PHASE] == "success"
    assert mixed.node_lock() is None
    (gpu,), () = _devices(pod, NVIDIA_LIST)
    (), (xpu,) = _devices(pod, XPU_LIST)
    cuda_env, xpu_env = mixed.env_of(pod, "c0"), mixed.env_of(pod, "c1")
    assert cuda_env["NVIDIA_VISIBLE_DEVICES"] == gpu
    assert cuda_env.get("CXPU_VISIBLE_DEVICES", "none") == "none"  # no XPU of its own
    assert cuda_env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    assert xpu_env["NVIDIA_VISIBLE_DEVICES"] == "none"
    assert xpu_env["CXPU_VISIBLE_DEVICES"] not in ("", "none") and xpu.startswith("XPU-")
    assert xpu_env["CXPU_CONTAINER_MEMORY_LIMIT"] == str(24576 * 1024 * 1024)


def test_one_container_asking_two_vendors_starts(mixed: Mixed):
    """HAMi#2105: one container, both resources; then a second such pod binds on the
    same node at once (nothing left locked)."""
    for name in ("one-container", "one-container-2"):
        mixed.create(name, {**GPU, **XPU})
        pod = mixed.wait_running(name, timeout=120)
        assert pod["metadata"]["annotations"][keys.BIND_PHASE] == "success"
        assert mixed.node_lock() is None
        ((gpu,),) = _devices(pod, NVIDIA_LIST)
        env = mixed.env_of(pod, "c0")
        assert env["NVIDIA_VISIBLE_DEVICES"] == gpu
        assert env["CXPU_VISIBLE_DEVICES"] not in ("", "none")
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
        assert env["CXPU_CONTAINER_MEMORY_LIMIT"] == str(24576 * 1024 * 1024)


def test_each_plugin_answered_only_its_own_resource(mixed: Mixed):
    logs = mixed.cp.log_paths()
    for backend, other in (("nvidia", "kunlunxin.com"), ("kunlun", "nvidia.com")):
        text = logs[f"device-plugin-{backend}"].read_text(errors="replace")
        assert "Allocate [[" in text, backend
        assert f"registered {other}" not in text, backend
