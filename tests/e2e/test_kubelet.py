"""The device plugin with a real kubelet: kubelet 1.20 + containerd + runc (Debian's
packages), registered to the real kube-apiserver, with ``hami scheduler`` behind
kube-scheduler, ``hami webhook`` and ``hami device-plugin`` on the stand-in NVML
(2 fake GPUs of 16384 MiB).

Proves, with nothing faked between the processes: the webhook routes the pod to our
scheduler; kubelet calls our ``Allocate``; the container starts and its environment
shows the limits and the GPU the annotation names; ``bind-phase`` ends ``success`` and
the node lock is gone; pods sharing the GPU get their own values, also when created
back to back; after a kubelet restart the plugin registers again, the node's
allocatable count comes back and new pods are still served.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hami_core.protocol import annotations as keys
from hami_core.protocol import decode_pod_devices
from hami_core.protocol.handshake import podresources_key
from tests.deviceplugin import fakenvml
from tests.e2e.controlplane import LOOPBACK, ControlPlane, free_port
from tests.e2e.hami_servers import HAMI, scheduler_argv, signing_keys, start_webhook
from tests.e2e.hami_stack import MANAGED
from tests.e2e.kubenode import (
    BUSYBOX_IMAGE,
    DEVICE_PLUGIN_DIR,
    KubeletNode,
    NodeUnavailable,
    ensure_node_packages,
    gpu_pod_body,
)

pytestmark = pytest.mark.e2e

NODE = "hami-kubelet-node"
GPUS = [f"GPU-e2e0000{i}-aaaa-bbbb-cccc-0123456789ab" for i in range(2)]
SELECT = "hami-e2e-kubelet"


class Stack:
    """What the module's tests share: the node, our three servers, a namespace."""

    def __init__(self, cp: ControlPlane, node: KubeletNode, work: Path) -> None:
        self.cp = cp
        self.node = node
        self.work = work
        self.core = client.CoreV1Api(cp.api_client())
        self.suffix = uuid.uuid4().hex[:6]
        self.namespace = f"kubelet-{self.suffix}"
        self.hook = work / "vgpu"

    def plugin_log(self) -> str:
        path = self.cp.log_paths().get("device-plugin")
        return path.read_text(errors="replace") if path else ""

    def pod(self, name: str) -> dict[str, Any]:
        resp = self.core.read_namespaced_pod(name, self.namespace, _preload_content=False)
        return json.loads(resp.data)

    def create_gpu_pod(
        self, name: str, *, gpumem: int, gpucores: int, gpu_uuid: str | None = None
    ) -> None:
        body = gpu_pod_body(name, gpumem=gpumem, gpucores=gpucores)
        if gpu_uuid:
            body["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": gpu_uuid}
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
        last: dict[str, Any] = {}

        def running() -> dict[str, Any] | None:
            pod = last["pod"] = self.pod(name)
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Failed":
                raise AssertionError(
                    f"pod {name} failed: {json.dumps(pod.get('status'))}\n{self.cp.format_logs(4000)}"
                )
            return pod if phase == "Running" else None

        try:
            return self.cp.wait_for(
                running, timeout=timeout, interval=0.5, message=f"pod {name} Running"
            )
        except TimeoutError as exc:
            # why it is not Running (e.g. PodScheduled False: "2/2 CardInsufficientCore"),
            # which the process logs below do not say
            status = json.dumps((last.get("pod") or {}).get("status"))
            raise TimeoutError(f"pod {name} not Running, its status: {status}\n{exc}") from None

    def env_of(self, pod: dict[str, Any]) -> dict[str, str]:
        meta = pod["metadata"]

        def logged() -> str | None:
            text = self.node.pod_log(meta["namespace"], meta["name"], meta["uid"], "main")
            return text if "NVIDIA_VISIBLE_DEVICES=" in text else None

        text = self.cp.wait_for(logged, timeout=30, message=f"the env of {meta['name']} in its log")
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def assigned_uuid(self, pod: dict[str, Any]) -> str:
        value = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
        return value.split(",", 1)[0]

    def node_lock(self) -> str | None:
        return (self.node.node()["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def _delete_and_wait(stack: Stack, *names: str, namespace: str | None = None) -> None:
    """Delete the pods and wait until the API no longer lists them: only then has the
    scheduler stopped counting their share of the node's GPUs."""
    ns = namespace or stack.namespace
    for name in names:
        with contextlib.suppress(ApiException):
            stack.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    stack.cp.wait_for(
        lambda: (
            not set(names) & {p.metadata.name for p in stack.core.list_namespaced_pod(ns).items}
        ),
        timeout=60,
        message=f"{', '.join(names)} gone",
    )


# The pod the first test places stays for the tests that read or patch it (until the MIG
# tests delete every pod); any other pod a test leaves on the node would keep its share
# and starve a later test's pod (issue 24: mps-own stayed Pending, "2/2
# CardInsufficientCore", behind gpu-b, gpu-c, gpu-d and mps-a).
SHARED_PODS = {"gpu-a"}


@pytest.fixture(autouse=True)
def no_pod_left_on_the_node(stack: Stack) -> Iterator[None]:
    """After each test: no pod of its own is left on the node."""
    yield
    left = sorted(
        f"{p.metadata.namespace}/{p.metadata.name}"
        for p in stack.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={NODE}"
        ).items
        if not (p.metadata.namespace == stack.namespace and p.metadata.name in SHARED_PODS)
    )
    assert left == [], f"the test left pods on the node, holding their share: {left}"


def _wait_http(cp: ControlPlane, url: str, name: str, context: Any = None) -> None:
    def ok() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:
                return r.status == 200
        except OSError:
            return False

    cp.wait_for(ok, timeout=90, message=f"{name} at {url}")


def _start_scheduler(cp: ControlPlane) -> None:
    port, metrics = free_port(), free_port()
    cp.start_process(
        "hami-scheduler",
        scheduler_argv(cp, port, metrics, "--no-leader-elect", "--bind-lock-wait", "30"),
        env={"PYTHONUNBUFFERED": "1"},
    )
    url = f"http://{LOOPBACK}:{port}"
    _wait_http(cp, f"{url}/readyz", "hami scheduler")
    cp.start_scheduler(extender_url=url, managed_resources=MANAGED, http_timeout="30s")


def _start_webhook(stack: Stack) -> None:
    start_webhook(
        stack.cp,
        config_name=f"hami-webhook-{stack.suffix}",
        secret_name=f"hami-webhook-tls-{stack.suffix}",
        namespace_labels={SELECT: stack.suffix},
        # UPDATE too, and pods/status: both can change annotations (issue #12 item 2).
        operations=("CREATE", "UPDATE"),
        resources=("pods", "pods/status"),
        # the e2e scheduler and device plugin write pods with the admin token
        extra=("--trusted-user", "admin"),
    )


def _start_device_plugin(
    stack: Stack, *, node_config: Path | None = None, extra: str = "", mig: bool = False
) -> subprocess.Popen:
    lib = fakenvml.build(stack.work / "fakenvml")
    nvml = stack.work / "fake-nvml.json"
    # MIG mode: the card whose profile table the stand-in serves (A100 80 GB: 7 x 1g.10gb),
    # so the instances' memory adds up to the card's as on the real one.
    name, memory = ("NVIDIA A100-SXM4-80GB", 81920) if mig else ("NVIDIA A100-PCIE-16GB", 16384)
    nvml.write_text(
        json.dumps(
            {"devices": [{"uuid": u, "name": name, "memory_mib": memory, "mig": mig} for u in GPUS]}
        )
    )
    config = stack.work / "hami.yaml"
    config.write_text(f"version: v1\nnvidia:\n  hookPath: {stack.hook}\n{extra}")
    more = ["--node-config", str(node_config)] if node_config else []
    return stack.cp.start_process(
        "device-plugin",
        [
            HAMI,
            "device-plugin",
            "--node-name",
            NODE,
            "--kubeconfig",
            str(stack.cp.kubeconfig_path),
            "--config",
            str(config),
            "--device-plugin-path",
            str(DEVICE_PLUGIN_DIR),
            # kubelet's PodResources (under its --root-dir): which pod an Allocate is for
            "--pod-resources-socket",
            str(stack.node.kubelet_root / "pod-resources" / "kubelet.sock"),
            "--register-interval",
            "2",
            "--health-interval",
            "1",
            "--log-level",
            "debug",
            # serves only what the scheduler signed (PROTOCOL.md §4a)
            "--allocation-public-keys",
            str(signing_keys(stack.cp)[1].parent),
            *more,
        ],
        env={
            "PYTHONUNBUFFERED": "1",
            "LD_LIBRARY_PATH": str(lib),
            "FAKE_NVML_CONFIG": str(nvml),
        },
    )


@pytest.fixture(scope="module")
def stack(control_plane: ControlPlane, kube_bin_dir: Path) -> Iterator[Stack]:
    try:
        ensure_node_packages()
        node = KubeletNode(control_plane, kube_bin_dir, name=NODE)
    except NodeUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    work = Path(control_plane.workdir or "/tmp") / "kubelet-e2e"
    work.mkdir(parents=True, exist_ok=True)
    s = Stack(control_plane, node, work)
    node.namespaces.add(s.namespace)
    try:
        try:
            node.start()
        except NodeUnavailable as exc:
            pytest.fail(str(exc), pytrace=False)
        s.core.create_namespace({"metadata": {"name": s.namespace, "labels": {SELECT: s.suffix}}})
        _start_scheduler(control_plane)
        _start_webhook(s)
        _start_device_plugin(s)
        control_plane.wait_for(
            lambda: node.allocatable("nvidia.com/gpu") == "20",
            timeout=90,
            message="nvidia.com/gpu allocatable 20 on the node",
        )
        yield s
    finally:
        for name in ("device-plugin", "hami-webhook", "hami-scheduler"):
            control_plane.stop_process(name)
        control_plane.stop_scheduler()
        with contextlib.suppress(ApiException):
            s.core.delete_collection_namespaced_pod(s.namespace, grace_period_seconds=0)
        node.stop()
        with contextlib.suppress(ApiException):
            control_plane.delete_node(NODE)
        left = node.leftovers()
        assert left == [], f"the node's cleanup left {left}"
        with contextlib.suppress(ApiException):
            client.AdmissionregistrationV1Api(
                control_plane.api_client()
            ).delete_mutating_webhook_configuration(f"hami-webhook-{s.suffix}")
        with contextlib.suppress(OSError):
            (DEVICE_PLUGIN_DIR / "nvidia-gpu.sock").unlink()


def test_a_pod_gets_its_limits_through_a_real_kubelet(stack: Stack):
    stack.create_gpu_pod("gpu-a", gpumem=3000, gpucores=30)
    pod = stack.wait_running("gpu-a")

    assert pod["spec"]["schedulerName"] == "hami-scheduler"  # the webhook's work
    assert pod["spec"]["nodeName"] == NODE
    ann = pod["metadata"]["annotations"]
    assert ann[keys.BIND_PHASE] == "success"
    assert stack.node_lock() is None
    uuid_a = stack.assigned_uuid(pod)
    assert uuid_a in GPUS
    env = stack.env_of(pod)
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuid_a
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/usr/local/vgpu/shared/vgpu.cache"
    assert (stack.hook / "containers" / f"{pod['metadata']['uid']}_main").is_dir()
    # ... and the same limits as the read-only file the shim prefers to the env
    limits = (stack.hook / "containers" / f"{pod['metadata']['uid']}_main.limits").read_text()
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n" in limits
    assert "Allocate [[" in stack.plugin_log()
    # the plugin told the pod by kubelet's PodResources: kubelet 1.20 lists the pod it is
    # admitting (before its containers have devices) during Allocate
    assert "PodResources (v1) lists" in stack.plugin_log()
    assert f"admitting: {stack.namespace}/gpu-a" in stack.plugin_log()
    # the device plugin installed the shim and the preload file that Allocate mounts
    from hami_nvidia.shim import library_path

    assert (stack.hook / "libvgpu.so").read_bytes() == library_path().read_bytes()
    assert (stack.hook / "ld.so.preload").read_text() == "/usr/local/vgpu/libvgpu.so\n"


def test_pods_on_the_same_gpu_get_their_own_values_back_to_back(stack: Stack):
    first = stack.assigned_uuid(stack.pod("gpu-a"))
    # Created back to back: the scheduler binds one while the other waits for the lock.
    stack.create_gpu_pod("gpu-b", gpumem=5000, gpucores=50, gpu_uuid=first)
    stack.create_gpu_pod("gpu-c", gpumem=2000, gpucores=20, gpu_uuid=first)
    try:
        got = {}
        for name in ("gpu-b", "gpu-c"):
            pod = stack.wait_running(name)
            assert pod["metadata"]["annotations"][keys.BIND_PHASE] == "success"
            env = stack.env_of(pod)
            got[name] = (
                env["NVIDIA_VISIBLE_DEVICES"],
                env["CUDA_DEVICE_MEMORY_LIMIT_0"],
                env["CUDA_DEVICE_SM_LIMIT"],
            )

        assert got == {"gpu-b": (first, "5000m", "50"), "gpu-c": (first, "2000m", "20")}
        assert stack.env_of(stack.pod("gpu-a"))["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
        assert stack.node_lock() is None
    finally:
        _delete_and_wait(stack, "gpu-b", "gpu-c")


class _Watched:
    """Every value of the node lock the node carried, and when each pod was first seen
    bound and first seen allocated, while in the ``with`` block (API watches)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.locks: list[str] = []
        self.bound: dict[str, float] = {}
        self.allocated: dict[str, float] = {}
        self._watches: list[Any] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> _Watched:
        from kubernetes import watch

        core = self.stack.core
        node_rv = core.read_node(NODE).metadata.resource_version
        pods_rv = core.list_namespaced_pod(self.stack.namespace).metadata.resource_version
        for target, kw, on in (
            (
                core.list_node,
                {"field_selector": f"metadata.name={NODE}", "resource_version": node_rv},
                self._node,
            ),
            (
                functools.partial(core.list_namespaced_pod, self.stack.namespace),
                {"resource_version": pods_rv},
                self._pod,
            ),
        ):
            w = watch.Watch()
            self._watches.append(w)

            def run(w: Any = w, target: Any = target, kw: Any = kw, on: Any = on) -> None:
                with contextlib.suppress(Exception):
                    for event in w.stream(target, timeout_seconds=300, **kw):
                        on(event["object"])

            t = threading.Thread(target=run, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _node(self, node: Any) -> None:
        value = (node.metadata.annotations or {}).get(keys.NODE_LOCK)
        if value:
            self.locks.append(value)

    def _pod(self, pod: Any) -> None:
        name, now = pod.metadata.name, time.monotonic()
        if pod.spec.node_name:
            self.bound.setdefault(name, now)
        if (pod.metadata.annotations or {}).get(keys.BIND_PHASE) == "success":
            self.allocated.setdefault(name, now)

    def __exit__(self, *exc: object) -> None:
        for w in self._watches:
            w.stop()


def test_two_pods_of_different_slices_bound_at_once_take_no_lock_and_get_their_own(
    stack: Stack,
):
    """Issue 26: the node's device plugin reads kubelet's PodResources and verifies
    allocation signatures, and says so beside its handshake answer; the scheduler then
    binds without the node lock, so two pods asking one GPU each, of different slices,
    are in flight on the node at once, and each gets its own slice (told apart by what
    kubelet lists while it admits each)."""
    claim = podresources_key("hami.io/node-handshake")

    def claimed() -> bool:
        ann = stack.node.node()["metadata"].get("annotations") or {}
        return bool(ann.get(claim)) and ann.get(claim) == ann.get("hami.io/node-handshake")

    stack.cp.wait_for(claimed, timeout=60, message=f"the node's {claim} claim")
    first = stack.assigned_uuid(stack.pod("gpu-a"))
    try:
        with _Watched(stack) as seen:
            stack.create_gpu_pod("lf-a", gpumem=4000, gpucores=40, gpu_uuid=first)
            stack.create_gpu_pod("lf-b", gpumem=2500, gpucores=10, gpu_uuid=first)
            pods = {name: stack.wait_running(name) for name in ("lf-a", "lf-b")}
        got = {}
        for name, pod in pods.items():
            env = stack.env_of(pod)
            got[name] = (
                env["NVIDIA_VISIBLE_DEVICES"],
                env["CUDA_DEVICE_MEMORY_LIMIT_0"],
                env["CUDA_DEVICE_SM_LIMIT"],
            )
            uid = pod["metadata"]["uid"]
            limits = (stack.hook / "containers" / f"{uid}_main.limits").read_text()
            assert f"CUDA_DEVICE_MEMORY_LIMIT_0={got[name][1]}\n" in limits  # its own region
            # no label PATCH either: the Binding was the bind's one write
            assert keys.VGPU_NODE not in (pod["metadata"].get("labels") or {})
        assert got == {"lf-a": (first, "4000m", "40"), "lf-b": (first, "2500m", "10")}
        assert seen.locks == [], f"a node lock was written: {seen.locks}"
        print(
            "bound at (s):",
            {n: round(t - min(seen.bound.values()), 3) for n, t in seen.bound.items()},
            "allocated at (s):",
            {n: round(t - min(seen.bound.values()), 3) for n, t in seen.allocated.items()},
        )
    finally:
        _delete_and_wait(stack, "lf-a", "lf-b")


def test_a_native_sidecar_on_kubelet_1_20_is_a_plain_init_container(stack: Stack):
    """Kubernetes 1.20 predates native sidecars (KEP-753, 1.28): kube-apiserver drops
    ``restartPolicy`` from an init container when it decodes the pod, before admission,
    so the webhook, the scheduler, the device plugin and kubelet all see a plain init
    container: it runs to completion before the app container starts, and the pod's
    device list has its (empty) entry first (docs/PROTOCOL.md §1, §3)."""
    first = stack.assigned_uuid(stack.pod("gpu-a"))
    other = next(g for g in GPUS if g != first)
    body = gpu_pod_body("sidecar", gpumem=8000, gpucores=0)
    body["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": other}
    side = {
        "name": "side",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "restartPolicy": "Always",  # a sidecar from 1.28 on
        "command": ["/bin/sh", "-c", "echo side-ran"],  # on 1.20 it must end for the app
    }
    body["spec"]["initContainers"] = [side]
    stack.core.create_namespaced_pod(stack.namespace, body)
    try:
        pod = stack.wait_running("sidecar")
        assert "restartPolicy" not in pod["spec"]["initContainers"][0]  # dropped by 1.20
        ann = pod["metadata"]["annotations"]
        assert ann[keys.BIND_PHASE] == "success" and stack.node_lock() is None
        entries = decode_pod_devices(ann["hami.io/vgpu-devices-allocated"])
        assert [[(d.uuid, d.memory_mib) for d in c] for c in entries] == [[], [(other, 8000)]]
        (status,) = pod["status"]["initContainerStatuses"]
        assert status["state"]["terminated"]["exitCode"] == 0
        env = stack.env_of(pod)
        assert (env["NVIDIA_VISIBLE_DEVICES"], env["CUDA_DEVICE_MEMORY_LIMIT_0"]) == (
            other,
            "8000m",
        )
    finally:
        _delete_and_wait(stack, "sidecar")


def test_kubelet_1_20_refuses_an_init_container_asking_for_gpu_memory(stack: Stack):
    """What 1.20 cannot run, sidecar or not: kubelet before 1.31 drops the extended
    resources the node does not advertise (``nvidia.com/gpumem``, ``gpucores``: only
    ``nvidia.com/gpu`` is a device-plugin resource) from app containers' requests only
    (``removeMissingExtendedResources``, kubernetes#124255, fixed by #124273), so a pod
    whose init container asks for them is refused at kubelet admission after it was
    placed. The placement is consistent (the init container's entry first) and leaves no
    node lock behind."""
    body = gpu_pod_body("gpu-init", gpumem=8000, gpucores=0)
    init = {**body["spec"]["containers"][0], "name": "init", "command": ["/bin/true"]}
    init["resources"] = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}}
    body["spec"]["initContainers"] = [init]
    stack.core.create_namespaced_pod(stack.namespace, body)
    try:

        def refused() -> dict[str, Any] | None:
            pod = stack.pod("gpu-init")
            return pod if (pod.get("status") or {}).get("phase") == "Failed" else None

        pod = stack.cp.wait_for(refused, timeout=120, message="kubelet refuses gpu-init")
        assert pod["status"]["reason"] == "OutOfnvidia.com/gpumem", pod["status"]
        # placed as a plain init container, its entry first (the device list kept for
        # accounting: the pod is finished, so it holds nothing now)
        entries = decode_pod_devices(
            pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
        )
        assert [[d.memory_mib for d in c] for c in entries] == [[2000], [8000]]
        stack.cp.wait_for(lambda: stack.node_lock() is None, timeout=60, message="no node lock")
    finally:
        _delete_and_wait(stack, "gpu-init")


def test_after_a_kubelet_restart_the_plugin_registers_again(stack: Stack):
    log = stack.plugin_log()
    before = log.count("registered nvidia.com/gpu")
    restarts = log.count("serving again and re-registering")

    stack.node.restart_kubelet()

    stack.cp.wait_for(
        lambda: stack.plugin_log().count("registered nvidia.com/gpu") > before,
        timeout=90,
        message="the device plugin's second registration",
    )
    # kubelet deleted our socket when it started: the plugin served a new one.
    assert stack.plugin_log().count("serving again and re-registering") > restarts
    assert (DEVICE_PLUGIN_DIR / "nvidia-gpu.sock").is_socket()
    stack.cp.wait_for(
        lambda: stack.node.allocatable("nvidia.com/gpu") == "20",
        timeout=90,
        message="nvidia.com/gpu allocatable 20 after the restart",
    )
    stack.node.wait_ready(60)
    stack.create_gpu_pod("gpu-d", gpumem=4000, gpucores=40)
    try:
        env = stack.env_of(stack.wait_running("gpu-d"))
        assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT"]) == ("4000m", "40")
    finally:
        _delete_and_wait(stack, "gpu-d")


def test_every_mount_of_the_node_is_in_its_scratch_dir(stack: Stack):
    # What lets the fixture's teardown (which then asserts ``leftovers() == []``) find
    # and undo every mount: none of containerd's or kubelet's lands elsewhere.
    scratch = str(stack.node.root.resolve())
    foreign = [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if ("/io.containerd." in line.split()[4] or "/kubelet/pods/" in line.split()[4])
        and not line.split()[4].startswith(scratch)
    ]
    assert foreign == []
    assert subprocess.run(["ip", "link", "show", "hamie2e0"], capture_output=True).returncode == 0


# -- the tenant who tries to raise its share (issue #12 items 1-2) ---------------------

TENANT = "alice"


@pytest.fixture(scope="module")
def tenant(stack: Stack) -> Iterator[client.CoreV1Api]:
    """The API as a tenant who may create and update pods in the namespace (RBAC), and
    nothing else: the admin impersonates ``alice``."""
    rbac = client.RbacAuthorizationV1Api(stack.cp.api_client())
    ns = stack.namespace
    rbac.create_namespaced_role(
        ns,
        {
            "metadata": {"name": "tenant"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "pods/status"],
                    "verbs": ["create", "get", "list", "update", "patch", "delete"],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "tenant"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}],
        },
    )
    api = stack.cp.api_client(new=True)
    api.set_default_header("Impersonate-User", TENANT)
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()


def _tenant_pod(name: str, *, env=None, annotations=None, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["sleep", "3600"],
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}},
    }
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [container], **spec},
    }


def _denied(call: Any) -> str:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status in (400, 403), err.value
    return str(err.value.body)


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_DEVICE_MEMORY_LIMIT_0": "16384m"},
        {"CUDA_DEVICE_SM_LIMIT": "100"},
        {"CUDA_DISABLE_CONTROL": "true"},
        {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"},
        {"HAMI_SHIM_RECONCILE_MS": "-1"},
    ],
    ids=["memory", "cores", "disable-control", "mps-share", "shim-knob"],
)
def test_a_tenant_cannot_set_the_shims_variables(stack: Stack, tenant, env):
    (name,) = env
    body = _denied(
        lambda: tenant.create_namespaced_pod(stack.namespace, _tenant_pod("raise", env=env))
    )
    assert f"env {name}" in body


def test_a_forged_pod_of_another_scheduler_is_denied(stack: Stack, tenant):
    forged = _tenant_pod(
        "forged",
        annotations={
            "hami.io/vgpu-devices-to-allocate": f"{GPUS[0]},NVIDIA,16384,100:;",
            "hami.io/bind-phase": "allocating",
            "hami.io/vgpu-node": NODE,
        },
        schedulerName="default-scheduler-of-someone",
        nodeName=NODE,
    )
    forged["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    body = _denied(lambda: tenant.create_namespaced_pod(stack.namespace, forged))
    assert "SchedulerOwnedAnnotation" in body or "written by the scheduler only" in body


def test_a_tenant_cannot_rewrite_or_delete_its_allocation(stack: Stack, tenant):
    pod = stack.pod("gpu-a")  # bound and running, from the first test
    assert pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    ns = stack.namespace
    rewrite = {
        "metadata": {"annotations": {"hami.io/vgpu-devices-allocated": f"{GPUS[0]},NVIDIA,1,0:;"}}
    }
    delete = {"metadata": {"annotations": {"hami.io/vgpu-devices-allocated": None}}}
    for patch in (rewrite, delete):
        _denied(lambda p=patch: tenant.patch_namespaced_pod("gpu-a", ns, p))
        _denied(lambda p=patch: tenant.patch_namespaced_pod_status("gpu-a", ns, p))
    # Other changes of its own pod are fine.
    tenant.patch_namespaced_pod("gpu-a", ns, {"metadata": {"labels": {"team": "a"}}})
    after = stack.pod("gpu-a")["metadata"]
    assert (
        after["annotations"]["hami.io/vgpu-devices-allocated"]
        == (pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"])
    )
    assert after["labels"]["team"] == "a"


def test_env_from_a_config_map_carrying_the_shims_variables_is_denied(stack: Stack, tenant):
    """The ConfigMap's keys cannot be read at admission (and may change later)."""
    ns = stack.namespace
    stack.core.create_namespaced_config_map(
        ns, {"metadata": {"name": "raise"}, "data": {"CUDA_DEVICE_MEMORY_LIMIT_0": "16384m"}}
    )
    pod = _tenant_pod("env-from")
    pod["spec"]["containers"][0]["envFrom"] = [{"configMapRef": {"name": "raise"}}]
    body = _denied(lambda: tenant.create_namespaced_pod(ns, pod))
    assert "envFrom[0]" in body and "configMapRef" in body
    pod["spec"]["containers"][0]["envFrom"] = [{"secretRef": {"name": "x"}, "prefix": "CUDA_"}]
    assert "envFrom[0]" in _denied(lambda: tenant.create_namespaced_pod(ns, pod))


def test_forged_annotations_are_denied_on_any_pod_on_create_and_update(stack: Stack, tenant):
    """A non-GPU pod's forged -allocated (it would make a GPU look full), the same added by
    an UPDATE, a preset nodeName, and the object label that exempts only non-GPU pods."""
    ns = stack.namespace
    forged = {"hami.io/vgpu-devices-allocated": f"{GPUS[1]},NVIDIA,16384,100:;"}
    idle: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "idle", "annotations": forged},
        # no scheduler runs by that name: the pod stays Pending, never on the node
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]},
    }
    assert "SchedulerOwnedAnnotation" in _denied(lambda: tenant.create_namespaced_pod(ns, idle))
    idle["metadata"]["annotations"] = {}
    idle["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    tenant.create_namespaced_pod(ns, idle)  # a non-GPU pod may be left alone
    for patch in (
        {"metadata": {"annotations": forged}},
        {"metadata": {"annotations": {"hami.io/bind-phase": "allocating"}}},
        {"metadata": {"annotations": {"hami.io/vgpu-node": NODE}}},
    ):
        _denied(lambda p=patch: tenant.patch_namespaced_pod("idle", ns, p))
        _denied(lambda p=patch: tenant.patch_namespaced_pod_status("idle", ns, p))
    assert not stack.pod("idle")["metadata"].get("annotations")
    preset = _tenant_pod("preset", nodeName=NODE)
    assert "NodeNamePreset" in _denied(lambda: tenant.create_namespaced_pod(ns, preset))
    labelled = _tenant_pod("labelled", schedulerName="default-scheduler")
    labelled["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    labelled["spec"]["containers"][0]["env"] = [
        {"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "16384m"}
    ]
    assert "ProtectedEnv" in _denied(lambda: tenant.create_namespaced_pod(ns, labelled))


def test_a_forged_pod_past_the_webhook_gets_no_device_from_the_real_kubelet(stack: Stack):
    """As if the webhook were down (failurePolicy Ignore) or the namespace exempt: a pod
    with a preset nodeName and a forged allocation for a whole GPU reaches kubelet, which
    calls our Allocate; no valid node lock names it, so it gets nothing and fails."""
    ns = f"outside-{stack.suffix}"  # not selected by the webhook configuration
    stack.core.create_namespace({"metadata": {"name": ns}})
    stack.node.namespaces.add(ns)
    forged = _tenant_pod(
        "squatter",
        annotations={
            "hami.io/vgpu-devices-to-allocate": f"{GPUS[0]},NVIDIA,16384,100:;",
            "hami.io/vgpu-devices-allocated": f"{GPUS[0]},NVIDIA,16384,100:;",
            "hami.io/bind-phase": "allocating",
            "hami.io/vgpu-node": NODE,
            "hami.io/bind-time": str(int(time.time())),
        },
        schedulerName="hami-scheduler",
        nodeName=NODE,
    )
    forged["spec"]["containers"][0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    stack.core.create_namespaced_pod(ns, forged)

    def failed() -> dict[str, Any] | None:
        resp = stack.core.read_namespaced_pod("squatter", ns, _preload_content=False)
        pod = json.loads(resp.data)
        return pod if (pod.get("status") or {}).get("phase") == "Failed" else None

    pod = stack.cp.wait_for(failed, timeout=90, interval=0.5, message="squatter Failed")
    assert pod["status"]["reason"] == "UnexpectedAdmissionError", pod["status"]
    assert "squatter" in stack.plugin_log() or "lock" in pod["status"].get("message", "")
    assert stack.node_lock() is None
    _delete_and_wait(stack, "squatter", namespace=ns)


def test_a_forged_or_replayed_signed_allocation_gets_no_device_even_under_the_lock(
    stack: Stack,
):
    """The signature, not the lock, is the trust anchor (PROTOCOL.md §4a; issue 26's
    attack row). Past the webhook (a namespace it does not select), with the node lock
    naming the pod (as when a tenant rewrites its own bound pod before kubelet admits
    it), a pod signed with the tenant's own key and a pod carrying a copy of another
    pod's signed annotations each reach kubelet, which calls our Allocate: refused, the
    pod fails admission, its lock is released; the pod the scheduler bound is served."""
    from hami_core.protocol.lock import encode_lock
    from hami_core.protocol.signature import AllocationSigner, generate_private_key_pem

    stack.create_gpu_pod("signed-src", gpumem=2000, gpucores=10)
    ns = f"unsigned-{stack.suffix}"  # not selected by the webhook configuration
    stack.core.create_namespace({"metadata": {"name": ns}})
    stack.node.namespaces.add(ns)
    try:
        src = stack.wait_running("signed-src")  # the scheduler's own: served
        assert keys.ALLOCATION_SIGNATURE in src["metadata"]["annotations"]
        copied = {
            k: v
            for k, v in src["metadata"]["annotations"].items()
            if k.startswith("hami.io/") and k != keys.BIND_PHASE
        }
        copied["hami.io/vgpu-devices-to-allocate"] = copied["hami.io/vgpu-devices-allocated"]
        copied[keys.BIND_PHASE] = "allocating"
        now = str(int(time.time()))
        whole = f"{GPUS[0]},NVIDIA,16384,100:;"
        forged = {
            "hami.io/vgpu-devices-to-allocate": whole,
            "hami.io/vgpu-devices-allocated": whole,
            keys.BIND_PHASE: "allocating",
            keys.VGPU_NODE: NODE,
            keys.BIND_TIME: now,
        }
        attacker = AllocationSigner(generate_private_key_pem())
        identity = {"metadata": {"uid": "", "namespace": ns, "name": "self-signed"}}
        forged[keys.ALLOCATION_SIGNATURE] = attacker.sign(
            identity, node=NODE, annotations=forged, unsigned=["hami.io/vgpu-devices-to-allocate"]
        )
        cases = [
            ("self-signed", forged, now, f"signed with key {attacker.key_id}"),
            ("replay", copied, copied[keys.BIND_TIME], "copied from another pod"),
        ]
        for name, annotations, stamp, why in cases:
            lock = encode_lock(dt.datetime.fromtimestamp(int(stamp), dt.UTC), ns, name)
            stack.core.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: lock}}})
            body = _tenant_pod(name, annotations=annotations, schedulerName="hami-scheduler")
            body["spec"]["nodeName"] = NODE
            stack.core.create_namespaced_pod(ns, body)

            def failed(name: str = name) -> dict[str, Any] | None:
                resp = stack.core.read_namespaced_pod(name, ns, _preload_content=False)
                pod = json.loads(resp.data)
                return pod if (pod.get("status") or {}).get("phase") == "Failed" else None

            pod = stack.cp.wait_for(failed, timeout=90, interval=0.5, message=f"{name} Failed")
            assert pod["status"]["reason"] == "UnexpectedAdmissionError", pod["status"]
            assert why in stack.plugin_log(), stack.plugin_log()[-3000:]
            stack.cp.wait_for(
                lambda: stack.node_lock() is None, timeout=30, message="the lock released"
            )
            events = stack.core.list_namespaced_event(
                ns, field_selector=f"involvedObject.name={name},reason=AllocationRefused"
            ).items
            assert events and why in events[0].message
        # the node is not blocked: the scheduler's next pod is served
        stack.create_gpu_pod("after", gpumem=1000, gpucores=10)
        env = stack.env_of(stack.wait_running("after"))
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    finally:
        _delete_and_wait(stack, "self-signed", "replay", namespace=ns)
        _delete_and_wait(stack, "signed-src", "after")


