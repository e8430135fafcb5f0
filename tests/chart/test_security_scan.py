"""The chart under a platform team's checks (issue 29), over every example values file:

- checkov (kubernetes framework): no failed check at all; the scheduler, webhook and
  their RBAC skip only the few declared exceptions below, and every skip anywhere (the
  node agents' device access) carries its reason in the chart;
- ``kubernetes-validate --strict`` against every minor from 1.20 to 1.37, each example
  rendered as that minor's cluster renders it;
- the KubeSchedulerConfiguration each minor gets, against the JSON Schema of its API
  version written from the published Go types (tests/chart/kube-scheduler-config/).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart.helm import EXAMPLES, example_values, find, render
from tests.chart.scan import (
    MINORS,
    chart_for_minor,
    checkov,
    kubernetes_validate,
    render_chart,
    write_objects,
)

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

SCHEMAS = Path(__file__).parent / "kube-scheduler-config"
CONTROL_PLANE = ("hami-scheduler", "hami-webhook")
#: What the scheduler and webhook may skip, each with the reason the chart gives: the
#: image by tag (a digest passes both), kube-scheduler's flags that its config file
#: overrides or its probe needs, and no NetworkPolicy while networkPolicy.enabled is off.
CONTROL_PLANE_SKIPS = {
    "CKV_K8S_43",
    "CKV_K8S_15",
    "CKV_K8S_114",
    "CKV_K8S_115",
    "CKV_K8S_19",  # only where an example asks for hostNetwork
    "CKV2_K8S_6",  # only while networkPolicy.enabled is false
    "CKV_K8S_155",  # tls.mode auto: its own webhook configuration's caBundle
}


@pytest.fixture(scope="module")
def scan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One checkov run over every example, rendered with the chart's defaults."""
    out = tmp_path_factory.mktemp("rendered")
    for example in EXAMPLES:
        write_objects(out / example.name, render(example_values(example)))
    return checkov(out)


def _component(result: dict[str, Any]) -> str:
    # "Deployment.hami-system.hami-webhook", "ClusterRole.default.hami-webhook",
    # "Pod.hami-system.hami-webhook.<labels>" -> hami-webhook
    return result["resource"].split(".")[2]


def test_checkov_finds_no_failed_check_in_any_example(scan: dict[str, Any]):
    failed = [
        (Path(r["file_path"]).name, r["resource"][:60], r["check_id"], r["check_name"])
        for r in scan["results"]["failed_checks"]
    ]
    assert failed == [], "\n".join(map(str, failed))
    assert scan["summary"]["parsing_errors"] == 0
    # the run saw every example and every component
    files = {Path(r["file_path"]).name for r in scan["results"]["passed_checks"]}
    assert files == {e.name for e in EXAMPLES}
    components = {_component(r) for r in scan["results"]["passed_checks"]}
    assert {*CONTROL_PLANE, "hami-device-plugin-nvidia", "hami-monitor"} <= components


def test_the_control_plane_skips_only_its_declared_exceptions(scan: dict[str, Any]):
    skipped = Counter(
        r["check_id"]
        for r in scan["results"]["skipped_checks"]
        if _component(r).startswith(CONTROL_PLANE)
    )
    assert set(skipped) <= CONTROL_PLANE_SKIPS, skipped
    # what the chart fixed instead of declaring: root, escalation, writable root
    # filesystem, capabilities, seccomp, requests and limits, probes, token mounts
    passed = {
        r["check_id"]
        for r in scan["results"]["passed_checks"]
        if r["resource"].startswith(
            ("Deployment.hami-system.hami-scheduler", "Deployment.hami-system.hami-webhook")
        )
    }
    for check in ("CKV_K8S_8", "CKV_K8S_9", "CKV_K8S_10", "CKV_K8S_11", "CKV_K8S_12"):
        assert check in passed
    for check in ("CKV_K8S_13", "CKV_K8S_20", "CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_28"):
        assert check in passed
    for check in ("CKV_K8S_29", "CKV_K8S_30", "CKV_K8S_31", "CKV_K8S_37", "CKV_K8S_38"):
        assert check in passed
    assert "CKV_K8S_40" in passed


def _reason(result: dict[str, Any]) -> str:
    return str(result["check_result"].get("suppress_comment") or "").strip()


def test_every_skip_names_its_check_and_says_why(scan: dict[str, Any]):
    skips = scan["results"]["skipped_checks"]
    assert skips, "the node agents declare their exceptions"
    for r in skips:
        reason = _reason(r)
        assert len(reason.split()) >= 4, (r["resource"][:60], r["check_id"], reason)
    # the device plugin's privilege is explained per vendor, by what it opens
    nvidia = {
        r["check_id"]: _reason(r)
        for r in skips
        if r["resource"] == "DaemonSet.hami-system.hami-device-plugin-nvidia"
    }
    assert "NVML" in nvidia["CKV_K8S_16"]
    ascend = {
        r["check_id"]: _reason(r)
        for r in skips
        if r["resource"] == "DaemonSet.hami-system.hami-device-plugin-ascend"
    }
    assert "/dev/davinci" in ascend["CKV_K8S_16"]


