"""The webhook app through Flask's test client, with the AdmissionReviews kube-apiserver
v1.20.2 sent (tests/fixtures/admission/, recorded by tests/e2e/test_webhook.py), and
over real HTTPS on loopback."""

from __future__ import annotations

import base64
import copy
import json
import socket
import ssl
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import jsonpatch
import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.cluster import MemoryCluster
from hami_core.errors import BackendError, NotFoundError
from hami_core.plugin import BackendManager, hookimpl
from hami_core.servers import certs
from hami_core.servers.https import make_https_server, serve_https
from hami_core.servers.review import parse_review, review_response
from hami_core.servers.webhook import NamespaceLabels, create_webhook_app
from hami_core.webhook import Admission, AdmissionResult
from hami_core.webhook.mutation import apply_patch
from tests.builders import manager
from tests.toy_backend import ToyBackend

FIXTURES = Path(__file__).parent.parent / "fixtures" / "admission"
GPU = "nvidia.com/gpu"
MEM = "nvidia.com/gpumem"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def pod_review(version: str = "v1", **limits: str) -> dict:
    """The recorded pod CREATE, with the main container's limits replaced when given."""
    body = fixture(f"{version}-pod-create.json")
    if limits:
        c = body["request"]["object"]["spec"]["containers"][0]
        c["resources"] = {"limits": dict(limits)}
    return body


def obj(body: dict) -> dict:
    return body["request"]["object"]


@pytest.fixture
def mgr():
    return manager()


@pytest.fixture
def client(mgr):
    return create_webhook_app(Admission(mgr)).test_client()


def post(client, body) -> dict:
    resp = client.post("/webhook", json=body)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()


def decoded_patch(response: dict) -> list[dict]:
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


# -- the fixtures are what the API server sends ----------------------------------------


def test_fixtures_are_the_recorded_shapes():
    for name in ("v1-pod-create.json", "v1beta1-pod-create.json"):
        body = fixture(name)
        review = parse_review(body)
        assert review.is_pod_create and review.uid and review.namespace
        assert body["request"]["requestKind"] == {"group": "", "version": "v1", "kind": "Pod"}
        assert body["request"]["oldObject"] is None
        # the API server canonicalises quantities and copies extended-resource limits
        res = obj(body)["spec"]["containers"][0]["resources"]
        assert res["limits"][MEM] == "4k" and res["requests"] == res["limits"]
    assert fixture("v1beta1-pod-create.json")["apiVersion"] == "admission.k8s.io/v1beta1"
    assert fixture("v1-pod-update.json")["request"]["oldObject"]["kind"] == "Pod"


# -- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_round_trip_mutates_the_recorded_pod(client, mgr, version):
    body = pod_review(version)
    out = post(client, body)
    assert out["apiVersion"] == f"admission.k8s.io/{version}"
    assert out["kind"] == "AdmissionReview"
    resp = out["response"]
    assert resp["uid"] == body["request"]["uid"]
    assert resp["allowed"] is True
    assert "status" not in resp
    patch = decoded_patch(resp)
    assert patch == list(Admission(mgr).review(obj(body)).patch)

    pod = jsonpatch.apply_patch(obj(body), patch)
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    c = pod["spec"]["containers"][0]["resources"]
    assert c["limits"][GPU] == "1" and c["limits"][MEM] == "4k"
    assert c["limits"]["nvidia.com/gpucores"] == "0"  # the default of PROTOCOL.md §1
    assert c["requests"] == c["limits"]


def test_defaults_and_env_from_bare_limits(client):
    body = pod_review(**{GPU: "2"})
    p = obj(body)
    p["metadata"]["annotations"] = {"hami.io/core-policy": "force"}
    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/priority"] = "1"
    pod = jsonpatch.apply_patch(p, decoded_patch(post(client, body)["response"]))
    c = pod["spec"]["containers"][0]
    assert c["resources"]["requests"][GPU] == "2"
    # count only (whole memory, no cores): an exclusive device, PROTOCOL.md §1
    assert c["resources"]["requests"]["nvidia.com/gpucores"] == "100"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env == {"CUDA_TASK_PRIORITY": "1", "GPU_CORE_UTILIZATION_POLICY": "force"}


