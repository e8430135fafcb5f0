"""Proves the e2e harness: a real kube-scheduler calls an HTTP extender and its Binding lands.

Also keeps wire fixtures of what real kube-scheduler v1.20.2 sends to an extender under
tests/fixtures/extender/ (written when missing, or always with HAMI_RECORD_FIXTURES=1).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from tests.e2e.kubenode import BUSYBOX_IMAGE
from tests.e2e.stub_extender import StubExtender

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "extender"
GPU = "nvidia.com/gpu"
pytestmark = pytest.mark.e2e


@pytest.fixture()
def extender(control_plane):
    with StubExtender(control_plane.api_client) as ext:
        control_plane.start_scheduler(extender_url=ext.url, managed_resources=[GPU])
        yield ext
        control_plane.stop_scheduler()


@pytest.fixture()
def names():
    """Unique node/pod names per test (the control plane is shared by the session)."""
    suffix = uuid.uuid4().hex[:6]
    return lambda base: f"{base}-{suffix}"


def _gpu_pod(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,  # imported by a real node, never pulled
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "resources": {"limits": {GPU: "1"}},
                }
            ],
        },
    }


def _bound_node(core: client.CoreV1Api, pod: str) -> str | None:
    return core.read_namespaced_pod(pod, "default").spec.node_name


def _record(name: str, body: dict) -> None:
    """Save ``body`` as a wire fixture when missing (or HAMI_RECORD_FIXTURES=1); otherwise
    check that what kube-scheduler sends still has the keys of the stored fixture."""
    path = FIXTURES / name
    if os.environ.get("HAMI_RECORD_FIXTURES") == "1" or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(body, indent=2) + "\n")
        return
    stored = json.loads(path.read_text())
    assert set(body) == set(stored), f"{name}: kube-scheduler now sends {sorted(body)}"
    if "Pod" in stored:
        assert set(body["Pod"]) == set(stored["Pod"]), f"{name}: Pod keys changed"


def test_pod_is_bound_through_extender(control_plane, extender, names):
    core = client.CoreV1Api(control_plane.api_client())
    nodes = [names("gpu-a"), names("gpu-b")]
    for n in nodes:
        control_plane.add_fake_node(n, capacity={GPU: "2"}, annotations={"hami.io/e2e": "smoke"})
    pod = names("smoke")
    core.create_namespaced_pod("default", _gpu_pod(pod))
    try:
        node = control_plane.wait_for(
            lambda: _bound_node(core, pod), timeout=30, message=f"pod {pod} to be bound"
        )

        filters = [b for b in extender.bodies("/filter") if b["Pod"]["metadata"]["name"] == pod]
        binds = [b for b in extender.bodies("/bind") if b["PodName"] == pod]
        assert filters, "kube-scheduler never called /filter for the pod"
        assert binds, "kube-scheduler never called /bind for the pod"
        assert not extender.bind_errors

        f = filters[0]
        assert "Pod" in f and "NodeNames" in f
        # nodeCacheCapable: names only, never the full objects
        assert f.get("Nodes") is None
        assert set(nodes) <= set(f["NodeNames"])
        assert f["Pod"]["spec"]["schedulerName"] == "hami-scheduler"
        assert f["Pod"]["spec"]["containers"][0]["resources"]["limits"][GPU] == "1"

        allowed = set(extender.filter(f)["NodeNames"])
        assert node in allowed
        b = binds[-1]
        assert set(b) >= {"PodName", "PodNamespace", "PodUID", "Node"}
        assert b["Node"] == node and b["PodNamespace"] == "default"
        assert b["PodUID"] == core.read_namespaced_pod(pod, "default").metadata.uid

        _record("filter-request.json", f)
        _record("bind-request.json", b)
        prios = [p for p in extender.bodies("/prioritize") if p["Pod"]["metadata"]["name"] == pod]
        if prios:  # only called with more than one feasible node
            _record("prioritize-request.json", prios[0])
    finally:
        core.delete_namespaced_pod(pod, "default", grace_period_seconds=0)
        for n in nodes:
            control_plane.delete_node(n)


def test_filter_result_is_honoured(control_plane, extender, names):
    """A node the extender filters out is never chosen, and its reason reaches the event."""
    core = client.CoreV1Api(control_plane.api_client())
    good, bad = names("gpu-good"), names("gpu-bad")
    for n in (good, bad):
        control_plane.add_fake_node(n, capacity={GPU: "2"})
    extender.deny[bad] = "1/2 CardInsufficientMemory"
    pods = [names(f"honour-{i}") for i in range(3)]
    for p in pods:
        core.create_namespaced_pod("default", _gpu_pod(p))
    try:
        for p in pods:
            node = control_plane.wait_for(
                lambda p=p: _bound_node(core, p), timeout=30, message=f"pod {p} to be bound"
            )
            assert node == good

        # With every node filtered out the pod stays Pending and kube-scheduler reports
        # the extender's reason in a FailedScheduling event.
        extender.deny[good] = "2/2 CardInsufficientMemory"
        stuck = names("stuck")
        pods.append(stuck)
        core.create_namespaced_pod("default", _gpu_pod(stuck))

        def failed_event():
            evs = core.list_namespaced_event(
                "default", field_selector=f"involvedObject.name={stuck}"
            ).items
            return [e for e in evs if e.reason == "FailedScheduling"]

        evs = control_plane.wait_for(failed_event, timeout=30, message="a FailedScheduling event")
        assert "CardInsufficientMemory" in evs[0].message, evs[0].message
        assert _bound_node(core, stuck) is None
    finally:
        for p in pods:
            core.delete_namespaced_pod(p, "default", grace_period_seconds=0)
        for n in (good, bad):
            control_plane.delete_node(n)
