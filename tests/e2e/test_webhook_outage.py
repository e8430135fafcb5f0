"""The chart's webhook failurePolicy against a real kube-apiserver while the webhook is
down (issue #12 item 4; docs/threat-model.md, "Webhook outage").

The chart's own MutatingWebhookConfiguration, rendered by real Helm, points at a port
nobody listens on (an outage). With ``Fail`` the API server refuses every pod CREATE and
UPDATE in a namespace the webhook selects, while the release's own namespace (labelled
``hami.io/webhook=ignore``, as 1.20 needs: it has no ``kubernetes.io/metadata.name``) still
gets its pods; with ``Ignore`` a forged pod carrying scheduler-owned annotations is
admitted unreviewed, which is exactly what the docs say an outage admits (the
accounting's own trust rule then has to hold: tests/unit/test_usage_trust.py,
test_quota_trust.py). The configuration selects only this test's namespaces (an extra
``matchLabels``), so other e2e tests sharing the control plane are never intercepted.
"""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.chart.helm import find, render
from tests.e2e.controlplane import free_port
from tests.e2e.kubenode import BUSYBOX_IMAGE

pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")
pytestmark = pytest.mark.e2e
SELECT = "hami-e2e-outage"


def _pod(name: str, **annotations: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,  # imported by a real node, never pulled
                    "imagePullPolicy": "Never",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


def _hook(policy: str, release_ns: str, suffix: str) -> dict:
    values = {
        "scheduler": {
            "admissionWebhook": {
                "failurePolicy": policy,
                "timeoutSeconds": 2,
                "customURL": {"enabled": True, "host": "127.0.0.1", "port": free_port()},
                "namespaceSelector": {"matchLabels": {SELECT: suffix}},
            }
        }
    }
    mwc = find(render(values, namespace=release_ns), "MutatingWebhookConfiguration")
    mwc["metadata"] = {"name": f"hami-outage-{suffix}"}
    return mwc


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_what_a_webhook_outage_admits(control_plane, policy: str):
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    tenant, release = f"tenant-{suffix}", f"hami-{suffix}"
    core.create_namespace({"metadata": {"name": tenant, "labels": {SELECT: suffix}}})
    core.create_namespace(
        {"metadata": {"name": release, "labels": {SELECT: suffix, "hami.io/webhook": "ignore"}}}
    )
    before = core.create_namespaced_pod(tenant, _pod("before"))  # no webhook yet
    mwc = _hook(policy, release, suffix)
    admission.create_mutating_webhook_configuration(mwc)
    forged = {
        "hami.io/vgpu-devices-allocated": "GPU-x,NVIDIA,1,0:;",
        "hami.io/bind-phase": "success",
    }
    try:
        # the release's namespace is out of the webhook's reach either way
        core.create_namespaced_pod(release, _pod("webhook-itself"))
        if policy == "Fail":
            for attempt in (
                lambda: core.create_namespaced_pod(tenant, _pod("plain")),
                lambda: core.create_namespaced_pod(tenant, _pod("forged", **forged)),
                lambda: core.patch_namespaced_pod(
                    "before", tenant, {"metadata": {"annotations": forged}}
                ),
            ):
                with pytest.raises(ApiException) as info:
                    attempt()
                message = json.loads(info.value.body)["message"]
                assert "failed calling webhook" in message and "vgpu.hami.io" in message
            assert core.read_namespaced_pod("before", tenant).metadata.annotations is None
            assert [p.metadata.name for p in core.list_namespaced_pod(tenant).items] == ["before"]
        else:
            made = core.create_namespaced_pod(tenant, _pod("forged", **forged))
            # admitted unreviewed: not mutated (no schedulerName of ours), annotations kept
            assert made.spec.scheduler_name == "default-scheduler"
            assert made.metadata.annotations["hami.io/bind-phase"] == "success"
            core.patch_namespaced_pod("before", tenant, {"metadata": {"annotations": forged}})
            got = core.read_namespaced_pod("before", tenant).metadata.annotations
            assert got["hami.io/vgpu-devices-allocated"] == "GPU-x,NVIDIA,1,0:;"
        assert before.metadata.name == "before"
    finally:
        admission.delete_mutating_webhook_configuration(mwc["metadata"]["name"])
        for ns in (tenant, release):
            for p in core.list_namespaced_pod(ns).items:
                core.delete_namespaced_pod(p.metadata.name, ns, grace_period_seconds=0)