def test_object_without_namespace_takes_the_request_namespace(mgr):
    body = pod_review()
    # kube-apiserver sends a created pod without metadata.namespace when the client's
    # manifest had none (the recorded fixture is such a pod)
    assert "namespace" not in obj(body)["metadata"]
    body["request"]["namespace"] = "team"
    store = MemoryCluster()
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits." + MEM: "1000"}},
        }
    )
    out = post(create_webhook_app(Admission(mgr, store)).test_client(), body)["response"]
    assert out["allowed"] is False and "team/" in out["status"]["message"]
    # the patch of an allowed pod still applies to the object as sent (no namespace)
    store2 = MemoryCluster()
    ok = post(create_webhook_app(Admission(mgr, store2)).test_client(), body)["response"]
    assert jsonpatch.apply_patch(obj(body), decoded_patch(ok))["spec"]["schedulerName"]


# -- denials ----------------------------------------------------------------------------


def test_privileged_container_is_denied_403(client):
    body = pod_review()
    obj(body)["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    resp = post(client, body)["response"]
    assert resp["uid"] == body["request"]["uid"]
    assert resp["allowed"] is False
    assert "patch" not in resp and "patchType" not in resp
    status = resp["status"]
    assert status["code"] == 403
    assert status["reason"] == "PrivilegedContainer"
    assert "'main' is privileged" in status["message"]


def test_16gi_as_mib_is_invalid_input_400(client):
    resp = post(client, pod_review(**{GPU: "1", MEM: "16Gi"}))["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 400
    assert resp["status"]["reason"] == "InvalidRequest"
    assert MEM in resp["status"]["message"] and "'16Gi'" in resp["status"]["message"]


def test_quota_denial_names_the_quota(mgr):
    body = pod_review(**{GPU: "1", MEM: "16000"})
    ns = body["request"]["namespace"]
    spec = obj(body)["spec"]
    spec["containers"].append(copy.deepcopy(spec["containers"][0]) | {"name": "second"})
    store = MemoryCluster()
    store.add_quota(
        {
            "metadata": {"name": "gpu-quota", "namespace": ns},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "24000"}},
        }
    )
    client = create_webhook_app(Admission(mgr, store)).test_client()
    resp = post(client, body)["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 403
    assert resp["status"]["reason"] == "ResourceQuotaNotFit"
    msg = resp["status"]["message"]
    assert "gpu-quota" in msg and "limits.nvidia.com/gpumem 24000" in msg and "32000" in msg


def test_node_name_and_owned_annotations_are_denied(client):
    body = pod_review()
    obj(body)["spec"]["nodeName"] = "n1"
    resp = post(client, body)["response"]
    assert (resp["status"]["code"], resp["status"]["reason"]) == (403, "NodeNamePreset")
    body = pod_review()
    obj(body)["metadata"]["annotations"] = {"hami.io/vgpu-node": "n1"}
    resp = post(client, body)["response"]
    assert resp["status"]["reason"] == "SchedulerOwnedAnnotation"


# -- passthrough ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["v1-pod-update.json", "v1-configmap-create.json"])
def test_other_operations_and_kinds_pass_unchanged(client, name):
    body = fixture(name)
    out = post(client, body)
    assert out == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": body["request"]["uid"], "allowed": True},
    }


def test_delete_and_subresources_pass(client):
    body = pod_review()
    body["request"].update(operation="DELETE", object=None)
    assert post(client, body)["response"] == {"uid": body["request"]["uid"], "allowed": True}
    body = pod_review()
    body["request"]["subResource"] = "ephemeralcontainers"
    assert post(client, body)["response"]["allowed"] is True
    assert "patch" not in post(client, body)["response"]


