"""The chart's switch for the web view (``ui.enabled``, off by default): a ``hami ui``
container in the scheduler pod on loopback, and the two review rights it needs, only
when switched on (through real Helm, helm-python-sdk)."""

from __future__ import annotations

import pytest

from tests.chart.helm import container, find, render

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

REVIEWS = {
    ("authentication.k8s.io", "tokenreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
}


def _rights(objs) -> set[tuple[str, str]]:
    role = find(objs, "ClusterRole", "hami-scheduler")
    return {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}


def _containers(objs) -> list[str]:
    deploy = find(objs, "Deployment", "hami-scheduler")
    return [c["name"] for c in deploy["spec"]["template"]["spec"]["containers"]]


def test_off_by_default_no_container_no_review_rights():
    objs = render({})
    assert "ui" not in _containers(objs)
    assert not REVIEWS & _rights(objs)


def test_on_a_read_only_container_on_loopback_with_review_rights():
    objs = render({"ui": {"enabled": True}})
    ui = container(find(objs, "Deployment", "hami-scheduler"), "ui")
    assert ui["command"][:4] == ["hami", "ui", "--address=127.0.0.1", "--port=8090"]
    assert ui["ports"] == [{"name": "ui", "containerPort": 8090, "protocol": "TCP"}]
    assert ui["securityContext"]["readOnlyRootFilesystem"] is True
    assert "127.0.0.1:8090/healthz" in " ".join(ui["readinessProbe"]["exec"]["command"])
    assert _rights(objs) >= REVIEWS
    role = find(objs, "ClusterRole", "hami-scheduler")
    for rule in role["rules"]:
        if set(rule["resources"]) & {"tokenreviews", "subjectaccessreviews"}:
            assert rule["verbs"] == ["create"]


def test_exposed_the_probe_still_reaches_it():
    objs = render({"ui": {"enabled": True, "address": "0.0.0.0", "port": 9000}})
    ui = container(find(objs, "Deployment", "hami-scheduler"), "ui")
    assert "--address=0.0.0.0" in ui["command"]
    assert "127.0.0.1:9000/healthz" in " ".join(ui["livenessProbe"]["exec"]["command"])


def test_a_bad_value_is_refused_naming_it():
    with pytest.raises(Exception, match="port"):
        render({"ui": {"enabled": True, "port": 70000}})
