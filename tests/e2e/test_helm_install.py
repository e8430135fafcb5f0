"""charts/hami installed for real: its packaged archive (``helm package``), with real Helm
(helm-python-sdk), onto a real control plane
(etcd, kube-apiserver, kube-controller-manager, a default kube-scheduler) and a real
node (kubelet 1.20 + containerd + runc), with the chart's own pods running from the
hami image built by scripts/build-image.py and kube-scheduler 1.20.2 in its own image.

The cluster is like a bare one without kube-proxy, so the test uses the chart values
such a cluster's user would (examples/no-kube-proxy.yaml): pods reach the API server at
an explicit address (one put on lo, so the node's pod network reaches it), the API
server calls the webhook by URL on loopback (the webhook on the host network). The
device plugin runs on the stand-in NVML (2 GPUs of 16384 MiB).

Then, through kubectl: a GPU pod is mutated, bound with the exact allocation
annotations and its container sees its limits; two scheduler replicas bind every pod
with no bind refused for leadership, also after the leading replica is deleted;
``helm upgrade`` with another deviceSplitCount changes what the node offers;
``helm uninstall`` leaves only what the README says.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.chart.helm import CHART
from tests.deviceplugin import fakenvml
from tests.e2e.controlplane import ControlPlane, free_port
from tests.e2e.kubenode import (
    DEVICE_PLUGIN_DIR,
    KubeletNode,
    NodeUnavailable,
    claim_lo_address,
    ensure_node_packages,
    gpu_pod_body,
    release_lo_address,
)
from tests.e2e.oci import HAMI_IMAGE, binary_image

# Setup installs and waits for the chart's pods; the image is built before (conftest).
pytestmark = pytest.mark.timeout(1200)

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

REPO = Path(__file__).resolve().parents[2]
NODE = "hami-helm-node"
RELEASE = "hami"
NAMESPACE = "hami-system"
#: Where the API server listens for the chart's pods: an address of this block put on lo
#: (pods reach it through their default route, the CNI bridge, outside its
#: ``kubenode.SUBNET``), a free one claimed per run (``kubenode.claim_lo_address``).
API_ADDRESSES = ipaddress.ip_network("10.244.78.0/24")
GPUS = [f"GPU-helm000{i}-aaaa-bbbb-cccc-0123456789ab" for i in range(2)]
KUBE_SCHEDULER_IMAGE = "hami.local/kube-scheduler:v1.20.2"


class Release:
    def __init__(self, cp: ControlPlane, node: KubeletNode, work: Path) -> None:
        self.cp = cp
        self.api_address = cp.bind_address  # the chart's pods reach the API server there
        self.node = node
        self.work = work
        self.core = client.CoreV1Api(cp.api_client())
        self.apps = client.AppsV1Api(cp.api_client())
        self.kubectl_bin = str(Path(cp.bin_dir or "") / "kubectl")
        self.helm = helm_python.Config(kubeconfig_path=str(cp.kubeconfig_path), namespace=NAMESPACE)
        self.webhook_port = free_port()
        self.namespace = f"gpu-{uuid.uuid4().hex[:6]}"
        self.values: dict[str, Any] = {}
        self.archive = CHART  # the packaged chart once made (the fixture)

    # -- values a no-kube-proxy cluster's user would set ----------------------------------

    def make_values(self) -> dict[str, Any]:
        base = yaml.safe_load((CHART / "examples" / "no-kube-proxy.yaml").read_text())
        port = int((self.cp.api_url or "").rsplit(":", 1)[1])
        base["global"]["kubeAPIServer"] = {"host": self.api_address, "port": port}
        base["global"]["gpuHookPath"] = str(self.work / "hook")
        custom = base["scheduler"]["admissionWebhook"]["customURL"]
        custom["port"] = self.webhook_port
        base["scheduler"]["admissionWebhook"]["failurePolicy"] = "Fail"
        base["webhook"]["port"] = self.webhook_port
        base["webhook"].pop("nodeSelector")  # the one node here is the API server's host
        base["image"] = {"registry": "hami.local", "repository": "hami", "pullPolicy": "Never"}
        base["scheduler"]["replicas"] = 2
        base["scheduler"]["kubeScheduler"] = {
            "image": {
                "registry": "hami.local",
                "repository": "kube-scheduler",
                "pullPolicy": "Never",
            }
        }
        lib = fakenvml.build(self.work / "fakenvml")
        (lib / "fake-nvml.json").write_text(
            json.dumps(
                {
                    "devices": [
                        {"uuid": u, "name": "NVIDIA A100-PCIE-16GB", "memory_mib": 16384}
                        for u in GPUS
                    ]
                }
            )
        )
        base["devicePlugin"] = {
            "extraEnvs": {
                "LD_LIBRARY_PATH": "/fakenvml",
                "FAKE_NVML_CONFIG": "/fakenvml/fake-nvml.json",
            },
            "extraVolumes": [{"name": "fakenvml", "hostPath": {"path": str(lib)}}],
            "extraVolumeMounts": [{"name": "fakenvml", "mountPath": "/fakenvml", "readOnly": True}],
            "extraArgs": ["--register-interval=2", "--health-interval=1"],
        }
        self.values = base
        return base

    # -- helpers -------------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(
            [self.kubectl_bin, f"--kubeconfig={self.cp.kubeconfig_path}", *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc.stdout

    def pods(self, namespace: str = NAMESPACE, selector: str = "") -> list[dict[str, Any]]:
        resp = self.core.list_namespaced_pod(
            namespace, label_selector=selector, _preload_content=False
        )
        return json.loads(resp.data)["items"]

    def pod(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        resp = self.core.read_namespaced_pod(
            name, namespace or self.namespace, _preload_content=False
        )
        return json.loads(resp.data)

    def diagnostics(self) -> str:
        out = [self.kubectl("get", "pods", "-A", "-o", "wide", check=False)]
        out.append(
            self.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp", check=False)[-6000:]
        )
        for pod in self.pods():
            meta = pod["metadata"]
            for c in pod["spec"]["containers"]:
                out.append(
                    f"--- {meta['name']}/{c['name']}\n{self.node.pod_log(NAMESPACE, meta['name'], meta['uid'], c['name'])[-3000:]}"
                )
        return "\n".join(out)

    def wait(self, predicate: Any, message: str, timeout: float = 240) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {message}\n{self.diagnostics()}")
            time.sleep(1)

    def ready_pods(self, component: str) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
        out = []
        for pod in self.pods(selector=selector):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            conds = {
                c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []
            }
            if conds.get("Ready") == "True":
                out.append(pod)
        return out

    def gpu_pod(self, name: str, *, gpumem: int, gpucores: int) -> str:
        body = gpu_pod_body(name, gpumem=gpumem, gpucores=gpucores, namespace=self.namespace)
        return yaml.safe_dump(body)

    def wait_running(self, name: str) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.pod(name)
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Failed":
                raise AssertionError(f"{name} failed: {pod.get('status')}\n{self.diagnostics()}")
            return pod if phase == "Running" else None

        return self.wait(running, f"pod {name} Running")

    def env_of(self, pod: dict[str, Any]) -> dict[str, str]:
        meta = pod["metadata"]

        def logged() -> str | None:
            text = self.node.pod_log(meta["namespace"], meta["name"], meta["uid"], "main")
            return text if "NVIDIA_VISIBLE_DEVICES=" in text else None

        text = self.wait(logged, f"the env of {meta['name']}", timeout=60)
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def lease_holder(self) -> str | None:
        try:
            lease = client.CoordinationV1Api(self.cp.api_client()).read_namespaced_lease(
                "hami-scheduler", NAMESPACE
            )
        except ApiException:
            return None
        return lease.spec.holder_identity

    def scheduler_logs(self) -> str:
        text = []
        for pod in self.pods(selector="app.kubernetes.io/component=scheduler"):
            meta = pod["metadata"]
            for c in ("kube-scheduler", "extender"):
                text.append(self.node.pod_log(NAMESPACE, meta["name"], meta["uid"], c))
        return "\n".join(text)


@contextlib.contextmanager
def cluster_for_the_chart(
    kube_bin_dir: Path, hami_image: Path, work_name: str
) -> Iterator[Release]:
    """What a chart install needs, and its cleanup: a control plane (with
    kube-controller-manager and a default kube-scheduler), a kubelet node with the hami
    and kube-scheduler images imported, the release's namespace (exempt from the webhook)
    and a tenant namespace with its default ServiceAccount. Shared by this module and
    ``test_migrate_from_hami``; on the way out, whatever release is installed goes."""
    if os.geteuid() != 0:
        pytest.fail("the chart e2e tests need root (kubelet, containerd, chroot)", pytrace=False)
    ensure_node_packages()
    api_address = claim_lo_address(API_ADDRESSES)
    cp = ControlPlane(
        kube_bin_dir, bind_address=api_address, disable_admission_plugins=("TaintNodesByCondition",)
    )
    node: KubeletNode | None = None
    try:
        cp.start()
        cp.start_controller_manager()
        cp.start_default_scheduler()
        node = KubeletNode(cp, kube_bin_dir, name=NODE, pod_routes=[f"{api_address}/32"])
        work = Path(cp.workdir or "/tmp") / work_name
        work.mkdir(parents=True, exist_ok=True)
        rel = Release(cp, node, work)
        node.namespaces |= {NAMESPACE, rel.namespace}
        try:
            node.start()
        except NodeUnavailable as exc:
            pytest.fail(str(exc), pytrace=False)
        node.ctr("images", "import", str(hami_image), timeout=600)
        ks = binary_image(
            work / "kube-scheduler.tar", KUBE_SCHEDULER_IMAGE, kube_bin_dir / "kube-scheduler"
        )
        node.ctr("images", "import", str(ks))
        # Kubernetes 1.20 sets no kubernetes.io/metadata.name label, so the release's own
        # namespace is exempted from the webhook the way the README says for 1.20.
        rel.core.create_namespace(
            {"metadata": {"name": NAMESPACE, "labels": {"hami.io/webhook": "ignore"}}}
        )
        rel.core.create_namespace({"metadata": {"name": rel.namespace}})
        rel.wait(
            lambda: any(
                sa.metadata.name == "default"
                for sa in rel.core.list_namespaced_service_account(rel.namespace).items
            ),
            "the default service account",
            timeout=60,
        )
        yield rel
    finally:
        with contextlib.suppress(Exception):
            helm_python.Config(
                kubeconfig_path=str(cp.kubeconfig_path), namespace=NAMESPACE
            ).uninstall(RELEASE, ignore_not_found=True)
        if node is not None:
            node.stop()
            left = node.leftovers()
        cp.stop()
        release_lo_address(api_address)
        with contextlib.suppress(OSError):
            (DEVICE_PLUGIN_DIR / "nvidia-gpu.sock").unlink()
        if node is not None:
            assert left == [], f"the node's cleanup left {left}"


@pytest.fixture(scope="module")
def release(kube_bin_dir: Path, hami_image: Path) -> Iterator[Release]:
    with cluster_for_the_chart(kube_bin_dir, hami_image, "helm-e2e") as rel:
        node = rel.node
        rel.core.patch_node(NODE, {"metadata": {"labels": {"gpu": "on"}}})
        t0 = time.monotonic()
        # As users get it: the packaged chart (`helm package`; tests/chart/test_package.py
        # lints it and indexes it as a chart repository).
        rel.archive = Path(helm_python.package(CHART, destination=rel.work))
        installed = rel.helm.install(
            rel.archive, RELEASE, rel.make_values(), namespace=NAMESPACE, timeout=300
        )
        assert installed["status"] == "deployed", installed
        assert (installed["chart_name"], installed["chart_version"]) == ("hami", "0.1.0")
        rel.wait(lambda: len(rel.ready_pods("scheduler")) == 2, "2 scheduler pods ready")
        rel.wait(lambda: rel.ready_pods("webhook"), "the webhook pod ready")
        rel.wait(
            lambda: node.allocatable("nvidia.com/gpu") == "20", "nvidia.com/gpu 20 on the node"
        )
        sys.stderr.write(f"[helm-e2e] installed and running in {time.monotonic() - t0:.0f} s\n")
        yield rel


def test_the_chart_pods_run_from_the_image(release: Release):
    images = {}
    for pod in release.pods():
        for c in pod["spec"]["containers"]:
            images[(pod["metadata"]["labels"]["app.kubernetes.io/component"], c["name"])] = c[
                "image"
            ]
        assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
    assert {
        ("scheduler", "kube-scheduler"): KUBE_SCHEDULER_IMAGE,
        ("scheduler", "extender"): HAMI_IMAGE,
        ("webhook", "webhook"): HAMI_IMAGE,
        ("device-plugin", "nvidia"): HAMI_IMAGE,
    }.items() <= images.items()
    # every other part of the chart (e.g. the node monitor) runs from the hami image too
    assert set(images.values()) == {HAMI_IMAGE, KUBE_SCHEDULER_IMAGE}
    # the pods talk to the API with a token projected only into the containers that use
    # it (kubelet's TokenRequest), and run as uid 65532 on a read-only root filesystem
    sched = release.ready_pods("scheduler")[0]
    assert sched["spec"]["automountServiceAccountToken"] is False
    (access,) = [v for v in sched["spec"]["volumes"] if v["name"] == "kube-api-access"]
    assert any("serviceAccountToken" in s for s in access["projected"]["sources"])
    for c in sched["spec"]["containers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True
        assert "kube-api-access" in {m["name"] for m in c["volumeMounts"]}
    assert sched["spec"]["securityContext"]["runAsUser"] == 65532
    # the webhook wrote its CA into the chart's configuration (auto TLS)
    mwc = client.AdmissionregistrationV1Api(
        release.cp.api_client()
    ).read_mutating_webhook_configuration("hami-webhook")
    assert mwc.webhooks[0].client_config.ca_bundle
    assert mwc.webhooks[0].client_config.url == f"https://127.0.0.1:{release.webhook_port}/webhook"
    # the device plugin installed the image's shim under the chart's hook path
    hook = Path(release.values["global"]["gpuHookPath"]) / "vgpu"
    shipped = _in_device_plugin_container("hami_nvidia/lib/libvgpu.so")
    assert shipped is not None, "no libvgpu.so in the device plugin's container"
    assert (hook / "libvgpu.so").read_bytes() == shipped.read_bytes()
    assert (hook / "ld.so.preload").read_text() == "/usr/local/vgpu/libvgpu.so\n"


def _in_device_plugin_container(suffix: str) -> Path | None:
    """A file of the running device plugin's own root filesystem (the image), seen
    through /proc/<pid>/root."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"device-plugin" in cmdline
            and b"--backend=nvidia" in cmdline
            and cmdline[0].startswith(b"/opt/hami/")
        ):
            root = Path("/proc", entry, "root", "opt", "hami", "lib")
            for path in root.glob(f"python3*/site-packages/{suffix}"):
                return path
    return None