def test_pod_without_managed_resources_is_not_patched(client):
    body = pod_review()
    obj(body)["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    assert post(client, body)["response"] == {"uid": body["request"]["uid"], "allowed": True}


def test_pod_of_another_scheduler_is_left_alone(client):
    body = pod_review()
    obj(body)["spec"]["schedulerName"] = "volcano"
    assert "patch" not in post(client, body)["response"]


# -- namespace labels -------------------------------------------------------------------


def test_ignored_namespace_and_pod_are_not_touched(mgr):
    seen = []

    def labels(ns):
        seen.append(ns)
        return {"hami.io/webhook": "ignore"}

    client = create_webhook_app(Admission(mgr), namespace_labels=labels).test_client()
    body = pod_review()
    assert post(client, body)["response"] == {"uid": body["request"]["uid"], "allowed": True}
    assert seen == [body["request"]["namespace"]]

    plain = create_webhook_app(Admission(mgr), namespace_labels=lambda ns: {}).test_client()
    body = pod_review()
    obj(body)["metadata"]["labels"]["hami.io/webhook"] = "ignore"
    # The object label does not exempt a pod that asks for managed devices (#12 item 2).
    assert "patch" in post(plain, body)["response"]
    assert "patch" in post(plain, pod_review())["response"]


def test_failed_namespace_lookup_denies_only_device_pods(mgr):
    def broken(ns):
        raise OSError("connection refused")

    client = create_webhook_app(Admission(mgr), namespace_labels=broken).test_client()
    resp = post(client, pod_review())["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 500
    assert "cannot read the labels of namespace" in resp["status"]["message"]
    assert "connection refused" in resp["status"]["message"]
    body = pod_review()
    obj(body)["spec"]["containers"][0]["resources"] = {}
    assert post(client, body)["response"]["allowed"] is True


def test_namespace_label_cache():
    now = [0.0]
    calls = []

    def fetch(ns):
        calls.append(ns)
        if ns == "gone":
            raise NotFoundError("namespace gone")
        if ns == "bad":
            raise OSError("timeout")
        return {"team": ns}

    cache = NamespaceLabels(fetch, ttl_s=30, clock=lambda: now[0])
    assert cache("a") == {"team": "a"}
    assert cache("a") == {"team": "a"}
    assert calls == ["a"]
    now[0] = 31
    cache("a")
    assert calls == ["a", "a"]
    assert cache("gone") == {} and cache("gone") == {}
    assert calls.count("gone") == 1
    for _ in range(2):
        with pytest.raises(OSError):
            cache("bad")
    assert calls.count("bad") == 2  # errors are not cached


# -- malformed input --------------------------------------------------------------------


def _error(resp, code=400) -> str:
    assert resp.status_code == code
    assert resp.is_json
    return resp.get_json()["error"]


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"{not json", "JSON object"),
        (b"", "JSON object"),
        (b"null", "JSON object"),
        (b"[1, 2]", "JSON object"),
        (b'{"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview"}', "not supported"),
        (b'{"kind": "AdmissionReview", "request": {"uid": "x"}}', "not supported"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {}}', "kind must be"),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "request is missing"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": 3}',
            "not an object",
        ),
        (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}', "uid"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}}',
            "uid",
        ),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}',
            "uid",
        ),
    ],
)
def test_unreadable_reviews_get_http_400(client, raw, expected):
    resp = client.post("/webhook", data=raw, content_type="application/json")
    assert expected in _error(resp)


def test_body_without_json_content_type_is_still_read(client):
    body = pod_review()
    resp = client.post("/webhook", data=json.dumps(body), content_type="text/plain")
    assert resp.status_code == 200 and resp.get_json()["response"]["allowed"] is True