def test_a_tenant_cannot_reach_the_extender_or_the_webhook_through_the_policies():
    """With networkPolicy.enabled: the extender's port is on no ingress rule, the webhook
    port admits only the API server's addresses, and the node agents admit nothing."""
    objs = render(example_values(next(e for e in EXAMPLES if e.stem == "ha")))
    policies = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "NetworkPolicy"}
    assert set(policies) == {
        "hami-webhook",
        "hami-scheduler",
        "hami-device-plugin",
        "hami-monitor",
    }
    for spec in policies.values():
        assert spec["policyTypes"] == ["Ingress"]
    (webhook,) = policies["hami-webhook"]["ingress"]
    assert webhook["from"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    assert webhook["ports"] == [{"port": 9443, "protocol": "TCP"}]
    (sched,) = policies["hami-scheduler"]["ingress"]
    assert sched["ports"] == [{"port": 9395, "protocol": "TCP"}]  # metrics only, never 8888
    assert sched["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    assert "ingress" not in policies["hami-device-plugin"]
    # off by default: no policy a CNI without enforcement would silently ignore
    assert not [o for o in render() if o["kind"] == "NetworkPolicy"]


@pytest.fixture(scope="module")
def per_minor(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[Path]]:
    """Every example rendered as every minor's cluster renders it: minor -> files."""
    work = tmp_path_factory.mktemp("minors")
    out: dict[int, list[Path]] = {}
    for minor in MINORS:
        chart = chart_for_minor(minor, work)
        out[minor] = [
            write_objects(
                work / f"1.{minor}-{example.name}", render_chart(chart, example_values(example))
            )
            for example in EXAMPLES
        ]
    return out


@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"1.{m}")
def test_every_example_validates_strictly_against_each_minor(
    per_minor: dict[int, list[Path]], minor: int
):
    result = kubernetes_validate(minor, per_minor[minor])
    assert result["errors"] == [], result["errors"]
    assert result["checked"] > 20
    # only cert-manager's own kinds are unknown to Kubernetes' schemas
    assert set(result["unknown"]) <= {"Issuer", "Certificate"}, result["unknown"]


@pytest.mark.parametrize("minor", [20, 37], ids=lambda m: f"1.{m}")
def test_the_strict_validation_refuses_a_field_kubernetes_does_not_have(tmp_path: Path, minor: int):
    objs = render()
    deploy = find(objs, "Deployment", "hami-webhook")
    deploy["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonRot"] = True
    hook = find(objs, "MutatingWebhookConfiguration")
    hook["webhooks"][0]["objectSelector"] = None  # what the chart once rendered
    result = kubernetes_validate(minor, [write_objects(tmp_path / "bad.yaml", objs)])
    found = {(e["resource"], e["path"].split(".")[-1]) for e in result["errors"]}
    assert ("Deployment/hami-webhook", "securityContext") in found or any(
        "runAsNonRot" in e["message"] for e in result["errors"]
    ), result["errors"]
    if minor == 20:
        assert any(
            e["resource"].startswith("MutatingWebhookConfiguration") for e in result["errors"]
        )


def _scheduler_config(path: Path) -> dict[str, Any]:
    objs = list(yaml.safe_load_all(path.read_text()))
    return yaml.safe_load(find(objs, "ConfigMap", "hami-scheduler")["data"]["config.yaml"])


EXPECTED_API = {20: "v1beta1", 21: "v1beta1", 22: "v1beta2", 23: "v1beta3", 24: "v1beta3"}


@pytest.mark.parametrize("minor", MINORS, ids=lambda m: f"1.{m}")
def test_each_kube_scheduler_config_matches_its_api_version_schema(
    per_minor: dict[int, list[Path]], minor: int
):
    version = EXPECTED_API.get(minor, "v1")
    schema = json.loads((SCHEMAS / f"{version}.json").read_text())
    for path in per_minor[minor]:
        config = _scheduler_config(path)
        assert config["apiVersion"] == f"kubescheduler.config.k8s.io/{version}", path.name
        jsonschema.validate(config, schema)
        assert config["enableProfiling"] is False


def test_the_schemas_refuse_what_kube_scheduler_would():
    """A schema that accepts anything proves nothing: each refuses a field its version
    does not have, a misspelt one, and a duration kube-scheduler cannot parse."""
    v1 = json.loads((SCHEMAS / "v1.json").read_text())
    v1beta1 = json.loads((SCHEMAS / "v1beta1.json").read_text())
    good = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "extenders": [{"urlPrefix": "http://127.0.0.1:8888", "httpTimeout": "30s"}],
    }
    jsonschema.validate(good, v1)
    bad = [
        {**good, "healthzBindAddress": "0.0.0.0:10251"},  # gone after v1beta2
        {**good, "extenders": [{"urlPrefix": "x", "nodeCacheCapabel": True}]},
        {**good, "extenders": [{"urlPrefix": "x", "httpTimeout": 30}]},
        {**good, "apiVersion": "kubescheduler.config.k8s.io/v1beta3"},
        {**good, "leaderElection": {"leaderElect": True, "resourceLockk": "leases"}},
    ]
    for config in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(config, v1)
    jsonschema.validate(
        {
            **good,
            "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
            "healthzBindAddress": "0.0.0.0:1",
        },
        v1beta1,
    )