def test_a_gpu_pod_is_mutated_bound_and_sees_its_limits(release: Release):
    out = release.kubectl(
        "apply", "-f", "-", input=release.gpu_pod("gpu-a", gpumem=3000, gpucores=30)
    )
    assert "pod/gpu-a created" in out
    pod = release.wait_running("gpu-a")
    assert pod["spec"]["schedulerName"] == "hami-scheduler"  # the webhook's mutation
    assert pod["spec"]["nodeName"] == NODE
    ann = pod["metadata"]["annotations"]
    uuid_a = ann["hami.io/vgpu-devices-allocated"].split(",", 1)[0]
    assert uuid_a in GPUS
    assert ann["hami.io/vgpu-devices-allocated"] == f"{uuid_a},NVIDIA,3000,30:;"
    assert ann["hami.io/vgpu-devices-to-allocate"] in ("", ";", f"{uuid_a},NVIDIA,3000,30:;")
    assert ann["hami.io/vgpu-node"] == NODE
    assert ann["hami.io/bind-phase"] == "success"
    env = release.env_of(pod)
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuid_a
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert env["CUDA_DEVICE_SM_LIMIT"] == "30"
    described = release.kubectl("describe", "pod", "gpu-a", "-n", release.namespace)
    assert "hami.io/vgpu-devices-allocated" in described