def test_a_volume_over_the_limits_file_is_denied_and_past_the_webhook_would_cover_it(
    stack: Stack, tenant
):
    """A ConfigMap mounted at the shim's limits file: the webhook denies it. Why: past the
    webhook (a namespace it does not select, our scheduler still placing the pod) the real
    kubelet and containerd mount the pod's file over the one the device plugin mounted,
    and the shim would read the tenant's limits."""
    forged_limits = "CUDA_DEVICE_MEMORY_LIMIT_0=16384m\n"

    def covering(name: str) -> dict[str, Any]:
        pod = _tenant_pod(name, schedulerName="hami-scheduler")
        main = pod["spec"]["containers"][0]
        main["command"] = ["/bin/sh", "-c", "cat /usr/local/vgpu/limits; exec sleep 3600"]
        main["volumeMounts"] = [
            {"name": "mine", "mountPath": "/usr/local/vgpu/limits", "subPath": "limits"}
        ]
        pod["spec"]["volumes"] = [{"name": "mine", "configMap": {"name": "my-limits"}}]
        return pod

    cm = {"metadata": {"name": "my-limits"}, "data": {"limits": forged_limits}}
    stack.core.create_namespaced_config_map(stack.namespace, cm)
    body = _denied(lambda: tenant.create_namespaced_pod(stack.namespace, covering("cover")))
    assert "volumeMounts[0].mountPath '/usr/local/vgpu/limits'" in body

    ns = f"unreviewed-{stack.suffix}"  # not selected by the webhook configuration
    stack.core.create_namespace({"metadata": {"name": ns}})
    stack.node.namespaces.add(ns)
    stack.core.create_namespaced_config_map(ns, cm)
    stack.core.create_namespaced_pod(ns, covering("cover"))

    def logged() -> tuple[dict[str, Any], str] | None:
        resp = stack.core.read_namespaced_pod("cover", ns, _preload_content=False)
        pod = json.loads(resp.data)
        if (pod.get("status") or {}).get("phase") != "Running":
            return None
        text = stack.node.pod_log(ns, "cover", pod["metadata"]["uid"], "main")
        return (pod, text) if text else None

    pod, text = stack.cp.wait_for(logged, timeout=120, interval=0.5, message="cover's log")
    served = (stack.hook / "containers" / f"{pod['metadata']['uid']}_main.limits").read_text()
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=3000m" in served  # what the device plugin wrote
    assert text.strip() == forged_limits.strip()  # what the container sees there
    _delete_and_wait(stack, "cover", namespace=ns)


