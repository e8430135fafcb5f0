"""The chart's switch for continuous consolidation (docs/consolidation.md): off by default
(no flag, no extra RBAC); on, the extender gets the flags, its ledger in the release's
namespace, and the planner's reads (Jobs, namespaces) and the ledger ConfigMap by name."""

from __future__ import annotations

import itertools

import pytest
import yaml

from hami_core.cli import cli
from hami_core.defrag.ledger import DEFAULT_LOCATION
from hami_core.options import DefragOptions
from hami_core.servers.options import SchedulerOptions
from hami_core.servers.scheduler_main import check_follow_lease, check_lease_timing
from tests.chart.helm import container, find, render

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")


def _extender(objs):
    return container(find(objs, "Deployment", "hami-scheduler"), "extender")["command"]


def _configmap_rules(objs):
    role = find(objs, "Role", "hami-scheduler-signing")
    return [r for r in role["rules"] if "configmaps" in r["resources"] and r.get("resourceNames")]


def test_consolidation_is_off_by_default_with_no_extra_rights():
    objs = render()
    assert not [a for a in _extender(objs) if a.startswith("--consolidation")]
    rules = find(objs, "ClusterRole", "hami-scheduler")["rules"]
    assert not [r for r in rules if "jobs" in r["resources"] or "namespaces" in r["resources"]]
    assert all("defrag" not in str(r) for r in _configmap_rules(objs))


def test_consolidation_on_passes_its_settings_and_grants_only_what_it_uses():
    objs = render(
        {"scheduler": {"consolidation": {"enabled": True, "afterSeconds": 60, "maxEvictions": 2}}}
    )
    args = [a for a in _extender(objs) if a.startswith("--consolidation")]
    assert args == [
        "--consolidation",
        "--consolidation-after=60",
        "--consolidation-max-evictions=2",
        "--consolidation-max-evictions-per-hour=20",
        "--consolidation-ledger=hami-system/hami-scheduler-defrag-ledger",
    ]
    # every flag is one hami scheduler takes, with a value it accepts
    SchedulerOptions(
        consolidation=True,
        consolidation_after_s=60,
        consolidation_max_evictions=2,
        consolidation_ledger="hami-system/hami-scheduler-defrag-ledger",
    )
    rules = find(objs, "ClusterRole", "hami-scheduler")["rules"]
    assert {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list"]} in rules
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]} in rules
    assert {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["hami-scheduler-defrag-ledger"],
        "verbs": ["get", "update"],
    } in _configmap_rules(objs)


def test_the_cli_and_the_scheduler_default_to_the_ledger_of_the_documented_install():
    # README: helm install hami charts/hami -n hami-system (render's defaults)
    objs = render({"scheduler": {"consolidation": {"enabled": True}}})
    (chart,) = [a for a in _extender(objs) if a.startswith("--consolidation-ledger=")]
    chart_ledger = chart.partition("=")[2]
    assert chart_ledger == DEFAULT_LOCATION
    assert DefragOptions().ledger == chart_ledger  # hami defrag --apply
    assert SchedulerOptions().consolidation_ledger == chart_ledger
    # the name the chart's RBAC grants is the same ConfigMap
    (rule,) = [r for r in _configmap_rules(objs) if "update" in r["verbs"]]
    assert rule["resourceNames"] == [chart_ledger.partition("/")[2]]
    namespace = find(objs, "Deployment", "hami-scheduler")["metadata"]["namespace"]
    assert chart_ledger.partition("/")[0] == namespace


CONFIGURATIONS = [
    {"replicas": r, "leaderElect": e, "hostNetwork": h, "consolidation": {"enabled": c}}
    for r, e, h, c in itertools.product((1, 2, 3), (True, False), (False, True), (True, False))
]


@pytest.mark.parametrize("scheduler", CONFIGURATIONS, ids=str)
def test_evictions_are_the_leaders_alone_in_every_configuration(scheduler):
    """Every replica runs an extender. Either kube-scheduler elects and each extender acts
    on its own (evicts, nominates, handshakes) only while its own kube-scheduler holds
    that very Lease, or there is no election and never more than one replica, even
    during a rollout."""
    objs = render({"scheduler": scheduler})
    deploy = find(objs, "Deployment", "hami-scheduler")
    args = _extender(objs)
    ctx = cli.commands["scheduler"].make_context("scheduler", args[2:])
    opts = SchedulerOptions(**{k: v for k, v in ctx.params.items() if k != "log_level"})
    check_lease_timing(opts)
    check_follow_lease(opts)
    assert opts.leader_elect is False  # binds are never refused (kube-scheduler's Lease)
    assert opts.consolidation is scheduler["consolidation"]["enabled"]
    assert opts.preemption is True  # the default: evictions whatever the switch above
    election = yaml.safe_load(find(objs, "ConfigMap", "hami-scheduler")["data"]["config.yaml"])[
        "leaderElection"
    ]
    if election["leaderElect"]:
        lease = f"{election['resourceNamespace']}/{election['resourceName']}"
        assert opts.follow_lease == lease == "hami-system/hami-scheduler"
        assert election["resourceLock"] == "leases"
        # the extender reads it with the Role kube-scheduler renews it with
        role = find(objs, "Role", "hami-scheduler-lease")
        assert {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["hami-scheduler"],
            "verbs": ["get", "update"],
        } in role["rules"]
        assert deploy["spec"].get("strategy", {}).get("type") != "Recreate"
    else:
        assert scheduler["replicas"] == 1 and not scheduler["leaderElect"]
        assert opts.follow_lease is None  # one replica acts, and only one exists
        assert deploy["spec"]["replicas"] == 1
        assert deploy["spec"]["strategy"] == {"type": "Recreate"}


def test_bad_consolidation_values_are_refused_by_the_schema():
    with pytest.raises(helm_python.HelmError, match="maxEvictions"):
        render({"scheduler": {"consolidation": {"enabled": True, "maxEvictions": 0}}})