def _denied_400(client, body, expected):
    out = post(client, body)
    resp = out["response"]
    assert out["apiVersion"] == body["apiVersion"]
    assert resp["uid"] == body["request"]["uid"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 400 and resp["status"]["reason"] == "BadRequest"
    assert expected in resp["status"]["message"]


def test_bad_content_with_a_uid_is_denied_in_a_review(client):
    body = pod_review("v1beta1")
    body["request"]["kind"] = "Pod"
    _denied_400(client, body, "request.kind")
    body = pod_review()
    del body["request"]["operation"]
    _denied_400(client, body, "AdmissionReview.request.operation is missing")
    body = pod_review()
    body["request"]["operation"] = ["CREATE"]
    _denied_400(client, body, "AdmissionReview.request.operation must be a string, got list")
    body = pod_review()
    body["request"]["namespace"] = 5
    _denied_400(client, body, "request.namespace must be a string")
    body = pod_review()
    body["request"]["kind"]["group"] = ["core"]
    _denied_400(client, body, "request.kind.group")


@pytest.mark.parametrize("bad", [None, "a pod", [1], 3])
def test_object_that_is_not_a_pod_object(client, bad):
    body = pod_review()
    body["request"]["object"] = bad
    _denied_400(client, body, "must be a Pod object")


def test_metadata_or_spec_that_is_not_an_object(client):
    body = pod_review()
    obj(body)["metadata"] = "x"
    _denied_400(client, body, "metadata and spec")
    body = pod_review()
    obj(body)["spec"] = []
    _denied_400(client, body, "metadata and spec")
    body = pod_review()
    obj(body)["metadata"] = None  # absent metadata is fine
    assert post(client, body)["response"]["allowed"] is True


def test_container_shapes_that_break_the_review_are_denied_not_crashed(client):
    body = pod_review()
    obj(body)["spec"]["containers"] = "nope"
    resp = post(client, body)["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 400
    assert "spec.containers must be a list" in resp["status"]["message"]


def _denied_invalid(client, body, expected):
    """Denied by the admission checks as an invalid pod (400), the cause named."""
    resp = post(client, body)["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 400 and resp["status"]["reason"] == "InvalidRequest"
    assert expected in resp["status"]["message"]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("env", True, "spec.containers[0].env must be a list"),
        ("env", ["CUDA_DEVICE_MEMORY_LIMIT=1"], "spec.containers[0].env[0] must be an object"),
        ("env", [{"name": 3, "value": "1"}], "env[0] must be an object with a string name"),
        ("envFrom", 1, "spec.containers[0].envFrom must be a list"),
        ("envFrom", ["x"], "spec.containers[0].envFrom[0] must be an object"),
        ("envFrom", [{"prefix": {}}], "envFrom[0].prefix must be a string"),
        ("envFrom", [{"configMapRef": "cm"}], "envFrom[0].configMapRef must be an object"),
        ("envFrom", [{"prefix": "A_", "secretRef": ["s"]}], "envFrom[0].secretRef must be"),
        ("securityContext", "privileged", "spec.containers[0].securityContext must be an object"),
        ("restartPolicy", ["Always"], "spec.containers[0].restartPolicy must be a string"),
        ("volumeMounts", "/etc", "spec.containers[0].volumeMounts must be a list"),
        ("volumeMounts", [{"mountPath": 3}], "volumeMounts[0] must be an object with a string"),
        ("volumeDevices", [{}], "volumeDevices[0] must be an object with a string devicePath"),
    ],
)
def test_malformed_container_fields_of_a_device_pod_are_named(client, field, value, expected):
    """Fields the trust and privilege checks read, malformed in a container that asks for
    a GPU: a 400 naming the field (never an InternalError from deep inside a check)."""
    body = pod_review(**{GPU: "1", MEM: "1000"})
    obj(body)["spec"]["containers"][0][field] = value
    _denied_invalid(client, body, expected)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("Running", "pod status must be an object"),
        ({"phase": 3}, "pod status.phase must be a string"),
        ({"initContainerStatuses": 7}, "status.initContainerStatuses must be a list of objects"),
    ],
)
def test_malformed_status_is_named(client, status, expected):
    body = pod_review(**{GPU: "1"})
    obj(body)["status"] = status
    _denied_invalid(client, body, expected)


class _Broken(ToyBackend):
    @hookimpl
    def hami_mutate(self, container, container_path):
        raise RuntimeError("driver exploded")


