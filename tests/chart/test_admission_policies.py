"""What RBAC cannot narrow, ValidatingAdmissionPolicies do (Kubernetes >= 1.30, chart
switch ``rbac.admissionPolicies.enabled``; issue 24 item 17):

- the device plugin's ServiceAccount may write only its own Node and the pods bound to
  it (the node its token names: ``authentication.kubernetes.io/node-name``), and there
  only ``hami.io/`` annotations;
- the webhook's may change only the ``caBundle`` of its own MutatingWebhookConfiguration.

The policies' CEL is evaluated here by a CEL implementation (common-expression-language)
against the requests an attacker holding those tokens would send and those the
components do send; kube-apiserver >= 1.30, which compiles them for real, cannot run in
this project (its tier is 1.20): that they compile there is not proven here.
"""

from __future__ import annotations

import copy
from typing import Any

import cel
import helm_python
import pytest

from tests.chart.helm import CHART, find, render

NS = "hami-system"
DP = f"system:serviceaccount:{NS}:hami-device-plugin"
WH = f"system:serviceaccount:{NS}:hami-webhook"
NODE_NAME = "authentication.kubernetes.io/node-name"
ON = {"rbac": {"admissionPolicies": {"enabled": True}}}


@pytest.fixture(scope="module")
def objs() -> list[dict[str, Any]]:
    return render(ON)


def _policy(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    policy = find(objs, "ValidatingAdmissionPolicy", name)
    binding = find(objs, "ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    return policy


def _admits(policy: dict[str, Any], request: dict[str, Any], obj: Any, old: Any) -> bool:
    """What the API server answers: the policy applies when every matchCondition holds;
    then each validation must be true (an evaluation error would deny too: failurePolicy
    Fail; here it fails the test instead)."""
    env = {"request": request, "object": obj, "oldObject": old}
    for cond in policy["spec"].get("matchConditions", []):
        if not cel.evaluate(cond["expression"], env):
            return True
    # every validation is evaluated, none may fail to evaluate on these inputs: a denial
    # must come from the policy's logic, not from an expression this CEL cannot run
    return all([cel.evaluate(v["expression"], env) is True for v in policy["spec"]["validations"]])


def _request(user: str, resource: str, node: str | None = "gpu-1") -> dict[str, Any]:
    extra = {NODE_NAME: [node]} if node else {}
    return {
        "operation": "UPDATE",
        "resource": {"group": "", "version": "v1", "resource": resource},
        "userInfo": {"username": user, "extra": extra},
    }


POD = {
    "metadata": {
        "name": "p",
        "namespace": "tenant",
        "labels": {"app": "x"},
        "annotations": {"hami.io/vgpu-devices-to-allocate": "GPU-0,NVIDIA,1000,30:;", "note": "a"},
    },
    "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": "cuda:12"}]},
}
NODE = {
    "metadata": {"name": "gpu-1", "labels": {"gpu": "on"}, "annotations": {"x": "1"}},
    "spec": {"podCIDR": "10.0.0.0/24"},
}


