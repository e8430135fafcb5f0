"""``hami ui`` against the real API server and scheduler (1.20.2): a pod bound by hami's
extender and one Pending, seen in headless Chromium as a person sees them; ServiceAccount
tokens of a viewer with rights to one namespace and of one with none (RBAC, TokenReview,
SubjectAccessReview); every request the web view's own client sends; a screenshot taken
(under the test's tmp directory: a run leaves the checkout as it was; ``make
web-view-screenshot`` names docs/web-view.png through ``HAMI_UI_SCREENSHOT`` to refresh
the documentation's picture)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from hami_core.options import UiOptions
from hami_core.simulate.runner import make_manager
from hami_core.ui.main import make_server
from tests.browser import Browser, chromium_path
from tests.builders import container, gpu, pod
from tests.e2e.hami_stack import HamiStack
from tests.e2e.test_scheduler import add_gpu_node, create, unique, wait_bound

#: The documentation's picture of the page, written only when asked for by name
#: (``HAMI_UI_SCREENSHOT``, what ``make web-view-screenshot`` sets).
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "web-view.png"
#: Markup a tenant puts where the page shows it: a pod's policy annotation is quoted in
#: the pending pod's reason.
XSS = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def stack(control_plane, tmp_path_factory) -> Iterator[HamiStack]:
    s = HamiStack(control_plane, tmp_path_factory.mktemp("hami")).start(replicas=("hami-a",))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def cluster(control_plane, stack) -> Iterator[dict[str, str]]:
    """Two GPU nodes, a bound pod, two Pending ones (one with markup in its policy
    annotation), a namespace beside; tokens of a viewer of ``default`` and of a stranger."""
    control_plane.reset()
    core = client.CoreV1Api(control_plane.api_client())
    rbac = client.RbacAuthorizationV1Api(control_plane.api_client())
    nodes = [unique("ui"), unique("ui")]
    add_gpu_node(control_plane, nodes[0], [gpu(f"GPU-{nodes[0]}-0", memory_mib=8000)])
    add_gpu_node(
        control_plane,
        nodes[1],
        [gpu(f"GPU-{nodes[1]}-{i}", index=i, memory_mib=16000) for i in range(2)],
    )
    create(core, pod("train", container(gpu=1, gpumem=6000, gpucores=30)))
    create(core, pod("infer", container(gpu=1, gpumem=12000, gpucores=60)))
    wait_bound(control_plane, core, ["train", "infer"])
    create(core, pod("too-big", container(gpu=1, gpumem=20000)))
    odd = pod("odd-policy", container(gpu=1, gpumem=1000))
    odd["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": XSS}
    create(core, odd)
    if "ui-other" not in {n.metadata.name for n in core.list_namespace().items}:
        core.create_namespace({"metadata": {"name": "ui-other"}})
    other = pod("other", container(gpu=1, gpumem=1000), namespace="ui-other")
    create(core, other)
    tokens = {}
    for name in ("ui-viewer", "ui-stranger"):
        core.create_namespaced_service_account("default", {"metadata": {"name": name}})
        got = core.create_namespaced_service_account_token(
            name, "default", {"spec": {"expirationSeconds": 3600}}
        )
        tokens[name] = got.status.token
    rbac.create_namespaced_role(
        "default",
        {
            "metadata": {"name": "ui-pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        "default",
        {
            "metadata": {"name": "ui-pod-reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "ui-pod-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "ui-viewer", "namespace": "default"}],
        },
    )
    tokens["admin"] = control_plane.token
    yield {"node0": nodes[0], "node1": nodes[1], **tokens}
    rbac.delete_namespaced_role_binding("ui-pod-reader", "default")
    rbac.delete_namespaced_role("ui-pod-reader", "default")
    for name in ("ui-viewer", "ui-stranger"):
        core.delete_namespaced_service_account(name, "default")
    control_plane.reset(namespaces=["default", "ui-other"])
    control_plane.reset()


@pytest.fixture(scope="module")
def ui(control_plane, cluster) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """The web view on loopback, a token required; every request its own clients send
    (the clients made while the server is made; the test's and the stand-in kubelet's
    are others)."""
    from kubernetes.client import rest

    sent: list[tuple[str, str]] = []
    ours: list[object] = []
    original_init, original_request = rest.RESTClientObject.__init__, rest.RESTClientObject.request

    def init(self, *args, **kwargs):
        ours.append(self)
        original_init(self, *args, **kwargs)

    def recording(self, method, url, *args, **kwargs):
        if any(self is c for c in ours):
            sent.append((method, url))
        return original_request(self, method, url, *args, **kwargs)

    options = UiOptions(
        kubeconfig=str(control_plane.kubeconfig_path), port=0, require_token=True, refresh=1.0
    )
    rest.RESTClientObject.__init__ = init
    try:
        server = make_server(options, make_manager(None))
    finally:
        rest.RESTClientObject.__init__ = original_init
    rest.RESTClientObject.request = recording
    threading.Thread(target=server.run, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.port}", sent
    finally:
        server.close()
        rest.RESTClientObject.request = original_request


def view(url: str, token: str | None) -> tuple[int, dict]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", "/api/view", headers={"Authorization": f"Bearer {token}"} if token else {})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def test_tokens_and_rights_decide_what_is_served(ui, cluster):
    url, _ = ui
    assert view(url, None)[0] == 401
    assert view(url, "not-a-token")[0] == 401
    status, body = view(url, cluster["ui-stranger"])
    assert status == 403 and "ui-stranger" in body["error"]
    status, data = view(url, cluster["ui-viewer"])
    assert status == 200
    assert data["viewer"] == {
        "user": "system:serviceaccount:default:ui-viewer",
        "namespaces": ["default"],
    }
    slices = [s for n in data["nodes"] for g in n["gpus"] for s in g["slices"]]
    assert {s["pod"] for s in slices} == {"default/train", "default/infer", None}
    assert "ui-other" not in json.dumps(data)
    status, data = view(url, cluster["admin"])
    assert status == 200 and data["viewer"]["namespaces"] is None
    assert "ui-other/other" in json.dumps(data)


def test_the_client_only_reads_and_asks_reviews(ui, cluster):
    url, sent = ui
    for token in (None, cluster["ui-stranger"], cluster["ui-viewer"], cluster["admin"]):
        view(url, token)
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        conn.request(
            method, "/api/view", body=b"{}", headers={"Authorization": f"Bearer {cluster['admin']}"}
        )
        assert conn.getresponse().status == 405
    assert sent, "the web view's client sent nothing"
    writes = [(m, u) for m, u in sent if m != "GET"]
    allowed = (
        "/apis/authentication.k8s.io/v1/tokenreviews",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
    )
    assert all(m == "POST" and u.split("?")[0].endswith(allowed) for m, u in writes), writes
    assert {u.split("?")[0].rsplit("/", 1)[-1] for m, u in sent if m == "GET"} <= {
        "nodes",
        "pods",
        "resourcequotas",
    }


@pytest.mark.skipif(
    chromium_path() is None, reason="chromium is not installed (scripts/chromium-install.sh)"
)
def test_what_a_person_sees_and_the_screenshot(ui, cluster, tmp_path):
    url, _ = ui
    screenshot = Path(os.environ.get("HAMI_UI_SCREENSHOT") or tmp_path / "web-view.png")
    docs_before = hashlib.sha256(DOCS_SCREENSHOT.read_bytes()).hexdigest()
    with Browser(width=1100, height=760) as b:
        b.open(f"{url}/#token={cluster['ui-viewer']}")
        b.wait("document.body.dataset.painted", timeout_s=60)
        gpus = b.eval("[...document.querySelectorAll('.gpu')].map(g => g.dataset.uuid)")
        assert sorted(gpus) == sorted(
            [f"GPU-{cluster['node0']}-0", f"GPU-{cluster['node1']}-0", f"GPU-{cluster['node1']}-1"]
        )
        shares = b.eval(
            """Object.fromEntries([...document.querySelectorAll('.bar .seg')].map(s =>
               [s.closest('.bar').dataset.kind + ' ' + s.dataset.pod,
                s.getBoundingClientRect().width / s.closest('.bar').getBoundingClientRect().width]))"""
        )
        # the extender's allocations, drawn to size: train 6000 of 8000 MiB and 30%,
        # infer 12000 of 16000 MiB and 60%
        assert shares["memory default/train"] == pytest.approx(6000 / 8000, abs=0.01)
        assert shares["compute default/train"] == pytest.approx(0.30, abs=0.01)
        assert shares["memory default/infer"] == pytest.approx(12000 / 16000, abs=0.01)
        assert shares["compute default/infer"] == pytest.approx(0.60, abs=0.01)
        pending = b.eval("document.querySelector('#pending').innerText")
        assert "default/too-big" in pending and "CardInsufficientMemory" in pending
        assert "default/odd-policy" in pending
        assert b.eval("window.__xss === undefined")
        assert b.eval("document.querySelectorAll('#view img').length") == 0
        assert "ui-other" not in b.eval("document.body.textContent")
        assert all(u.startswith(url + "/") for u in b.requested_urls())
        b.screenshot(screenshot)
    assert screenshot.stat().st_size > 10_000
    if screenshot.resolve() != DOCS_SCREENSHOT:  # a test run never rewrites the checkout
        assert hashlib.sha256(DOCS_SCREENSHOT.read_bytes()).hexdigest() == docs_before