def test_a_tenant_can_write_its_region_but_not_fill_the_hosts_disk(stack: Stack):
    """Issue 24 item 16 (d), through real containerd and runc: the region's directory is
    read-only in the container and only the region file, which the device plugin made
    at the region's size, is writable over it (a file mount inside a read-only
    directory mount)."""
    shared = "/usr/local/vgpu/shared"
    script = (
        f"(echo x > {shared}/fill && echo NEW_FILE=yes) || echo NEW_FILE=no; "
        f"(mkdir {shared}/d && echo NEW_DIR=yes) || echo NEW_DIR=no; "
        f"(printf hello | dd of={shared}/vgpu.cache conv=notrunc 2>/dev/null "
        "&& echo REGION_WRITE=yes) || echo REGION_WRITE=no; env; exec sleep 3600"
    )
    body = _tenant_pod("disk-fill")
    body["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", script]
    stack.core.create_namespaced_pod(stack.namespace, body)
    pod = stack.wait_running("disk-fill")
    env = stack.env_of(pod)
    assert (env["NEW_FILE"], env["NEW_DIR"], env["REGION_WRITE"]) == ("no", "no", "yes")
    host = stack.hook / "containers" / f"{pod['metadata']['uid']}_main"
    assert sorted(p.name for p in host.iterdir()) == ["vgpu.cache"]
    from hami_nvidia.shared_region import FILE_SIZE

    region = host / "vgpu.cache"
    assert region.stat().st_size == FILE_SIZE and region.read_bytes()[:5] == b"hello"
    _delete_and_wait(stack, "disk-fill")


