"""charts/hami through real Helm (helm-python-sdk): lint, schema, and what the rendered
objects say (no cluster; tests/e2e/test_chart_cluster.py sends them to a real API server
and tests/e2e/test_helm_install.py installs them onto a real node)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config
from tests.chart.helm import CHART, EXAMPLES, container, example_values, find, render

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")


def _args(c: dict[str, Any]) -> list[str]:
    return list(c.get("command", [])) + list(c.get("args", []))


def test_every_example_values_file_is_there():
    assert {p.name for p in EXAMPLES} >= {
        "default.yaml",
        "all-vendors.yaml",
        "cert-manager.yaml",
        "ha.yaml",
        "no-kube-proxy.yaml",
    }


@pytest.mark.parametrize("kube_version", ["v1.20.2", "v1.22.0", "v1.24.3", "v1.30.0"])
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_helm_lint_is_clean(example: Path, kube_version: str):
    report = helm_python.lint(
        CHART, example_values(example), strict=True, kube_version=kube_version, namespace="hami"
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert problems == [], problems
    assert report["total_charts_linted"] == 1


@pytest.mark.parametrize(
    ("bad", "names"),
    [
        ("devicePlugin:\n  deviceSplitCount: 0\n", "/devicePlugin/deviceSplitCount"),
        ("devicePlugin:\n  deviceMemoryScaling: lots\n", "/devicePlugin/deviceMemoryScaling"),
        (
            "scheduler:\n  defaultSchedulerPolicy:\n    nodeSchedulerPolicy: packed\n",
            "/scheduler/defaultSchedulerPolicy/nodeSchedulerPolicy",
        ),
        (
            "scheduler:\n  defaultSchedulerPolicy:\n    gpuSchedulerPolicy: spread,fast\n",
            "/scheduler/defaultSchedulerPolicy/gpuSchedulerPolicy",
        ),
        ("scheduler:\n  replicaz: 2\n", "replicaz"),
        ("scheduler:\n  nodeLockExpire: soon\n", "/scheduler/nodeLockExpire"),
        ("webhook:\n  tls:\n    mode: selfsigned\n", "/webhook/tls/mode"),
        ("scheduler:\n  admissionWebhook:\n    failurePolicy: ignore\n", "failurePolicy"),
        ("devices:\n  nvidia:\n    enabled: yes-please\n", "/devices/nvidia/enabled"),
        ("global:\n  gpuHookPath: usr/local\n", "/global/gpuHookPath"),
    ],
)
def test_the_schema_rejects_a_bad_values_file_naming_the_key(tmp_path: Path, bad: str, names: str):
    path = tmp_path / "values.yaml"
    path.write_text(bad)
    chart = helm_python.Chart.load(CHART)
    with pytest.raises(helm_python.HelmValuesError) as info:
        chart.validate_schema(yaml.safe_load(path.read_text()))
    assert names in str(info.value)
    # install/template refuse it too (Helm validates before rendering)
    with pytest.raises(helm_python.HelmError, match=names.rsplit("/", 1)[-1]):
        chart.render(yaml.safe_load(path.read_text()), name="hami", namespace="hami")


def test_a_timeout_below_the_bind_lock_wait_is_refused_with_both_keys():
    with pytest.raises(helm_python.HelmError) as info:
        render({"scheduler": {"extender": {"httpTimeoutSeconds": 5, "bindLockWaitSeconds": 10}}})
    assert "scheduler.extender.httpTimeoutSeconds" in str(info.value)
    assert "scheduler.extender.bindLockWaitSeconds" in str(info.value)


def test_manual_tls_without_its_secret_is_refused():
    with pytest.raises(helm_python.HelmError, match="webhook.tls.manual.secretName"):
        render({"webhook": {"tls": {"mode": "manual"}}})


def _kube_scheduler_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return yaml.safe_load(find(objs, "ConfigMap", "hami-scheduler")["data"]["config.yaml"])


def test_the_extender_is_a_loopback_sidecar_whose_binds_are_never_refused():
    objs = render()
    deploy = find(objs, "Deployment", "hami-scheduler")
    ext = _args(container(deploy, "extender"))
    assert "--bind-address=127.0.0.1" in ext
    # kube-scheduler's Lease picks who schedules; the extender must not elect again.
    assert "--no-leader-elect" in ext
    # only the read-only metrics port is open beyond loopback
    assert [p["name"] for p in container(deploy, "extender")["ports"]] == ["metrics"]
    assert "--metrics-bind-address=0.0.0.0" in ext and "--metrics-port=9395" in ext
    # no Service or NodePort exposes the extender
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    assert sorted(services) == ["hami-monitor", "hami-scheduler-metrics", "hami-webhook"]
    for s in services.values():  # scheduler pods are reached on their metrics port only
        if s["spec"]["selector"]["app.kubernetes.io/component"] == "scheduler":
            assert [p["port"] for p in s["spec"]["ports"]] == [9395]
    assert not deploy["spec"]["template"]["spec"].get("hostNetwork")

    config = _kube_scheduler_config(objs)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"  # the SDK's default: >= 1.25
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:8888"
    assert extender["nodeCacheCapable"] is True
    assert extender["bindVerb"] == "bind" and extender["filterVerb"] == "filter"
    wait = float(next(a for a in ext if a.startswith("--bind-lock-wait=")).split("=")[1])
    assert float(extender["httpTimeout"].removesuffix("s")) > wait
    assert config["leaderElection"]["resourceName"] == "hami-scheduler"
    assert config["leaderElection"]["resourceNamespace"] == "hami-system"


@pytest.mark.parametrize("on", [False, True])
def test_success_events_follow_the_value_and_are_off_by_default(on):
    values = {"scheduler": {"extender": {"successEvents": True}}} if on else None
    deploy = find(render(values), "Deployment", "hami-scheduler")
    flags = [a for a in _args(container(deploy, "extender")) if "success-events" in a]
    assert flags == (["--success-events"] if on else [])
    with pytest.raises(helm_python.HelmError, match="successEvents"):
        render({"scheduler": {"extender": {"successEvents": "yes"}}})


def test_two_replicas_always_elect_a_leader_and_spread():
    objs = render({"scheduler": {"replicas": 2, "leaderElect": False}})
    assert _kube_scheduler_config(objs)["leaderElection"]["leaderElect"] is True
    deploy = find(objs, "Deployment", "hami-scheduler")
    assert deploy["spec"]["replicas"] == 2
    anti = deploy["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert deploy["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"


def _all_backend_resources(only: set[str] | None = None) -> set[str]:
    names: set[str] = set()
    for name, info in BackendManager.from_entry_points().infos.items():
        if only is not None and name not in only:
            continue
        for dt in info.device_types:
            r = dt.resources
            names |= {n for n in (r.count, r.memory, r.memory_pct, r.cores, r.cores_alias) if n}
        extra = info.option_defaults.get("resourceWholeCardName")
        if extra:
            names.add(str(extra))
    return names


def test_every_managed_resource_of_every_enabled_backend_is_ignored_by_kube_scheduler():
    objs = render(example_values(CHART / "examples" / "all-vendors.yaml"))
    managed = _kube_scheduler_config(objs)["extenders"][0]["managedResources"]
    assert all(m["ignoredByScheduler"] is True for m in managed)
    missing = _all_backend_resources() - {m["name"] for m in managed}
    assert not missing, (
        f"add them to devices.<backend>.customresources in charts/hami/values.yaml and enable the backend in examples/all-vendors.yaml: {sorted(missing)}"
    )
    default = _kube_scheduler_config(render())["extenders"][0]["managedResources"]
    assert {m["name"] for m in default} >= _all_backend_resources({"nvidia"})
    assert not any(m["name"].startswith("huawei.com/") for m in default)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_the_rendered_hami_config_is_accepted_by_hami(example: Path):
    objs = render(example_values(example))
    text = find(objs, "ConfigMap", "hami-config")["data"]["hami.yaml"]
    manager = BackendManager.from_entry_points()
    data = yaml.safe_load(text)
    enabled = {k for k, v in example_values(example).get("devices", {}).items() if v.get("enabled")}
    # sections of backends this checkout does not have yet (the image has them all)
    for name in enabled - set(manager.infos):
        data.pop(name)
    assert set(data) - {
        "version",
        "schedulerName",
        "defaultSchedulerPolicy",
        "nodeLockExpirySeconds",
        "forceOverwriteDefaultScheduler",
    } == (enabled | {"nvidia"}) & set(manager.infos)
    config = parse_config(data, backends=manager.infos)
    assert config.node_lock_expiry_s == 300
    assert config.force_overwrite_default_scheduler is True  # HAMi's default
    assert config.vendor("nvidia").split_count == 10


def test_hami_values_keys_reach_the_configuration():
    objs = render(
        {
            "scheduler": {
                "defaultSchedulerPolicy": {
                    "nodeSchedulerPolicy": "spread",
                    "gpuSchedulerPolicy": "binpack",
                },
                "nodeLockExpire": "2m",
                "forceOverwriteDefaultScheduler": False,
            },
            "devicePlugin": {"deviceSplitCount": 4, "deviceMemoryScaling": 1.5},
            "global": {"gpuHookPath": "/opt/hami"},
        }
    )
    data = yaml.safe_load(find(objs, "ConfigMap", "hami-config")["data"]["hami.yaml"])
    config = parse_config(data, backends=BackendManager.from_entry_points().infos)
    assert (config.node_policy.value, config.device_policy.value) == ("spread", "binpack")
    assert config.node_lock_expiry_s == 120
    assert config.force_overwrite_default_scheduler is False
    assert config.vendor("nvidia").split_count == 4
    assert config.vendor("nvidia").memory_scaling == 1.5
    assert data["nvidia"]["hookPath"] == "/opt/hami/vgpu"

    ds = find(objs, "DaemonSet", "hami-device-plugin-nvidia")
    hook = next(v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "hook")
    assert hook["hostPath"]["path"] == "/opt/hami/vgpu"


def test_overwrite_env_reaches_the_configuration_and_the_webhook_sees_every_pod():
    """HAMi's ``nvidia.overwriteEnv`` (off by default, as HAMi's chart): on, the webhook
    must see pods that ask for no device, so no object selector narrows its reviews."""
    for values, expected in (({}, False), ({"devices": {"nvidia": {"overwriteEnv": True}}}, True)):
        objs = render(values)
        data = yaml.safe_load(find(objs, "ConfigMap", "hami-config")["data"]["hami.yaml"])
        config = parse_config(data, backends=BackendManager.from_entry_points().infos)
        assert config.vendor("nvidia").options["overwriteEnv"] is expected
        (hook,) = find(objs, "MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
        assert not (hook.get("objectSelector") or {}).get("matchLabels")
        assert not (hook.get("objectSelector") or {}).get("matchExpressions")


def test_a_gpu_policy_list_reaches_the_configuration():
    """HAMi 2.10's ordered lists (``mutex,spread``) pass the schema and keep their order."""
    objs = render({"scheduler": {"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "mutex,spread"}}})
    data = yaml.safe_load(find(objs, "ConfigMap", "hami-config")["data"]["hami.yaml"])
    config = parse_config(data, backends=BackendManager.from_entry_points().infos)
    assert str(config.device_policy_chain) == "mutex,spread"


def test_the_webhook_configuration():
    objs = render()
    mwc = find(objs, "MutatingWebhookConfiguration", "hami-webhook")
    (hook,) = mwc["webhooks"]
    assert hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Ignore"
    assert hook["admissionReviewVersions"] == ["v1", "v1beta1"]
    (rule,) = hook["rules"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
    # a status update can carry annotations too
    assert rule["resources"] == ["pods", "pods/status", "pods/ephemeralcontainers"]
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    own_ns = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["hami-system"]}
    assert ignore in hook["namespaceSelector"]["matchExpressions"]
    assert own_ns in hook["namespaceSelector"]["matchExpressions"]
    # a pod's own ignore label is its author's: the API server must still send the review
    # (the webhook honours the label only for pods asking for no managed device)
    assert not (hook.get("objectSelector") or {}).get("matchExpressions")
    assert hook["clientConfig"]["service"] == {
        "name": "hami-webhook",
        "namespace": "hami-system",
        "port": 443,
        "path": "/webhook",
    }
    args = _args(container(find(objs, "Deployment", "hami-webhook"), "webhook"))
    assert "--cert-mode=auto" in args and "--webhook-config-name=hami-webhook" in args
    # exactly the scheduler's and the device plugin's service accounts are trusted
    assert [a for a in args if a.startswith("--trusted-user=")] == [
        "--trusted-user=system:serviceaccount:hami-system:hami-scheduler",
        "--trusted-user=system:serviceaccount:hami-system:hami-device-plugin",
    ]
    other = render({"fullnameOverride": "gpu"}, namespace="ops")
    other_args = _args(container(find(other, "Deployment", "gpu-webhook"), "webhook"))
    assert "--trusted-user=system:serviceaccount:ops:gpu-scheduler" in other_args
    # hami's own pods never pass through the webhook
    for kind, name in (
        ("Deployment", "hami-webhook"),
        ("Deployment", "hami-scheduler"),
        ("DaemonSet", "hami-device-plugin-nvidia"),
    ):
        labels = find(objs, kind, name)["spec"]["template"]["metadata"]["labels"]
        assert labels["hami.io/webhook"] == "ignore"


def test_the_webhook_by_url_names_its_host_in_the_certificate():
    objs = render(example_values(CHART / "examples" / "no-kube-proxy.yaml"))
    (hook,) = find(objs, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/webhook"}
    deploy = find(objs, "Deployment", "hami-webhook")
    args = _args(container(deploy, "webhook"))
    assert "--cert-ip-address=127.0.0.1" in args and "--bind-address=127.0.0.1" in args
    assert deploy["spec"]["template"]["spec"]["hostNetwork"] is True
    probe = container(deploy, "webhook")["readinessProbe"]["httpGet"]
    assert probe["host"] == "127.0.0.1" and probe["scheme"] == "HTTPS"
    for d in [o for o in objs if o["kind"] in ("Deployment", "DaemonSet")]:
        for c in d["spec"]["template"]["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == (
                "10.0.0.10",
                "6443",
            )


def test_cert_manager_tls():
    objs = render(example_values(CHART / "examples" / "cert-manager.yaml"))
    cert = find(objs, "Certificate", "hami-webhook")
    assert cert["spec"]["secretName"] == "hami-webhook-tls"
    assert "hami-webhook.hami-system.svc" in cert["spec"]["dnsNames"]
    assert find(objs, "Issuer", "hami-webhook")["spec"] == {"selfSigned": {}}
    mwc = find(objs, "MutatingWebhookConfiguration")
    assert (
        mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        == "hami-system/hami-webhook"
    )
    args = _args(container(find(objs, "Deployment", "hami-webhook"), "webhook"))
    assert "--cert-mode=files" in args and "--tls-cert-file=/tls/tls.crt" in args
    # no Secret or webhook-configuration rights: cert-manager does that work
    assert not [
        o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "hami-webhook-tls"
    ]


def test_manual_tls_uses_the_given_secret_and_ca():
    objs = render(
        {
            "webhook": {
                "tls": {"mode": "manual", "manual": {"secretName": "my-tls", "caBundle": "Q0E="}}
            }
        }
    )
    (hook,) = find(objs, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"]["caBundle"] == "Q0E="
    deploy = find(objs, "Deployment", "hami-webhook")
    tls = next(v for v in deploy["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert tls["secret"]["secretName"] == "my-tls"


def test_rbac_names_the_secret_the_webhook_configuration_and_the_lease():
    objs = render()
    tls = find(objs, "Role", "hami-webhook-tls")
    named = [r for r in tls["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["hami-webhook-tls"],
            "verbs": ["get", "update", "patch"],
        }
    ]
    webhook_rules = find(objs, "ClusterRole", "hami-webhook")["rules"]
    mwc = [r for r in webhook_rules if "mutatingwebhookconfigurations" in r["resources"]]
    assert mwc == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": ["hami-webhook"],
            "verbs": ["get", "patch"],
        }
    ]
    lease = find(objs, "Role", "hami-scheduler-lease")
    assert {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": ["hami-scheduler"],
        "verbs": ["get", "update"],
    } in lease["rules"]
    # nobody may read Secrets cluster-wide, delete anything, or escalate
    for role in [o for o in objs if o["kind"] in ("ClusterRole", "Role")]:
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], role["metadata"][
                "name"
            ]
            assert not {"delete", "deletecollection", "escalate", "bind", "impersonate"} & set(
                rule["verbs"]
            )
            if "secrets" in rule["resources"] and set(rule["verbs"]) - {"create"}:
                assert rule.get("resourceNames"), role["metadata"]["name"]
    # one ServiceAccount per component
    assert sorted(o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount") == [
        "hami-device-plugin",
        "hami-monitor",
        "hami-scheduler",
        "hami-webhook",
    ]


def test_a_device_plugin_daemonset_per_enabled_vendor_hamis_serves():
    objs = render(example_values(CHART / "examples" / "all-vendors.yaml"))
    daemonsets = {
        o["metadata"]["name"]: o
        for o in objs
        if o["kind"] == "DaemonSet" and o["metadata"]["name"] != "hami-monitor"
    }
    enabled = {
        k
        for k, v in example_values(CHART / "examples" / "all-vendors.yaml")["devices"].items()
        if v["enabled"]
    }
    records = BackendManager.from_entry_points().backends
    hamis = {
        r.name for r in records if "hami_discover" in r.hooks and not r.info.vendor_device_plugin
    }
    # the others are the vendor's (tests/chart/test_node_side.py)
    assert set(daemonsets) == {f"hami-device-plugin-{b}" for b in enabled & hamis}
    assert enabled >= {r.name for r in records}
    ascend = daemonsets["hami-device-plugin-ascend"]["spec"]["template"]["spec"]
    assert [
        next(a for a in _args(c) if a.startswith("--vendor=")) for c in ascend["containers"]
    ] == [
        "--vendor=Ascend910B3",
        "--vendor=Ascend310P",
    ]
    assert ascend["nodeSelector"] == {"ascend": "on"}
    nvidia = daemonsets["hami-device-plugin-nvidia"]
    spec = nvidia["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gpu": "on"}
    assert nvidia["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    (c,) = spec["containers"]
    assert "--backend=nvidia" in _args(c)
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["device-plugin"] == "/var/lib/kubelet/device-plugins"
    assert mounts["dev"] == "/dev" and mounts["hook"] == "/usr/local/vgpu"
    node_config = find(objs, "ConfigMap", "hami-device-plugin")["data"]["config.json"]
    assert json.loads(node_config) == {"nodeconfig": []}


def test_disabled_parts_render_nothing():
    objs = render(
        {"devicePlugin": {"enabled": False}, "scheduler": {"admissionWebhook": {"enabled": False}}}
    )
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert not [
        k
        for k in kinds
        if k[0] in ("DaemonSet", "MutatingWebhookConfiguration", "Service")
        and k != ("Service", "hami-scheduler-metrics")  # the scheduler's, which still runs
    ]
    assert ("Deployment", "hami-scheduler") in kinds and ("Deployment", "hami-webhook") not in kinds


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
def test_failure_policy_both_ways_keeps_the_release_namespace_exempt(policy: str):
    """Issue #12 item 4: Fail is offered as a value; either way the release's own
    namespace (its webhook, scheduler and device plugin pods) and the whitelist are out of
    the webhook's reach, so with Fail the webhook can still start while it is down, and
    nothing else about the review changes."""
    values = {
        "scheduler": {
            "admissionWebhook": {"failurePolicy": policy, "whitelistNamespaces": ["kube-system"]}
        }
    }
    objs = render(values)
    (hook,) = find(objs, "MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    assert hook["failurePolicy"] == policy
    exempt = {"key": "kubernetes.io/metadata.name", "operator": "NotIn"}
    (names,) = [
        e for e in hook["namespaceSelector"]["matchExpressions"] if exempt.items() <= e.items()
    ]
    assert names["values"] == ["hami-system", "kube-system"]
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert ignore in hook["namespaceSelector"]["matchExpressions"]
    (rule,) = hook["rules"]
    assert rule["operations"] == ["CREATE", "UPDATE"] and rule["resources"] == [
        "pods",
        "pods/status",
        "pods/ephemeralcontainers",
    ]
    assert not (hook.get("objectSelector") or {}).get("matchExpressions")
    notes = helm_python.Chart.load(CHART).render(values, name="hami", namespace="hami-system")
    assert f"failurePolicy {policy}" in next(t for p, t in notes.items() if p.endswith("NOTES.txt"))


def test_the_ha_example_fails_closed_with_kube_system_exempt():
    objs = render(example_values(next(p for p in EXAMPLES if p.name == "ha.yaml")))
    (hook,) = find(objs, "MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["hami-system", "kube-system"],
    } in hook["namespaceSelector"]["matchExpressions"]
    assert find(objs, "Deployment", "hami-webhook")["spec"]["replicas"] == 2


@pytest.mark.parametrize(("value", "want"), [([96, 160], [96, 160]), (160, [160])])
def test_hamis_mthreads_memory_per_card_value_reaches_the_configuration(value, want):
    """HAMi's chart after 2.10: devices.mthreads.memoryPerCard, a list (or a legacy
    scalar, which HAMi's template writes as a one-item list)."""
    values = {"devices": {"mthreads": {"enabled": True, "memoryPerCard": value}}}
    text = find(render(values), "ConfigMap", "hami-config")["data"]["hami.yaml"]
    config = parse_config(yaml.safe_load(text), backends=BackendManager.from_entry_points().infos)
    assert config.vendor("mthreads").options["memoryPerCard"] == want


def test_a_bad_memory_per_card_value_is_refused_by_the_schema():
    with pytest.raises(Exception, match="memoryPerCard"):
        render({"devices": {"mthreads": {"enabled": True, "memoryPerCard": ["big"]}}})