def test_backend_exception_is_a_denial_with_the_message():
    mgr = BackendManager.from_plugins({"toy": _Broken()})
    client = create_webhook_app(Admission(mgr)).test_client()
    body = pod_review(**{"toy.example.com/dev": "1"})
    resp = post(client, body)["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 500
    assert resp["status"]["reason"] == "BackendError"
    assert "driver exploded" in resp["status"]["message"]
    assert "toy" in resp["status"]["message"]


class _Stub(Admission):
    def __init__(self, outcome):
        self.outcome = outcome

    def review(self, pod, *, namespace_labels=None, user=None):
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def test_unexpected_exception_is_a_denial_without_a_stack_trace():
    client = create_webhook_app(_Stub(KeyError("spec"))).test_client()
    resp = post(client, pod_review())["response"]
    assert resp["allowed"] is False
    assert resp["status"] == {
        "status": "Failure",
        "code": 500,
        "message": resp["status"]["message"],
        "reason": "InternalError",
    }
    assert "KeyError" in resp["status"]["message"] and "Traceback" not in resp["status"]["message"]
    client = create_webhook_app(_Stub(BackendError("x", "broken"))).test_client()
    assert post(client, pod_review())["response"]["status"]["reason"] == "BackendError"


def test_a_patch_that_does_not_apply_is_refused():
    bad = AdmissionResult(patch=({"op": "remove", "path": "/spec/nothing"},), mutated=True)
    client = create_webhook_app(_Stub(bad)).test_client()
    resp = post(client, pod_review())["response"]
    assert resp["allowed"] is False and resp["status"]["code"] == 500
    assert "does not apply" in resp["status"]["message"]


def test_http_errors_are_json(client):
    assert "not allowed" in _error(client.get("/webhook"), 405).lower()
    assert _error(client.get("/nope"), 404)
    big = b'{"x": "' + b"a" * (16 * 1024 * 1024 + 1) + b'"}'
    assert _error(client.post("/webhook", data=big, content_type="application/json"), 413)


def test_health_and_readiness(mgr):
    state = {"ready": False}
    client = create_webhook_app(Admission(mgr), is_ready=lambda: state["ready"]).test_client()
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 503
    state["ready"] = True
    assert client.get("/readyz").status_code == 200


def test_review_response_shapes():
    assert review_response("admission.k8s.io/v1", "u", allowed=True) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u", "allowed": True},
    }
    out = review_response(
        "admission.k8s.io/v1beta1",
        "u",
        allowed=True,
        patch=[{"op": "add", "path": "/a", "value": 1}],
    )
    assert base64.b64decode(out["response"]["patch"]) == b'[{"op":"add","path":"/a","value":1}]'
    denied = review_response(
        "admission.k8s.io/v1", "u", allowed=False, code=403, message="m", reason="R"
    )
    assert denied["response"]["status"] == {
        "status": "Failure",
        "code": 403,
        "message": "m",
        "reason": "R",
    }


# -- real HTTPS -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    bundle = certs.generate_bundle(
        dns_names=certs.service_dns_names("hami-webhook", "kube-system"), ip_addresses=["127.0.0.1"]
    )
    certs.write_key_pair(bundle, cert_file=d / "tls.crt", key_file=d / "tls.key")
    return bundle, str(d / "tls.crt"), str(d / "tls.key")


def _https_post(port, ca_pem, body):
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    req = urllib.request.Request(
        f"https://127.0.0.1:{port}/webhook",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def test_serve_https_answers_a_review_and_shuts_down(mgr, tls_files):
    bundle, cert_file, key_file = tls_files
    app = create_webhook_app(Admission(mgr))
    stop, ready = threading.Event(), threading.Event()
    ports = []
    thread = threading.Thread(
        target=serve_https,
        args=(app,),
        kwargs={
            "host": "127.0.0.1",
            "port": 0,
            "cert_file": cert_file,
            "key_file": key_file,
            "threads": 2,
            "stop": stop,
            "on_ready": lambda p: (ports.append(p), ready.set()),
        },
        daemon=True,
    )
    thread.start()
    try:
        assert ready.wait(10)
        body = pod_review()
        status, out = _https_post(ports[0], bundle.ca_pem, body)
        assert status == 200
        assert out["response"]["uid"] == body["request"]["uid"]
        assert decoded_patch(out["response"])
        # a client that does not trust the CA is refused
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"https://127.0.0.1:{ports[0]}/healthz", timeout=5)
        # plain HTTP on the TLS port gets an answer, not a hang
        with socket.create_connection(("127.0.0.1", ports[0]), timeout=5) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                answer = s.recv(100)
            except ConnectionResetError:
                answer = b""
            assert answer == b"" or answer.startswith(b"HTTP/1.1 400")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", ports[0]), timeout=1)