# -- MPS mode (issue #17 item 3): last, it restarts the device plugin in MPS mode ------


def test_priority_boards_reach_containers_read_only_and_only_high_gets_its_entry(stack: Stack):
    """Task priority through a real kubelet (issue #17 item 5): on one GPU, the
    priority-0 container writes its beat into its own entry; the priority-1 container
    sees that beat on the GPU's board but cannot write there, and has no entry."""
    board = "/usr/local/vgpu/priority/$NVIDIA_VISIBLE_DEVICES"
    high_script = (
        "echo 12345678 > /usr/local/vgpu/priority-beat/$NVIDIA_VISIBLE_DEVICES/beat "
        "&& echo HIGH_WROTE=yes || echo HIGH_WROTE=no; env; exec sleep 3600"
    )
    low_script = (
        f"sleep 2; echo LOW_SEES=$(cat {board}/*/beat); "
        f"(touch {board}/forged && echo LOW_WROTE=yes) || echo LOW_WROTE=no; "
        "echo LOW_ENTRY=$(ls /usr/local/vgpu/priority-beat 2>/dev/null || echo none); "
        "env; exec sleep 3600"
    )
    uuid = ""
    for name, prio, script in (("prio-high", "0", high_script), ("prio-low", "1", low_script)):
        # the low one on the high one's GPU, wherever earlier tests left room
        body = _tenant_pod(name, annotations={"nvidia.com/use-gpuuuid": uuid} if uuid else {})
        main = body["spec"]["containers"][0]
        main["command"] = ["/bin/sh", "-c", script]
        main["resources"]["limits"]["nvidia.com/priority"] = prio
        main["resources"]["limits"]["nvidia.com/gpumem"] = "1000"
        stack.core.create_namespaced_pod(stack.namespace, body)
        uuid = stack.assigned_uuid(stack.wait_running(name))
    high = stack.env_of(stack.pod("prio-high"))
    low = stack.env_of(stack.pod("prio-low"))
    assert high["HIGH_WROTE"] == "yes"
    assert low["LOW_SEES"] == "12345678"
    assert low["LOW_WROTE"] == "no", "the board is read-only for everyone"
    assert low["LOW_ENTRY"] == "none"
    uid = stack.pod("prio-high")["metadata"]["uid"]
    assert (stack.hook / "priority" / uuid / f"{uid}_main" / "beat").read_text() == "12345678\n"
    _delete_and_wait(stack, "prio-high", "prio-low")


