"""Fixtures for the e2e tier: a real etcd + kube-apiserver (+ kube-scheduler) on loopback.

The first session on a machine builds Kubernetes v1.20.2 with scripts/kube-build.sh
(~6-9 minutes, needs root or sudo for apt-get); later sessions find the cached binaries in
about a second. The build runs once after collection, only when e2e tests were selected,
so it does not count against any one test's timeout. ``HAMI_KUBE_BIN=/dir`` skips the
script and uses binaries from ``/dir``. ``HAMI_E2E_KEEP=1`` keeps the cluster's scratch dir
(configs and process logs). Run only this tier with ``pytest -m e2e``; leave it out with
``-m "not e2e"``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.controlplane import (
    ControlPlane,
    KubeBinariesMissing,
    ensure_kube_binaries,
)
from tests.e2e.oci import HAMI_IMAGE

_HERE = Path(__file__).resolve().parent

_build: dict[str, Path | str] = {}
_active: list[ControlPlane] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "e2e: runs a real kube-apiserver and kube-scheduler (built once by scripts/kube-build.sh)",
    )
    # The throwaway apiserver's self-signed cert is not verified (insecure-skip-tls-verify).
    config.addinivalue_line("filterwarnings", "ignore::urllib3.exceptions.InsecureRequestWarning")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Everything under tests/e2e is e2e, so `-m "not e2e"` leaves the whole tier out.
    for item in items:
        if _HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build (or find cached) kube binaries once, before any test and outside its timeout."""
    if session.config.option.collectonly:
        return
    if not any(item.get_closest_marker("e2e") for item in session.items):
        return
    capman = session.config.pluginmanager.getplugin("capturemanager")
    ctx = capman.global_and_fixture_disabled() if capman is not None else _null()
    with ctx:  # the first build takes minutes: let its progress reach the terminal
        try:
            _build["bin"] = ensure_kube_binaries(stream=sys.stderr)
        except KubeBinariesMissing as e:
            _build["error"] = str(e)
        if any(
            item.path.name in ("test_helm_install.py", "test_migrate_from_hami.py")
            for item in session.items
        ):
            _build_hami_image()


def _build_hami_image() -> None:
    """scripts/build-image.py once (minutes on a fresh machine, then cached), outside
    any test's timeout; its progress goes to the terminal."""
    import subprocess

    proc = subprocess.run(
        [
            sys.executable,
            str(_HERE.parents[1] / "scripts" / "build-image.py"),
            "--name",
            HAMI_IMAGE,
        ],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        timeout=3600,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        _build["image_error"] = f"scripts/build-image.py failed with exit code {proc.returncode}"
    else:
        _build["image"] = lines[-1]


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture(scope="session")
def kube_bin_dir() -> Path:
    """The directory with etcd, kube-apiserver, kube-scheduler and kubelet."""
    if "error" in _build:
        pytest.fail(str(_build["error"]), pytrace=False)
    if "bin" not in _build:  # e.g. the fixture was reached without the hook having run
        try:
            _build["bin"] = ensure_kube_binaries(stream=sys.stderr)
        except KubeBinariesMissing as e:
            _build["error"] = str(e)
            pytest.fail(str(e), pytrace=False)
    return Path(_build["bin"])


@pytest.fixture(scope="session")
def hami_image() -> Path:
    """The hami image as an OCI tarball (scripts/build-image.py, named HAMI_IMAGE)."""
    if "image" not in _build and "image_error" not in _build:
        _build_hami_image()
    if "image_error" in _build:
        pytest.fail(str(_build["image_error"]), pytrace=False)
    return Path(_build["image"])


@pytest.fixture(scope="session")
def control_plane(kube_bin_dir: Path) -> Iterator[ControlPlane]:
    """A started :class:`ControlPlane` (etcd + kube-apiserver), shared by the session.

    Tests start kube-scheduler with ``control_plane.start_scheduler(...)`` (a later call
    replaces the running one) and create nodes with ``add_fake_node``; use unique node
    and pod names, or ``control_plane.reset()``.
    """
    cp = ControlPlane(kube_bin_dir)
    cp.start()
    sys.stderr.write(f"[e2e] control plane up in {cp.startup_seconds:.1f} s at {cp.api_url}\n")
    _active.append(cp)
    try:
        yield cp
    finally:
        _active.remove(cp)
        cp.stop()


_SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def _cluster_objects(cp: ControlPlane) -> set[tuple[str, str]]:
    """What one e2e file may leave behind for the next on the shared control plane:
    pods outside the system namespaces (a later file's scheduler and real kubelet node
    would be handed them), Nodes, and MutatingWebhookConfigurations (they intercept)."""
    from kubernetes import client

    api = cp.api_client()
    core = client.CoreV1Api(api)
    pods = {
        ("pod", f"{p.metadata.namespace}/{p.metadata.name}")
        for p in core.list_pod_for_all_namespaces().items
        if p.metadata.namespace not in _SYSTEM_NAMESPACES
    }
    nodes = {("node", n.metadata.name) for n in core.list_node().items}
    hooks = {
        ("mutatingwebhookconfiguration", h.metadata.name)
        for h in client.AdmissionregistrationV1Api(api).list_mutating_webhook_configuration().items
    }
    return pods | nodes | hooks


def _remove(cp: ControlPlane, objects: set[tuple[str, str]]) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = cp.api_client()
    core = client.CoreV1Api(api)
    for kind, name in sorted(objects):
        try:
            if kind == "pod":
                ns, pod = name.split("/", 1)
                core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
            elif kind == "node":
                core.delete_node(name)
            else:
                client.AdmissionregistrationV1Api(api).delete_mutating_webhook_configuration(name)
        except ApiException as e:
            if e.status != 404:
                raise


@pytest.fixture(scope="module", autouse=True)
def _file_leaves_the_cluster_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each e2e file leaves the shared control plane as it found it: what it left (see
    ``_cluster_objects``) is removed after its last test and named in a warning, so the
    file can be fixed, and no later file depends on the order files run in."""
    before = _cluster_objects(_active[0]) if _active else set()
    yield
    if not _active or not _active[0].running:
        return
    left = _cluster_objects(_active[0]) - before
    if left:
        _remove(_active[0], left)
        shown = ", ".join(f"{k} {n}" for k, n in sorted(left))
        request.node.warn(pytest.PytestWarning(f"left on the e2e control plane, removed: {shown}"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the tails of the control-plane process logs to a failed e2e test's report."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and _active and "control_plane" in getattr(item, "fixturenames", ()):
        for cp in _active:
            report.sections.append(("control plane logs", cp.format_logs()))