def test_make_https_server_run_and_close(mgr, tls_files):
    bundle, cert_file, key_file = tls_files
    server = make_https_server(
        create_webhook_app(Admission(mgr)),
        host="127.0.0.1",
        port=0,
        cert_file=cert_file,
        key_file=key_file,
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        ctx = ssl.create_default_context(cadata=bundle.ca_pem.decode())
        with urllib.request.urlopen(
            f"https://127.0.0.1:{server.port}/readyz", context=ctx, timeout=5
        ) as r:
            assert json.loads(r.read()) == {"status": "ok"}
    finally:
        server.close()
        thread.join(10)
    assert not thread.is_alive()


def test_https_server_refuses_bad_files(tmp_path, tls_files):
    _, cert_file, _ = tls_files
    other = certs.generate_bundle(dns_names=["x"])
    key = tmp_path / "other.key"
    key.write_bytes(other.key_pem)
    with pytest.raises((OSError, ssl.SSLError)):
        make_https_server(
            lambda e, s: [], host="127.0.0.1", port=0, cert_file=cert_file, key_file=str(key)
        )
    with pytest.raises(OSError):
        make_https_server(
            lambda e, s: [],
            host="127.0.0.1",
            port=0,
            cert_file=str(tmp_path / "none"),
            key_file=str(key),
        )


# -- CLI --------------------------------------------------------------------------------


WEBHOOK_FLAGS = {
    "--bind-address": "0.0.0.0",
    "--port": "9443",
    "--cert-mode": "files",
    "--tls-cert-file": "auto mode: a temporary file",
    "--tls-private-key-file": "auto mode: a temporary file",
    "--service-name": "hami-webhook",
    "--service-namespace": "kube-system",
    "--webhook-config-name": "hami-webhook",
    "--secret-name": "hami-webhook-tls",
    "--cert-ip-address": "none",
    "--cert-dns-name": "none",
    "--kubeconfig": "in-cluster config",
    "--config": "built-in defaults",
    "--http_bind": "--bind-address and --port",
    "--scheduler-name": "from config (hami-scheduler)",
    "--force-overwrite-default-scheduler": "from config (on)",
    "--threads": "8",
    "--namespace-cache-seconds": "30",
    "--trusted-user": "system:serviceaccount:<ns>:hami-scheduler",
    "--log-level": "info",
}


def test_webhook_help_documents_every_flag_with_its_default():
    result = CliRunner().invoke(cli, ["webhook", "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    options = result.output.split("Options:", 1)[1]
    entries: dict[str, str] = {}
    flag = ""
    for line in options.splitlines():
        text = line.strip()
        if text.startswith("-"):
            flag = text.split()[0].rstrip(",")
            entries[flag] = text
        elif flag:
            entries[flag] += " " + text
    for flag, default in WEBHOOK_FLAGS.items():
        entry = " ".join(entries[flag].split()).replace("- ", "-")  # hyphen wraps
        assert ("[default:" in entry or "default: " in entry) and default in entry, entry
    assert set(entries) - {"-h"} == set(WEBHOOK_FLAGS)


def test_files_mode_without_files_is_a_one_line_error():
    out = subprocess.run(
        [sys.executable, "-m", "hami_core", "webhook", "--cert-mode", "files"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--tls-cert-file" in out.stderr and "Traceback" not in out.stderr


def test_an_ephemeral_container_update_is_answered_with_its_patch(client):
    """``kubectl debug`` on a pod of ours (the ``pods/ephemeralcontainers`` UPDATE, the Pod
    as the object from Kubernetes 1.22): the debugger, which asks for no GPU, gets
    ``NVIDIA_VISIBLE_DEVICES=none`` in the answer; one stating ``all`` is denied."""
    body = fixture("v1-pod-update.json")
    req = body["request"]
    req["subResource"] = "ephemeralcontainers"
    for o in (req["object"], req["oldObject"]):
        o["spec"]["schedulerName"] = "hami-scheduler"
    debugger = {"name": "debugger", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    req["object"]["spec"]["ephemeralContainers"] = [debugger]
    out = post(client, body)["response"]
    assert out["allowed"] is True
    stored = jsonpatch.apply_patch(copy.deepcopy(req["object"]), decoded_patch(out))
    assert stored["spec"]["ephemeralContainers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
    ]
    debugger["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    out = post(client, body)["response"]
    assert out["allowed"] is False and out["status"]["code"] == 403
    assert "'debugger'" in out["status"]["message"]


def test_an_ephemeral_containers_object_of_kubernetes_1_20_follows_overwrite_env():
    """On 1.16-1.21 the subresource's object is ``EphemeralContainers`` (no pod spec):
    only ``nvidia.overwriteEnv`` applies, and the answer patches that object."""
    app = create_webhook_app(Admission(manager({"nvidia": {"overwriteEnv": True}})))
    meta = {"name": "p", "namespace": "default", "uid": "u1"}
    old = {"apiVersion": "v1", "kind": "EphemeralContainers", "metadata": meta}
    new = old | {"ephemeralContainers": [{"name": "debugger", "image": "cuda"}]}
    kind = {"group": "", "version": "v1", "kind": "EphemeralContainers"}
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r1",
            "kind": kind,
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "ephemeralcontainers",
            "name": "p",
            "namespace": "default",
            "operation": "UPDATE",
            "userInfo": {"username": "tenant"},
            "object": new,
            "oldObject": old,
        },
    }
    out = post(app.test_client(), body)["response"]
    assert out["allowed"] is True
    stored = jsonpatch.apply_patch(copy.deepcopy(new), decoded_patch(out))
    assert stored["ephemeralContainers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
    ]


def test_a_patch_applied_to_check_it_is_sent_unchanged():
    """jsonpatch 1.33 (the declared floor, run by tests/packaging/test_floors.py) put an
    ``add`` operation's value object into the document as it was, so the webhook's check
    that its patch applies (an ``env`` list added, then an entry appended into it) grew
    the first operation's value, and the answer added the entry twice. ``apply_patch``
    copies the operations: they are the same after, and applying them twice gives the
    same document."""
    ops = [
        {"op": "add", "path": "/spec/containers/0/env", "value": []},
        {
            "op": "add",
            "path": "/spec/containers/0/env/-",
            "value": {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
        },
    ]
    sent = copy.deepcopy(ops)
    pod = {"spec": {"containers": [{"name": "sidecar"}]}}
    first = apply_patch(copy.deepcopy(pod), ops)
    assert ops == sent
    again = apply_patch(copy.deepcopy(pod), ops)
    assert first == again
    assert first["spec"]["containers"][0]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
    ]
    in_place = copy.deepcopy(pod)
    apply_patch(in_place, ops, in_place=True)
    in_place["spec"]["containers"][0]["env"].append({"name": "LATER", "value": "x"})
    assert ops == sent  # the document shares no object with the operations


@pytest.mark.parametrize("side", ["object", "oldObject"])
@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        (7, "pod metadata must be an object"),
        (["x"], "pod metadata must be an object"),
        ({"name": 7}, "pod metadata.name must be a string"),
    ],
)
def test_a_malformed_pod_update_is_named_not_an_internal_error(client, side, metadata, expected):
    """An UPDATE whose pod has malformed metadata is a 400 naming the field, as on CREATE;
    the message's ``namespace/name`` was read from that metadata (a 500 before)."""
    body = fixture("v1-pod-update.json")
    body["request"][side]["metadata"] = metadata
    out = post(client, body)["response"]
    assert out["allowed"] is False
    assert out["status"]["code"] == 400, out["status"]
    assert expected in out["status"]["message"]
    assert "internal error" not in out["status"]["message"]
