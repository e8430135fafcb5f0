"""Webhook + kube-scheduler + extender together, driven the way users drive a cluster:
``kubectl apply`` of plain pod manifests that only carry device limits."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from kubernetes import client

from hami_core.protocol import encode_inventory
from tests.builders import gpu
from tests.e2e.hami_stack import HamiStack
from tests.e2e.kubenode import BUSYBOX_IMAGE
from tests.e2e.test_webhook import _config, _namespace, _webhook, _Webhooks


@pytest.fixture(scope="module")
def stack(control_plane, tmp_path_factory):
    s = HamiStack(control_plane, tmp_path_factory.mktemp("full")).start(replicas=("full-a",))
    yield s
    s.stop()


@pytest.fixture
def env(control_plane, stack):
    suffix = uuid.uuid4().hex[:6]
    hooks = _Webhooks(control_plane, suffix)
    port = hooks.start("a")
    hooks.adm.create_mutating_webhook_configuration(
        _config(
            hooks.config_name,
            [
                _webhook(
                    "pods.hami.io", f"https://127.0.0.1:{port}/webhook", suffix, ["v1", "v1beta1"]
                )
            ],
        )
    )
    hooks.wait_ready("a")
    ns = _namespace(hooks.core, f"full-{suffix}", suffix)
    node = f"gpu-{suffix}"
    control_plane.add_fake_node(
        node,
        annotations={"hami.io/node-nvidia-register": encode_inventory([gpu(f"GPU-{suffix}")])},
        capacity={"nvidia.com/gpu": "10"},
    )
    yield control_plane, hooks.core, ns, node
    control_plane.delete_pods([ns])
    hooks.stop()
    control_plane.delete_node(node)


def kubectl(cp, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig_path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def manifest(name: str, *containers: dict[str, str]) -> str:
    specs = [
        {
            "name": f"c{i}",
            "image": BUSYBOX_IMAGE,  # imported by a real node, never pulled
            "imagePullPolicy": "Never",
            "command": ["sleep", "3600"],
            "resources": {"limits": limits},
        }
        for i, limits in enumerate(containers)
    ]
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"containers": specs},
        }
    )


def test_kubectl_pod_is_mutated_scheduled_and_bound(env):
    cp, core, ns, node = env
    applied = kubectl(
        cp,
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        stdin=manifest("notebook", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}),
    )
    assert applied.returncode == 0, applied.stderr

    def bound():
        pod = json.loads(core.read_namespaced_pod("notebook", ns, _preload_content=False).data)
        return pod if pod["spec"].get("nodeName") else None

    pod = cp.wait_for(bound, timeout=60, message="notebook bound")
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    assert pod["spec"]["nodeName"] == node
    ann = pod["metadata"]["annotations"]
    assert (
        ann["hami.io/vgpu-devices-allocated"] == f"GPU-{ns.removeprefix('full-')},NVIDIA,3000,0:;"
    )
    assert ann["hami.io/vgpu-devices-to-allocate"] == ann["hami.io/vgpu-devices-allocated"]
    assert ann["hami.io/vgpu-node"] == node


def test_quota_denial_reaches_kubectl_apply(env):
    cp, core, ns, _ = env
    core.create_namespaced_resource_quota(
        ns,
        {
            "metadata": {"name": "gpu-quota"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "24000"}},
        },
    )
    applied = kubectl(
        cp,
        "apply",
        "-n",
        ns,
        "-f",
        "-",
        stdin=manifest(
            "greedy",
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000"},
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000"},
        ),
    )
    assert applied.returncode != 0
    assert 'admission webhook "pods.hami.io" denied the request' in applied.stderr
    assert (
        "quota gpu-quota: limits.nvidia.com/gpumem 24000, used 0, this pod 32000" in applied.stderr
    )
    with pytest.raises(client.exceptions.ApiException):
        core.read_namespaced_pod("greedy", ns)