def test_an_mps_node_gives_the_mps_env_and_pipe_mount_through_a_real_kubelet(stack: Stack):
    pipe = stack.work / "mps-pipe"
    pipe.mkdir(exist_ok=True)
    (pipe / "control").write_text("")  # where the node's MPS control daemon would listen
    node_config = stack.work / "node-config.json"
    node_config.write_text(json.dumps({"nodeconfig": [{"name": NODE, "operatingmode": "mps"}]}))
    registered = stack.plugin_log().count("registered nvidia.com/gpu")
    stack.cp.stop_process("device-plugin")
    _start_device_plugin(stack, node_config=node_config, extra=f"  mpsPipeDirectory: {pipe}\n")

    def inventory_in_mps() -> bool:
        ann = stack.node.node()["metadata"].get("annotations") or {}
        devices = json.loads(ann.get("hami.io/node-nvidia-register") or "[]")
        return bool(devices) and all(d.get("mode") == "mps" for d in devices)

    stack.cp.wait_for(inventory_in_mps, timeout=60, message="the inventory in mps mode")
    # allocatable still says 20 from the plugin before (kubelet keeps a stopped plugin's
    # devices a while): a pod admitted before the new one registers is refused
    # "Requested: 1, Available: 0", so wait for its registration first
    stack.cp.wait_for(
        lambda: stack.plugin_log().count("registered nvidia.com/gpu") > registered,
        timeout=90,
        message="the plugin registered again",
    )
    stack.cp.wait_for(
        lambda: stack.node.allocatable("nvidia.com/gpu") == "20",
        timeout=90,
        message="nvidia.com/gpu allocatable 20 again",
    )
    script = (
        "env; echo MPS_PIPE_LS=$(ls /tmp/nvidia-mps); "
        "echo PRELOAD=$(cat /etc/ld.so.preload 2>/dev/null || echo none); exec sleep 3600"
    )
    body = _tenant_pod("mps-a", annotations={"nvidia.com/vgpu-mode": "mps"})
    main = body["spec"]["containers"][0]
    main["command"] = ["/bin/sh", "-c", script]
    main["resources"]["limits"]["nvidia.com/gpucores"] = "40"
    stack.core.create_namespaced_pod(stack.namespace, body)
    try:
        pod = stack.wait_running("mps-a")

        assert pod["metadata"]["annotations"][keys.BIND_PHASE] == "success"
        env = stack.env_of(pod)
        assert env["NVIDIA_VISIBLE_DEVICES"] == stack.assigned_uuid(pod)
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "40"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3000M"
        assert env["MPS_PIPE_LS"] == "control"  # the host's pipe directory is mounted
        assert env["PRELOAD"] == "none"  # and the shim is not preloaded
        assert not any(k.startswith("CUDA_DEVICE_") for k in env)
        limits = stack.hook / "containers" / f"{pod['metadata']['uid']}_main.limits"
        assert not limits.exists()
    finally:
        _delete_and_wait(stack, "mps-a")


