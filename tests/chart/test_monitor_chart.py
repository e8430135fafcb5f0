"""The chart's monitoring part through real Helm (helm-python-sdk): the node monitor
DaemonSet, its RBAC and Service, the optional ServiceMonitor, the alert rules as a
PrometheusRule and the dashboards as Grafana ConfigMaps."""

from __future__ import annotations

import json

import pytest
import yaml

from hami_core.cli import cli
from tests.chart.helm import CHART, container, find, render
from tests.prometheus import DASHBOARDS, RULES

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

ALL_ON = {
    "monitor": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
        "dashboards": {"enabled": True},
    }
}


def test_the_monitor_daemonset_reads_the_hook_paths_containers_with_the_host_pid_namespace():
    objs = render()
    ds = find(objs, "DaemonSet", "hami-monitor")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    assert spec["serviceAccountName"] == "hami-monitor"
    assert spec["nodeSelector"] == {"gpu": "on"}  # devicePlugin.nvidiaNodeSelector
    c = container(ds, "monitor")
    args = c["command"]
    assert args[:2] == ["hami", "monitor"]
    assert "--containers-dir=/usr/local/vgpu/containers" in args and "--port=9394" in args
    # every rendered flag is one hami monitor accepts
    cli.commands["monitor"].make_context("monitor", [*args[2:], "--node-name", "n"])
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts["containers"] == "/usr/local/vgpu/containers"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["containers"]["hostPath"]["path"] == "/usr/local/vgpu/containers"
    assert c["ports"] == [{"name": "metrics", "containerPort": 9394}]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert not c["securityContext"].get("privileged")
    svc = find(objs, "Service", "hami-monitor")
    assert svc["spec"]["ports"][0]["port"] == 9394
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "monitor"
    assert ds["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]


def test_the_monitor_reads_pods_and_writes_only_events_and_evictions():
    """Issue 24 item 19: Events and evictions about containers over their allocation,
    the namespace's policy label; nothing else is written."""
    objs = render()
    role = find(objs, "ClusterRole", "hami-monitor")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
    ]
    ds = find(objs, "DaemonSet", "hami-monitor")
    assert "--overuse-policy=report" in container(ds, "monitor")["command"]
    evicting = render({"monitor": {"overusePolicy": "evict"}})
    ds = find(evicting, "DaemonSet", "hami-monitor")
    assert "--overuse-policy=evict" in container(ds, "monitor")["command"]
    binding = find(objs, "ClusterRoleBinding", "hami-monitor")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "hami-monitor", "namespace": "hami-system"}
    ]


def test_a_custom_hook_path_and_port_reach_the_monitor():
    objs = render(
        {"global": {"gpuHookPath": "/opt/hami"}, "monitor": {"port": 9500, "gcGraceSeconds": 60}}
    )
    c = container(find(objs, "DaemonSet", "hami-monitor"), "monitor")
    assert "--containers-dir=/opt/hami/vgpu/containers" in c["command"]
    assert "--port=9500" in c["command"] and "--gc-grace=60" in c["command"]
    assert find(objs, "Service", "hami-monitor")["spec"]["ports"][0]["port"] == 9500


def test_the_optional_parts_are_off_by_default_and_complete_when_on():
    kinds = {o["kind"] for o in render()}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}
    objs = render(ALL_ON)
    sm = find(objs, "ServiceMonitor", "hami-monitor")
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert (
        sm["spec"]["selector"]["matchLabels"]
        == find(objs, "Service", "hami-monitor")["spec"]["selector"]
    )
    sched = find(objs, "ServiceMonitor", "hami-scheduler-metrics")
    assert sched["spec"]["endpoints"][0]["port"] == "metrics"
    metrics_svc = find(objs, "Service", "hami-scheduler-metrics")
    assert sched["spec"]["selector"]["matchLabels"] == metrics_svc["spec"]["selector"]
    assert metrics_svc["spec"]["ports"] == [
        {"name": "metrics", "port": 9395, "targetPort": 9395, "protocol": "TCP"}
    ]
    deploy = find(objs, "Deployment", "hami-scheduler")
    args = container(deploy, "extender")["command"]
    assert "--metrics-port=9395" in args and "--metrics-bind-address=127.0.0.1" not in args
    rule = find(objs, "PrometheusRule", "hami-alerts")
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    boards = [
        o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")
    ]
    assert sorted(b["metadata"]["name"] for b in boards) == [
        f"hami-{p.stem.removeprefix('hami-')}-dashboard" for p in sorted(DASHBOARDS.glob("*.json"))
    ]
    for board in boards:
        assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((name, text),) = board["data"].items()
        assert json.loads(text) == json.loads((DASHBOARDS / name).read_text())


def test_no_device_plugin_no_monitor():
    objs = render({"devicePlugin": {"enabled": False}})
    assert not [o for o in objs if o["metadata"]["name"] == "hami-monitor"]


@pytest.mark.parametrize(
    ("bad", "names"),
    [
        ({"monitor": {"port": 0}}, "/monitor/port"),
        ({"monitor": {"serviceMonitor": {"interval": "soon"}}}, "/monitor/serviceMonitor/interval"),
        ({"monitor": {"dashbords": {"enabled": True}}}, "dashbords"),
    ],
)
def test_the_schema_rejects_bad_monitor_values_naming_the_key(bad, names):
    chart = helm_python.Chart.load(CHART)
    with pytest.raises(helm_python.HelmValuesError) as info:
        chart.validate_schema(bad)
    assert names in str(info.value)