def _edit(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    cur = out
    for p in parents:
        cur = cur.setdefault(p, {}) if not p.isdigit() else cur[int(p)]
    if value is None:
        cur.pop(last, None)
    else:
        cur[last] = value
    return out


# -- the device plugin ---------------------------------------------------------------


def test_the_device_plugin_writes_hami_annotations_of_its_nodes_pods_and_its_node(objs):
    policy = _policy(objs, "hami-device-plugin-writes")
    pods = _request(DP, "pods")
    done = copy.deepcopy(POD)
    done["metadata"]["annotations"]["hami.io/bind-phase"] = "success"
    done["metadata"]["annotations"].pop("hami.io/vgpu-devices-to-allocate")
    assert _admits(policy, pods, done, POD)  # progress written, an entry consumed
    nodes = _request(DP, "nodes")
    published = copy.deepcopy(NODE)
    published["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "[]"
    published["metadata"]["annotations"]["hami.io/mutex.lock"] = "t,ns,p"
    assert _admits(policy, nodes, published, NODE)
    unlocked = copy.deepcopy(published)
    del unlocked["metadata"]["annotations"]["hami.io/mutex.lock"]
    assert _admits(policy, nodes, unlocked, published)
    # a node with no annotations, no labels and no spec yet
    bare = {"metadata": {"name": "gpu-1"}}
    assert _admits(
        policy, nodes, {"metadata": {"name": "gpu-1", "annotations": {"hami.io/a": "1"}}}, bare
    )


def _pod_attacks() -> dict[str, dict[str, Any]]:
    image = copy.deepcopy(POD)
    image["spec"]["containers"][0]["image"] = "evil:latest"
    other_node = copy.deepcopy(POD)
    other_node["metadata"]["annotations"]["hami.io/bind-phase"] = "success"
    foreign = copy.deepcopy(POD)
    foreign["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] = "now"
    changed = copy.deepcopy(POD)
    changed["metadata"]["annotations"]["note"] = "b"
    dropped = copy.deepcopy(POD)
    del dropped["metadata"]["annotations"]["note"]
    label = copy.deepcopy(POD)
    label["metadata"]["labels"]["app"] = "y"
    owner = copy.deepcopy(POD)
    owner["metadata"]["ownerReferences"] = [{"kind": "Node", "name": "gpu-1", "uid": "u"}]
    finalizer = copy.deepcopy(POD)
    finalizer["metadata"]["finalizers"] = ["hami.io/keep"]
    return {
        "image": image,
        "foreign annotation": foreign,
        "changed annotation": changed,
        "removed annotation": dropped,
        "label": label,
        "ownerReferences": owner,
        "finalizers": finalizer,
        "other node": other_node,
    }


@pytest.mark.parametrize("attack", sorted(_pod_attacks()))
def test_the_device_plugins_token_cannot_touch_more_of_a_pod(objs, attack):
    policy = _policy(objs, "hami-device-plugin-writes")
    node = "gpu-2" if attack == "other node" else "gpu-1"
    assert not _admits(policy, _request(DP, "pods", node), _pod_attacks()[attack], POD)


@pytest.mark.parametrize(
    ("what", "path", "value", "node"),
    [
        ("another node", "metadata.annotations.hami.io/node-nvidia-register", "[]", "gpu-2"),
        ("a label", "metadata.labels.gpu", "off", "gpu-1"),
        ("cordon", "spec.unschedulable", True, "gpu-1"),
        ("a taint gone", "spec.podCIDR", None, "gpu-1"),
        ("a foreign annotation", "metadata.annotations.x", "2", "gpu-1"),
        ("no node in the token", "metadata.annotations.hami.io/a", "1", None),
    ],
)
def test_the_device_plugins_token_cannot_touch_more_of_a_node(objs, what, path, value, node):
    policy = _policy(objs, "hami-device-plugin-writes")
    new = copy.deepcopy(NODE)
    if path.startswith("metadata.annotations."):
        key = path.removeprefix("metadata.annotations.")
        new["metadata"]["annotations"][key] = value
    else:
        new = _edit(NODE, path, value)
    assert not _admits(policy, _request(DP, "nodes", node), new, NODE), what


def test_other_users_are_not_matched(objs):
    policy = _policy(objs, "hami-device-plugin-writes")
    image = _pod_attacks()["image"]
    assert _admits(
        policy, _request("system:serviceaccount:hami-system:hami-scheduler", "pods"), image, POD
    )


# -- the webhook ---------------------------------------------------------------------


def _mwc(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return copy.deepcopy(find(objs, "MutatingWebhookConfiguration", "hami-webhook"))


def test_the_webhook_may_write_its_ca_bundle_only(objs):
    policy = _policy(objs, "hami-webhook-configuration")
    rule = policy["spec"]["matchConstraints"]["resourceRules"][0]
    assert rule["resourceNames"] == ["hami-webhook"]
    assert rule["resources"] == ["mutatingwebhookconfigurations"]
    req = _request(WH, "mutatingwebhookconfigurations")
    old = _mwc(objs)
    new = copy.deepcopy(old)
    for w in new["webhooks"]:
        w["clientConfig"]["caBundle"] = "Q0EK"
    assert _admits(policy, req, new, old)


def _mwc_attacks(old: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}

    def variant(name: str, change: Any) -> None:
        new = copy.deepcopy(old)
        change(new["webhooks"][0])
        out[name] = new

    variant("rules", lambda w: w["rules"][0].update(operations=["DELETE"]))
    variant("namespaceSelector", lambda w: w.update(namespaceSelector={}))
    variant("objectSelector", lambda w: w.update(objectSelector={"matchLabels": {"a": "b"}}))
    variant("failurePolicy", lambda w: w.update(failurePolicy="Fail"))
    variant("timeoutSeconds", lambda w: w.update(timeoutSeconds=1))
    variant(
        "service", lambda w: w["clientConfig"].update(service={"name": "evil", "namespace": "x"})
    )
    variant("url", lambda w: w["clientConfig"].update(url="https://evil.example:443/x"))
    variant("sideEffects", lambda w: w.update(sideEffects="Some"))
    variant("reinvocationPolicy", lambda w: w.update(reinvocationPolicy="IfNeeded"))
    variant(
        "matchConditions",
        lambda w: w.update(matchConditions=[{"name": "a", "expression": "false"}]),
    )
    more = copy.deepcopy(old)
    more["webhooks"].append({**copy.deepcopy(old["webhooks"][0]), "name": "evil.hami.io"})
    out["another webhook"] = more
    fewer = copy.deepcopy(old)
    fewer["webhooks"] = []
    out["no webhook"] = fewer
    label = copy.deepcopy(old)
    label["metadata"].setdefault("labels", {})["x"] = "y"
    out["label"] = label
    return out


@pytest.mark.parametrize(
    "attack",
    [
        "rules",
        "namespaceSelector",
        "objectSelector",
        "failurePolicy",
        "timeoutSeconds",
        "service",
        "url",
        "sideEffects",
        "reinvocationPolicy",
        "matchConditions",
        "another webhook",
        "no webhook",
        "label",
    ],
)
def test_the_webhooks_token_cannot_rewrite_its_configuration(objs, attack):
    policy = _policy(objs, "hami-webhook-configuration")
    old = _mwc(objs)
    assert not _admits(
        policy, _request(WH, "mutatingwebhookconfigurations"), _mwc_attacks(old)[attack], old
    )


# -- the switch ----------------------------------------------------------------------


def test_off_by_default():
    kinds = {o["kind"] for o in render({})}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def test_refused_below_kubernetes_1_30_naming_why(capfd):
    """Helm's lint renders with a given cluster version, and logs a template's ``fail``
    instead of stopping (lint mode); a real 1.20 API server refuses the install
    (tests/e2e/test_chart_cluster.py)."""
    why = "rbac.admissionPolicies.enabled needs Kubernetes 1.30 or later"
    capfd.readouterr()
    helm_python.lint(CHART, ON, strict=True, kube_version="v1.29.9", namespace="hami")
    assert why in capfd.readouterr().err
    clean = helm_python.lint(CHART, ON, strict=True, kube_version="v1.30.0", namespace="hami")
    assert why not in capfd.readouterr().err
    assert [m for m in clean["messages"] if m["severity"] >= 2] + clean["errors"] == []


def test_the_webhook_policy_is_left_out_where_the_webhook_writes_no_configuration():
    manual = {
        **ON,
        "webhook": {"tls": {"mode": "manual", "manual": {"secretName": "s", "caBundle": "Q0EK"}}},
    }
    names = {
        o["metadata"]["name"] for o in render(manual) if o["kind"] == "ValidatingAdmissionPolicy"
    }
    assert names == {"hami-device-plugin-writes"}


def test_the_device_plugins_and_monitors_rbac_is_pinned():
    """Any widening of what the node agents hold fails here first (what these rules
    cannot narrow is docs/threat-model.md's; the policies above narrow it on 1.30+)."""
    objs = render({})
    rules = {
        name: [
            (
                tuple(r["apiGroups"]),
                tuple(r["resources"]),
                tuple(r["verbs"]),
                r.get("resourceNames"),
            )
            for r in find(objs, "ClusterRole", name)["rules"]
        ]
        for name in ("hami-device-plugin", "hami-monitor")
    }
    assert rules["hami-device-plugin"] == [
        (("",), ("nodes",), ("get", "list", "watch", "patch"), None),
        (("",), ("pods",), ("get", "list", "watch", "patch"), None),
        (("",), ("namespaces",), ("get",), None),
        (("", "events.k8s.io"), ("events",), ("create", "patch"), None),
    ]
    for _group, resources, verbs, _ in rules["hami-monitor"]:
        assert not {"patch", "update", "delete", "deletecollection"} & set(verbs), resources
        assert "secrets" not in resources and "nodes" not in resources