def test_per_container_mps_holds_the_share_in_the_containers_own_daemon(stack: Stack):
    """mpsIsolation: per-container (issue 24 item 15) through a real kubelet: Allocate
    starts the container's control daemon (the stand-in, tests/deviceplugin/mps_standin)
    with its share as server defaults, kubelet mounts that daemon's directory at
    /tmp/nvidia-mps, and a client without any MPS variable still gets the share."""
    from hami_nvidia import mps

    standin = Path(__file__).resolve().parents[1] / "deviceplugin" / "mps_standin"
    control = str(standin / "nvidia-cuda-mps-control")
    root = Path(tempfile.mkdtemp(prefix="mpse", dir="/tmp"))  # a socket path is short
    node_config = stack.work / "node-config.json"
    node_config.write_text(json.dumps({"nodeconfig": [{"name": NODE, "operatingmode": "mps"}]}))
    registered = stack.plugin_log().count("registered nvidia.com/gpu")
    stack.cp.stop_process("device-plugin")
    _start_device_plugin(
        stack,
        node_config=node_config,
        extra=(
            f"  mpsPipeDirectory: {root}\n  mpsIsolation: per-container\n"
            f"  mpsControlBinary: {control}\n"
        ),
    )
    stack.cp.wait_for(
        lambda: stack.plugin_log().count("registered nvidia.com/gpu") > registered,
        timeout=90,
        message="the plugin registered again",
    )
    stack.cp.wait_for(
        lambda: stack.node.allocatable("nvidia.com/gpu") == "20",
        timeout=90,
        message="nvidia.com/gpu allocatable 20 again",
    )
    body = _tenant_pod("mps-own", annotations={"nvidia.com/vgpu-mode": "mps"})
    main = body["spec"]["containers"][0]
    main["command"] = [
        "/bin/sh",
        "-c",
        "env; echo MPS_PIPE_LS=$(ls /tmp/nvidia-mps); exec sleep 3600",
    ]
    main["resources"]["limits"]["nvidia.com/gpucores"] = "40"
    stack.core.create_namespaced_pod(stack.namespace, body)
    try:
        pod = stack.wait_running("mps-own")
        env = stack.env_of(pod)
        assert "control" in env["MPS_PIPE_LS"].split()  # its own daemon's socket
        pipe = root / mps.container_dir_name(pod["metadata"]["uid"], "main")
        client_env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        out = subprocess.run(
            [sys.executable, str(standin / "mps_app.py"), "3500"],
            env={**client_env, "CUDA_MPS_PIPE_DIRECTORY": str(pipe)},
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
        assert json.loads(out.stdout) == {
            "mps": True,
            "threads": 40.0,
            "limit_mib": 3000,
            "alloc_ok": False,
        }
    finally:
        _delete_and_wait(stack, "mps-own")
        for sock in root.glob("*/control"):
            subprocess.run(
                [control],
                input="quit\n",
                text=True,
                timeout=10,
                check=False,
                env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(sock.parent)},
            )