def test_a_tenant_cannot_preset_the_allocation(release: Release):
    # A pod that writes the scheduler's annotations itself is refused by the webhook.
    body = yaml.safe_load(release.gpu_pod("gpu-forged", gpumem=1000, gpucores=10))
    body["metadata"]["annotations"] = {
        "hami.io/vgpu-devices-allocated": f"{GPUS[0]},NVIDIA,16384,100:;"
    }
    proc = subprocess.run(
        [release.kubectl_bin, f"--kubeconfig={release.cp.kubeconfig_path}", "apply", "-f", "-"],
        input=yaml.safe_dump(body),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "hami.io/vgpu-devices-allocated" in proc.stderr


def test_two_scheduler_replicas_never_fail_a_bind_for_leadership(release: Release):
    holder = release.lease_holder()
    pods = {p["metadata"]["name"] for p in release.ready_pods("scheduler")}
    assert holder and holder.split("_", 1)[0] in pods, (holder, pods)
    names = [f"gpu-ha-{i}" for i in range(4)]
    release.kubectl(
        "apply",
        "-f",
        "-",
        input="---\n".join(release.gpu_pod(n, gpumem=1000, gpucores=10) for n in names),
    )
    for n in names:
        assert release.wait_running(n)["metadata"]["annotations"]["hami.io/bind-phase"] == "success"

    # The leading replica goes away: the other one takes kube-scheduler's Lease and binds.
    leader = holder.split("_", 1)[0]
    release.core.delete_namespaced_pod(leader, NAMESPACE, grace_period_seconds=0)

    def another_leads() -> bool:
        h = release.lease_holder()
        return bool(h) and h.split("_", 1)[0] != leader

    release.wait(another_leads, "another replica leads", timeout=120)
    release.kubectl(
        "apply", "-f", "-", input=release.gpu_pod("gpu-ha-after", gpumem=1000, gpucores=10)
    )
    assert (
        release.wait_running("gpu-ha-after")["metadata"]["annotations"]["hami.io/bind-phase"]
        == "success"
    )

    events = release.kubectl("get", "events", "-n", release.namespace, "-o", "json")
    messages = [e.get("message") or "" for e in json.loads(events)["items"]]
    assert not [m for m in messages if "leader" in m.lower()], messages
    assert "not the leader" not in release.scheduler_logs()


def test_helm_upgrade_changes_the_split_count(release: Release):
    values = json.loads(json.dumps(release.values))
    values["devicePlugin"]["deviceSplitCount"] = 4
    upgraded = release.helm.upgrade(
        release.archive, RELEASE, values, namespace=NAMESPACE, timeout=300
    )
    assert upgraded["status"] == "deployed" and upgraded["revision"] == 2
    # the DaemonSet rolls (its config checksum changed) and the node offers 2 x 4
    release.wait(
        lambda: release.node.allocatable("nvidia.com/gpu") == "8",
        "nvidia.com/gpu 8 after the upgrade",
    )
    text = release.core.read_namespaced_config_map("hami-config", NAMESPACE).data["hami.yaml"]
    assert yaml.safe_load(text)["nvidia"]["deviceSplitCount"] == 4
    release.values = values


def test_helm_uninstall_leaves_only_what_the_docs_say(release: Release):
    for pod in release.pods(release.namespace):
        release.core.delete_namespaced_pod(
            pod["metadata"]["name"], release.namespace, grace_period_seconds=0
        )
    release.helm.uninstall(RELEASE, wait="watcher", timeout=180)
    assert release.helm.list() == [] or all(r["name"] != RELEASE for r in release.helm.list())
    release.wait(lambda: not release.pods(), "the chart's pods gone", timeout=180)
    left = []
    for kind in (
        "deployments",
        "daemonsets",
        "services",
        "configmaps",
        "serviceaccounts",
        "roles",
        "rolebindings",
        "secrets",
        "leases",
    ):
        out = release.kubectl("get", kind, "-n", NAMESPACE, "-o", "name")
        left += [line for line in out.split() if line]
    for kind in ("clusterroles", "clusterrolebindings", "mutatingwebhookconfigurations"):
        out = release.kubectl("get", kind, "-o", "name")
        left += [line for line in out.split() if "hami" in line]
    # README "Uninstall": the auto-TLS Secret the webhook made, the allocation-signing key
    # and its public keys the scheduler made, and kube-scheduler's Lease stay; everything
    # else of the release is gone. (Service-account objects that kube-controller-manager
    # makes for every namespace are not the chart's.)
    ours = sorted(x for x in left if "default" not in x and "kube-root-ca" not in x)
    assert ours == [
        "configmap/hami-allocation-keys",
        "lease.coordination.k8s.io/hami-scheduler",
        "secret/hami-allocation-key",
        "secret/hami-webhook-tls",
    ]
