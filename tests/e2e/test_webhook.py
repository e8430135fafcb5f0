"""``hami webhook`` against a real kube-apiserver: auto certificates, caBundle, mutation,
denials as ``kubectl`` shows them, and two replicas sharing one CA.

Also keeps the AdmissionReview wire fixtures of what kube-apiserver v1.20.2 sends under
tests/fixtures/admission/ (written when missing, or always with HAMI_RECORD_FIXTURES=1;
otherwise their keys are checked against what is sent now).

The webhook configuration of each test selects only the namespaces it labels, so the
other e2e tests sharing the control plane are never intercepted, and it is deleted at
the end.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import shutil
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from flask import Flask, jsonify, request
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from hami_core.servers import certs
from hami_core.servers.https import serve_https
from tests.e2e.controlplane import free_port
from tests.e2e.kubenode import BUSYBOX_IMAGE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "admission"
HAMI = str(Path(sys.executable).parent / "hami")
if not Path(HAMI).exists():
    HAMI = shutil.which("hami") or "hami"
SELECT = "hami-e2e-webhook"
pytestmark = pytest.mark.e2e


def _webhook(name: str, url: str, selector: str, versions: list[str]) -> dict:
    return {
        "name": name,
        "admissionReviewVersions": versions,
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
        "clientConfig": {"url": url},
        "namespaceSelector": {"matchLabels": {SELECT: selector}},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["pods", "configmaps"],
            }
        ],
    }


def _config(name: str, hooks: list[dict]) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": hooks,
    }


@pytest.fixture(autouse=True)
def _delete_pods_created(control_plane):
    """The pods a test leaves would outlive it on the shared control plane: pods asking
    ``nvidia.com/gpu`` of ``hami-scheduler`` (or default-scheduler) that a later file's
    scheduler hands to its real kubelet node (test_kubelet.py's pod then never ran,
    the node busy pulling an image it cannot reach). Every namespace of these tests
    carries the ``SELECT`` label."""
    yield
    core = client.CoreV1Api(control_plane.api_client())
    labelled = core.list_namespace(label_selector=SELECT).items
    control_plane.delete_pods(ns.metadata.name for ns in labelled)


def _namespace(core: client.CoreV1Api, name: str, selector: str, **labels: str) -> str:
    body = {"metadata": {"name": name, "labels": {SELECT: selector, **labels}}}
    core.create_namespace(body)
    return name


def _gpu_pod(name: str, **limits: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,  # the one a real node imports: never pulled
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": dict(limits)},
                }
            ]
        },
    }


def _ca_context(ca_pem: bytes) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    return ctx


class _Webhooks:
    """``hami webhook`` replicas run by the control plane, and the config they serve."""

    def __init__(self, cp, suffix: str) -> None:
        self.cp = cp
        self.suffix = suffix
        self.config_name = f"hami-webhook-{suffix}"
        self.secret = f"hami-webhook-tls-{suffix}"
        self.adm = client.AdmissionregistrationV1Api(cp.api_client())
        self.core = client.CoreV1Api(cp.api_client())
        self.ports: dict[str, int] = {}

    def start(self, name: str, *extra: str, threads: int | None = 4) -> int:
        """Start replica ``name``; ``threads=None`` keeps the server's default workers."""
        port = free_port()
        self.cp.start_process(
            f"webhook-{self.suffix}-{name}",
            [
                HAMI,
                "webhook",
                "--kubeconfig",
                str(self.cp.kubeconfig_path),
                "--bind-address",
                "127.0.0.1",
                "--port",
                str(port),
                "--cert-mode",
                "auto",
                "--cert-ip-address",
                "127.0.0.1",
                "--service-namespace",
                "default",
                "--secret-name",
                self.secret,
                "--webhook-config-name",
                self.config_name,
                *(["--threads", str(threads)] if threads is not None else []),
                "--namespace-cache-seconds",
                "1",
                # the e2e scheduler and device plugin write pods with the admin token
                "--trusted-user",
                "admin",
                "--log-level",
                "debug",
                *extra,
            ],
            env={"PYTHONUNBUFFERED": "1"},
        )
        self.ports[name] = port
        return port

    def ca_pem(self) -> bytes | None:
        obj = self.adm.read_mutating_webhook_configuration(self.config_name)
        bundle = obj.webhooks[0].client_config.ca_bundle
        if not bundle:
            return None
        # the client may hand caBundle over as base64 text or as decoded bytes
        if isinstance(bundle, bytes):
            return bundle if bundle.startswith(b"-----BEGIN") else base64.b64decode(bundle)
        return base64.b64decode(bundle)

    def wait_ready(self, name: str) -> bytes:
        def ready():
            ca = self.ca_pem()
            if ca is None:
                return None
            try:
                url = f"https://127.0.0.1:{self.ports[name]}/readyz"
                with urllib.request.urlopen(url, context=_ca_context(ca), timeout=2) as r:
                    return ca if r.status == 200 else None
            except OSError:
                return None

        return self.cp.wait_for(ready, timeout=60, message=f"webhook {name} ready")

    def stop(self) -> None:
        for name in list(self.ports):
            self.cp.stop_process(f"webhook-{self.suffix}-{name}")
        with contextlib.suppress(ApiException):
            self.adm.delete_mutating_webhook_configuration(self.config_name)