# -- MIG (issue #17 items 1-2): last, it restarts the device plugin in dynamic MIG mode ---


def test_a_dynamic_mig_node_gives_the_instance_only_and_frees_it_after_the_pod(stack: Stack):
    node_config = stack.work / "node-config.json"
    node_config.write_text(json.dumps({"nodeconfig": [{"name": NODE, "operatingmode": "mig"}]}))
    state = stack.work / "fake-nvml.json.mig"  # the stand-in's GPU and compute instances
    state.unlink(missing_ok=True)
    # The earlier tests' pods hold shim/MPS shares of these GPUs: a GPU turned to MIG takes
    # no instance while they live (modes never mix on one GPU), so they go first.
    stack.core.delete_collection_namespaced_pod(stack.namespace, grace_period_seconds=0)
    stack.cp.wait_for(
        lambda: not stack.core.list_namespaced_pod(stack.namespace).items,
        timeout=90,
        message="the earlier tests' pods gone",
    )
    stack.cp.stop_process("device-plugin")
    _start_device_plugin(
        stack, node_config=node_config, extra="  migReleaseGraceSeconds: 0\n", mig=True
    )

    def inventory_in_mig() -> bool:
        ann = stack.node.node()["metadata"].get("annotations") or {}
        devices = json.loads(ann.get("hami.io/node-nvidia-register") or "[]")
        return bool(devices) and all(
            d.get("mode") == "mig" and d.get("migProfiles") for d in devices
        )

    stack.cp.wait_for(inventory_in_mig, timeout=60, message="the inventory in mig mode")
    stack.cp.wait_for(
        lambda: stack.node.allocatable("nvidia.com/gpu") == "14",  # 7 instances per GPU
        timeout=90,
        message="the plugin registered again",
    )
    script = "env; echo PRELOAD=$(cat /etc/ld.so.preload 2>/dev/null || echo none); exec sleep 3600"
    body = _tenant_pod("mig-a", annotations={"nvidia.com/vgpu-mode": "mig"})
    main = body["spec"]["containers"][0]
    main["command"] = ["/bin/sh", "-c", script]
    stack.core.create_namespaced_pod(stack.namespace, body)
    pod = stack.wait_running("mig-a")

    ann = pod["metadata"]["annotations"]
    assert ann[keys.BIND_PHASE] == "success"
    (instance,) = json.loads(ann["hami.io/vgpu-mig-allocations"])
    assert instance["profile"] == "1g.10gb" and instance["migUUID"].startswith("MIG-")
    env = stack.env_of(pod)
    assert env["NVIDIA_VISIBLE_DEVICES"] == instance["migUUID"]
    assert env["PRELOAD"] == "none"  # no shim: the hardware isolates the instance
    assert not any(k.startswith("CUDA_") for k in env)
    assert "gi " in state.read_text()

    # NVIDIA's mixed strategy name: 8 instances of 1g.10gb, several per GPU (6 left on the
    # first GPU, 7 on the second), none overlapping mig-a's or each other's slices.
    many = _tenant_pod("mig-8", annotations={"nvidia.com/vgpu-mode": "mig"})
    many["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "8"}}
    many["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", script]
    stack.core.create_namespaced_pod(stack.namespace, many)
    pod8 = stack.wait_running("mig-8")
    made = json.loads(pod8["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])
    assert len(made) == 8 and {m["profile"] for m in made} == {"1g.10gb"}
    taken = [(instance["gpuUUID"], instance["placement"]["start"])] + [
        (m["gpuUUID"], m["placement"]["start"]) for m in made
    ]
    assert len(set(taken)) == 9, taken
    visible = stack.env_of(pod8)["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert sorted(visible) == sorted(m["migUUID"] for m in made) and len(set(visible)) == 8

    _delete_and_wait(stack, "mig-8", "mig-a")
    stack.cp.wait_for(
        lambda: "gi " not in state.read_text(),
        timeout=60,
        message="the instance destroyed once the pod is gone",
    )


def test_a_single_strategy_node_gives_a_count_only_pod_n_instances(stack: Stack):
    """NVIDIA's ``single`` MIG strategy (issue #17 item 1): the administrator's instances
    are each a ``nvidia.com/gpu``; a pod written for NVIDIA's device plugin
    (``nvidia.com/gpu: 3``, nothing else) runs with three MIG UUIDs and no shim."""
    stack.core.delete_collection_namespaced_pod(stack.namespace, grace_period_seconds=0)
    stack.cp.wait_for(
        lambda: not stack.core.list_namespaced_pod(stack.namespace).items,
        timeout=90,
        message="the earlier tests' pods gone",
    )
    stack.cp.stop_process("device-plugin")
    node_config = stack.work / "node-config.json"
    node_config.write_text(json.dumps({"nodeconfig": [{"name": NODE, "migstrategy": "single"}]}))
    lib = fakenvml.build(stack.work / "fakenvml")
    nvml = stack.work / "fake-nvml.json"
    (stack.work / "fake-nvml.json.mig").unlink(missing_ok=True)
    nvml.write_text(
        json.dumps(
            {
                "devices": [
                    {"uuid": u, "name": "NVIDIA A100-PCIE-16GB", "memory_mib": 16384, "mig": True}
                    for u in GPUS
                ]
            }
        )
    )
    # What the administrator made (nvidia-smi mig -cgi 19,19 -C): 1g.10gb instances,
    # two on the first GPU and one on the second.
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "from hami_nvidia.nvml import PynvmlLibrary\n"
            "n = PynvmlLibrary()\n"
            "for i, s in ((0, 0), (0, 1), (1, 0)):\n"
            "    print(n.create_mig_instance(i, 0, s, 1).mig_uuid)\n",
        ],
        env={"LD_LIBRARY_PATH": str(lib), "FAKE_NVML_CONFIG": str(nvml), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    _start_device_plugin(stack, node_config=node_config, mig=True)

    def instances_published() -> bool:
        ann = stack.node.node()["metadata"].get("annotations") or {}
        devices = json.loads(ann.get("hami.io/node-nvidia-register") or "[]")
        return sorted(d.get("id") for d in devices) == sorted(made)

    stack.cp.wait_for(instances_published, timeout=60, message="the instances as devices")
    stack.cp.wait_for(
        lambda: stack.node.allocatable("nvidia.com/gpu") == "3",
        timeout=90,
        message="one nvidia.com/gpu per instance",
    )
    script = "env; echo PRELOAD=$(cat /etc/ld.so.preload 2>/dev/null || echo none); exec sleep 3600"
    body = _tenant_pod("single-a")
    main = body["spec"]["containers"][0]
    main["resources"] = {"limits": {"nvidia.com/gpu": "3"}}
    main["command"] = ["/bin/sh", "-c", script]
    stack.core.create_namespaced_pod(stack.namespace, body)
    pod = stack.wait_running("single-a")
    ann = pod["metadata"]["annotations"]
    assert ann[keys.BIND_PHASE] == "success"
    env = stack.env_of(pod)
    assert sorted(env["NVIDIA_VISIBLE_DEVICES"].split(",")) == sorted(made)
    assert env["PRELOAD"] == "none"
    assert not any(k.startswith("CUDA_") for k in env)
    migs = json.loads(ann["hami.io/vgpu-mig-allocations"])
    assert sorted(m["migUUID"] for m in migs) == sorted(made)

    # migstrategy changed under the running pod (single -> none, MIG leftovers item 3):
    # the restarted device plugin would publish the instances inside their GPUs, where
    # the pod's MIG UUIDs no longer count as held; it refuses to start naming the pod,
    # and the node keeps the inventory the pod was placed on.
    register = "hami.io/node-nvidia-register"
    before = stack.node.node()["metadata"]["annotations"][register]
    stack.cp.stop_process("device-plugin")
    none_config = stack.work / "node-config-none.json"
    none_config.write_text(json.dumps({"nodeconfig": [{"name": NODE, "migstrategy": "none"}]}))
    refusing = _start_device_plugin(stack, node_config=none_config, mig=True)
    log_path = stack.cp.log_paths()["device-plugin"]
    assert refusing.wait(60) == 2, log_path.read_text(errors="replace")[-4000:]
    assert stack.cp.stop_process("device-plugin") == 2  # exited at start, as for a bad config
    text = log_path.read_text(errors="replace")
    assert "in another shape than live pods hold them" in text
    assert f"pod {stack.namespace}/single-a holds MIG-" in text
    assert "now published inside its GPU" in text
    assert stack.node.node()["metadata"]["annotations"][register] == before
    # the pod gone, the same configuration starts and publishes the GPUs whole
    stack.core.delete_namespaced_pod("single-a", stack.namespace, grace_period_seconds=0)
    stack.cp.wait_for(
        lambda: not stack.core.list_namespaced_pod(stack.namespace).items,
        timeout=90,
        message="single-a gone",
    )
    _start_device_plugin(stack, node_config=none_config, mig=True)

    def whole_gpus() -> bool:
        devices = json.loads(stack.node.node()["metadata"]["annotations"].get(register) or "[]")
        return sorted(d.get("id") for d in devices) == sorted(GPUS)

    stack.cp.wait_for(whole_gpus, timeout=60, message="the GPUs published whole")