@pytest.fixture()
def webhooks(control_plane):
    suffix = uuid.uuid4().hex[:6]
    hooks = _Webhooks(control_plane, suffix)
    try:
        yield hooks
    finally:
        hooks.stop()


def _create(core, ns, body, *, attempts=20):
    """Create a pod; retry while the webhook's caches warm up (connection refused)."""
    for _ in range(attempts):
        try:
            return core.create_namespaced_pod(ns, body)
        except ApiException as exc:
            if "connection refused" in (exc.body or "") or "x509" in (exc.body or ""):
                time.sleep(0.5)
                continue
            raise
    return core.create_namespaced_pod(ns, body)


def _denial(core, ns, body) -> tuple[int, str]:
    with pytest.raises(ApiException) as info:
        _create(core, ns, body)
    message = json.loads(info.value.body)["message"]
    return info.value.status, message


def test_auto_certificates_mutation_and_denials(webhooks, control_plane):
    core = webhooks.core
    port = webhooks.start("a")
    url = f"https://127.0.0.1:{port}/webhook"
    webhooks.adm.create_mutating_webhook_configuration(
        _config(
            webhooks.config_name,
            [_webhook("pods.hami.io", url, webhooks.suffix, ["v1", "v1beta1"])],
        )
    )
    ca = webhooks.wait_ready("a")
    secret = core.read_namespaced_secret(webhooks.secret, "default")
    assert secret.type == "kubernetes.io/tls"
    assert {"tls.crt", "tls.key", "ca.crt", "ca.key"} <= set(secret.data)
    dns, ips = certs.certificate_sans(base64.b64decode(secret.data["tls.crt"]))
    assert "hami-webhook.default.svc" in dns and "127.0.0.1" in ips

    ns = _namespace(core, f"wh-{webhooks.suffix}", webhooks.suffix)
    # a pod asking for a GPU gets our scheduler and its defaults
    created = _create(
        core, ns, _gpu_pod("gpu", **{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})
    )
    assert created.spec.scheduler_name == "hami-scheduler"
    res = created.spec.containers[0].resources
    assert res.limits["nvidia.com/gpu"] == "1"
    assert res.requests["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpucores" in res.limits

    # a pod without managed resources is left alone
    plain = _create(
        core,
        ns,
        {
            "metadata": {"name": "plain"},
            "spec": {
                "containers": [{"name": "c", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never"}]
            },
        },
    )
    assert plain.spec.scheduler_name == "default-scheduler"

    # denials reach the client with the webhook's message and code
    priv = _gpu_pod("priv", **{"nvidia.com/gpu": "1"})
    priv["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    status, message = _denial(core, ns, priv)
    assert status == 403
    assert 'admission webhook "pods.hami.io" denied the request' in message
    assert "privileged" in message

    status, message = _denial(
        core, ns, _gpu_pod("gi", **{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16Gi"})
    )
    assert status == 400 and "16Gi" in message

    core.create_namespaced_resource_quota(
        ns,
        {
            "metadata": {"name": "gpu-quota"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "24000"}},
        },
    )
    big = _gpu_pod("big", **{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000"})
    big["spec"]["containers"].append(
        copy.deepcopy(big["spec"]["containers"][0]) | {"name": "second"}
    )

    def denied_by_quota():
        try:
            core.create_namespaced_pod(ns, big)
        except ApiException as exc:
            msg = json.loads(exc.body)["message"]
            return (exc.status, msg) if "gpu-quota" in msg else None
        core.delete_namespaced_pod("big", ns, grace_period_seconds=0)
        return None

    status, message = control_plane.wait_for(denied_by_quota, timeout=20, message="quota denial")
    assert status == 403 and 'admission webhook "pods.hami.io" denied' in message

    # a namespace that opted out is never touched
    ignored = _namespace(
        core, f"wh-ign-{webhooks.suffix}", webhooks.suffix, **{"hami.io/webhook": "ignore"}
    )
    left = _create(core, ignored, _gpu_pod("gpu", **{"nvidia.com/gpu": "1"}))
    assert left.spec.scheduler_name == "default-scheduler"

    # a second replica reuses the Secret: the same CA serves both
    webhooks.start("b")
    assert webhooks.wait_ready("b") == ca
    again = core.read_namespaced_secret(webhooks.secret, "default")
    assert again.data == secret.data


def test_force_overwrite_default_scheduler_false_leaves_default_scheduler_pods(
    webhooks, control_plane
):
    """HAMi's ``--force-overwrite-default-scheduler=false`` (its spelling) on a real
    kube-apiserver: a GPU pod naming no scheduler is defaulted to ``default-scheduler``
    before the webhook sees it, and left so, as another scheduler's pod is; a pod naming
    ours is still mutated. (The e2e tests create pods as a trusted user: that a
    left-alone pod is still refused forged annotations is tested in tests/compat.) (With the
    default, true, such a pod gets ours: ``test_auto_certificates_mutation_and_denials``.)"""
    core = webhooks.core
    port = webhooks.start("a", "--force-overwrite-default-scheduler=false")
    url = f"https://127.0.0.1:{port}/webhook"
    webhooks.adm.create_mutating_webhook_configuration(
        _config(webhooks.config_name, [_webhook("pods.hami.io", url, webhooks.suffix, ["v1"])])
    )
    webhooks.wait_ready("a")
    ns = _namespace(core, f"wh-nf-{webhooks.suffix}", webhooks.suffix)
    left = _create(core, ns, _gpu_pod("unnamed", **{"nvidia.com/gpu": "1"}))
    assert left.spec.scheduler_name == "default-scheduler"
    assert "nvidia.com/gpucores" not in left.spec.containers[0].resources.limits
    named = _gpu_pod("named", **{"nvidia.com/gpu": "1"})
    named["spec"]["schedulerName"] = "hami-scheduler"
    taken = _create(core, ns, named)
    assert taken.spec.scheduler_name == "hami-scheduler"
    assert "nvidia.com/gpucores" in taken.spec.containers[0].resources.limits


def _record(name: str, body: dict) -> None:
    path = FIXTURES / name
    if os.environ.get("HAMI_RECORD_FIXTURES") == "1" or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body, indent=2) + "\n")
        return
    stored = json.loads(path.read_text())
    assert set(body) == set(stored), f"{name}: kube-apiserver now sends {sorted(body)}"
    assert set(body["request"]) == set(stored["request"]), f"{name}: request keys changed"


def test_record_admission_reviews(control_plane):
    """What kube-apiserver sends for each review version, kept as wire fixtures."""
    suffix = uuid.uuid4().hex[:6]
    got: dict[str, list[dict]] = {}
    app = Flask("recorder")

    @app.post("/<version>")
    def record(version: str):
        body = request.get_json(force=True)
        got.setdefault(version, []).append(body)
        return jsonify(
            {
                "apiVersion": body["apiVersion"],
                "kind": "AdmissionReview",
                "response": {"uid": body["request"]["uid"], "allowed": True},
            }
        )

    scratch = Path(tempfile.mkdtemp(prefix="hami-rec-"))
    bundle = certs.generate_bundle(dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    certs.write_key_pair(bundle, cert_file=scratch / "tls.crt", key_file=scratch / "tls.key")
    stop, ready = threading.Event(), threading.Event()
    ports: list[int] = []
    thread = threading.Thread(
        target=serve_https,
        kwargs={
            "app": app,
            "host": "127.0.0.1",
            "port": 0,
            "cert_file": str(scratch / "tls.crt"),
            "key_file": str(scratch / "tls.key"),
            "threads": 2,
            "stop": stop,
            "on_ready": lambda p: (ports.append(p), ready.set()),
        },
        daemon=True,
    )
    thread.start()
    assert ready.wait(10)
    api = control_plane.api_client()
    adm = client.AdmissionregistrationV1Api(api)
    core = client.CoreV1Api(api)
    name = f"recorder-{suffix}"
    hooks = [
        _webhook(f"{v}.recorder.hami.io", f"https://127.0.0.1:{ports[0]}/{v}", suffix, [v])
        for v in ("v1", "v1beta1")
    ]
    for h in hooks:
        h["clientConfig"]["caBundle"] = bundle.ca_bundle_b64
    adm.create_mutating_webhook_configuration(_config(name, hooks))
    try:
        ns = _namespace(core, f"rec-{suffix}", suffix)
        pod = _gpu_pod("gpu", **{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"})
        pod["metadata"] = {"generateName": "gpu-", "labels": {"app": "demo"}}
        created = _create(core, ns, pod)
        core.patch_namespaced_pod(
            created.metadata.name, ns, {"metadata": {"labels": {"app": "demo2"}}}
        )
        core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"k": "v"}})
    finally:
        adm.delete_mutating_webhook_configuration(name)
        stop.set()
        thread.join(10)
        shutil.rmtree(scratch, ignore_errors=True)

    def pick(version: str, kind: str, operation: str) -> dict:
        return next(
            b
            for b in got[version]
            if b["request"]["kind"]["kind"] == kind and b["request"]["operation"] == operation
        )

    _record("v1-pod-create.json", pick("v1", "Pod", "CREATE"))
    _record("v1beta1-pod-create.json", pick("v1beta1", "Pod", "CREATE"))
    _record("v1-pod-update.json", pick("v1", "Pod", "UPDATE"))
    _record("v1-configmap-create.json", pick("v1", "ConfigMap", "CREATE"))


def test_secret_and_ca_bundle_against_the_api(control_plane):
    """ensure_secret: create, reuse, reissue from the same CA, regenerate a broken one;
    patch_ca_bundle: every webhook, idempotent, clear errors."""
    api = control_plane.api_client()
    core = client.CoreV1Api(api)
    adm = client.AdmissionregistrationV1Api(api)
    suffix = uuid.uuid4().hex[:6]
    name = f"tls-{suffix}"
    dns = certs.service_dns_names("hami-webhook", "default")

    first = certs.ensure_secret(api, namespace="default", name=name, dns_names=dns)
    assert certs.ensure_secret(api, namespace="default", name=name, dns_names=dns) == first
    wider = certs.ensure_secret(
        api, namespace="default", name=name, dns_names=dns, ip_addresses=["127.0.0.1"]
    )
    assert wider.ca_pem == first.ca_pem and wider.cert_pem != first.cert_pem
    stored = core.read_namespaced_secret(name, "default")
    assert certs.bundle_from_secret({"data": stored.data}) == wider
    assert stored.metadata.labels == {"app.kubernetes.io/managed-by": "hami"}

    # someone broke the Secret: it is made again
    core.patch_namespaced_secret(
        name, "default", {"data": {"ca.crt": base64.b64encode(b"junk").decode()}}
    )
    fresh = certs.ensure_secret(api, namespace="default", name=name, dns_names=dns)
    assert fresh.ca_pem != first.ca_pem

    config = f"cfg-{suffix}"
    hooks = [
        _webhook(f"{i}.hami.io", f"https://127.0.0.1:1/{i}", suffix, ["v1"]) for i in ("a", "b")
    ]
    adm.create_mutating_webhook_configuration(_config(config, hooks))
    try:
        assert certs.patch_ca_bundle(api, name=config, ca_pem=fresh.ca_pem) == 2
        assert certs.patch_ca_bundle(api, name=config, ca_pem=fresh.ca_pem) == 0
        raw = json.loads(
            adm.read_mutating_webhook_configuration(config, _preload_content=False).data
        )
        assert {w["clientConfig"]["caBundle"] for w in raw["webhooks"]} == {fresh.ca_bundle_b64}
        assert [w["name"] for w in raw["webhooks"]] == ["a.hami.io", "b.hami.io"]
    finally:
        adm.delete_mutating_webhook_configuration(config)
    with pytest.raises(certs.CertificateError, match="not found"):
        certs.patch_ca_bundle(api, name=config, ca_pem=fresh.ca_pem)


def test_files_mode_serves_the_given_certificate(control_plane, tmp_path):
    bundle = certs.generate_bundle(dns_names=["localhost"], ip_addresses=["127.0.0.1"])
    certs.write_key_pair(bundle, cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key")
    port = free_port()
    name = f"webhook-files-{uuid.uuid4().hex[:6]}"
    control_plane.start_process(
        name,
        [
            HAMI,
            "webhook",
            "--kubeconfig",
            str(control_plane.kubeconfig_path),
            "--bind-address",
            "127.0.0.1",
            "--port",
            str(port),
            "--tls-cert-file",
            str(tmp_path / "tls.crt"),
            "--tls-private-key-file",
            str(tmp_path / "tls.key"),
        ],
        env={"PYTHONUNBUFFERED": "1"},
    )
    try:

        def ready():
            try:
                url = f"https://127.0.0.1:{port}/readyz"
                with urllib.request.urlopen(
                    url, context=_ca_context(bundle.ca_pem), timeout=2
                ) as r:
                    return r.status == 200
            except OSError:
                return False

        control_plane.wait_for(ready, timeout=60, message="webhook in files mode ready")
    finally:
        assert control_plane.stop_process(name) == 0  # SIGTERM is a clean shutdown


def test_a_container_asking_for_no_gpu_gets_none_on_a_real_api_server(
    webhooks, control_plane, tmp_path
):
    """NVIDIA's container toolkit hands a container the GPUs its ``NVIDIA_VISIBLE_DEVICES``
    names, image env included (CUDA images: ``all``), unprivileged too by default: the
    sidecar and init container of a GPU pod get ``none`` as stored by kube-apiserver, a
    sidecar stating ``all`` is denied, and with HAMi's ``nvidia.overwriteEnv`` a plain pod
    (no GPU anywhere, any ``schedulerName``, the pod's own ignore label) gets ``none``."""
    config = tmp_path / "hami.yaml"
    config.write_text("version: v1\nnvidia:\n  overwriteEnv: true\n")
    core = webhooks.core
    port = webhooks.start("a", "--config", str(config))
    url = f"https://127.0.0.1:{port}/webhook"
    webhooks.adm.create_mutating_webhook_configuration(
        _config(webhooks.config_name, [_webhook("pods.hami.io", url, webhooks.suffix, ["v1"])])
    )
    webhooks.wait_ready("a")
    ns = _namespace(core, f"wh-ve-{webhooks.suffix}", webhooks.suffix)

    def env(c) -> dict:
        return {e.name: e.value for e in c.env or []}

    cuda = {"name": "side", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    pod = _gpu_pod("gpu", **{"nvidia.com/gpu": "1"})
    pod["spec"]["containers"].append(
        cuda | {"envFrom": [{"configMapRef": {"name": "all-gpus", "optional": True}}]}
    )
    pod["spec"]["initContainers"] = [
        cuda | {"name": "setup", "env": [{"name": "nvidia_visible_devices", "value": "all"}]}
    ]
    created = _create(core, ns, pod)
    assert "NVIDIA_VISIBLE_DEVICES" not in env(created.spec.containers[0])
    assert env(created.spec.containers[1])["NVIDIA_VISIBLE_DEVICES"] == "none"
    assert env(created.spec.init_containers[0]) == {
        "nvidia_visible_devices": "all",  # another variable: no runtime reads it
        "NVIDIA_VISIBLE_DEVICES": "none",
    }

    bad = _gpu_pod("bad", **{"nvidia.com/gpu": "1"})
    bad["spec"]["containers"].append(
        cuda | {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    )
    status, message = _denial(core, ns, bad)
    assert status == 403 and "'side'" in message and "NVIDIA_VISIBLE_DEVICES='all'" in message

    plain = {
        "metadata": {"name": "plain", "labels": {"hami.io/webhook": "ignore"}},
        "spec": {"schedulerName": "other-scheduler", "containers": [cuda]},
    }
    stored = _create(core, ns, plain)
    assert stored.spec.scheduler_name == "other-scheduler"
    assert env(stored.spec.containers[0]) == {"NVIDIA_VISIBLE_DEVICES": "none"}
    plain["metadata"]["name"] = "plain-all"
    plain["spec"]["containers"] = [
        cuda | {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    ]
    status, message = _denial(core, ns, plain)
    assert status == 403 and "NVIDIA_VISIBLE_DEVICES" in message
