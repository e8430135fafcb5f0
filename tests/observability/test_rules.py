"""The alert rules and dashboards the chart ships: ``promtool check rules`` and
``promtool test rules`` (the handbook's cases fire, and stay quiet just below), the
dashboards in line with their generator, every expression well-formed for Prometheus."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.prometheus import (
    DASHBOARDS,
    REPO,
    RULE_TESTS,
    RULES,
    PrometheusUnavailable,
    dashboard_queries,
    prometheus_bin,
    rule_queries,
)


@pytest.fixture(scope="module")
def promtool():
    try:
        return str(prometheus_bin() / "promtool")
    except PrometheusUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


def test_promtool_checks_the_rules_file(promtool):
    proc = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 6 rules found" in proc.stdout


def test_promtool_unit_tests_of_the_alerts_pass(promtool):
    proc = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)],
        capture_output=True,
        text=True,
        cwd=RULE_TESTS.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_of_the_handbook_has_a_rule_and_a_unit_test():
    alerts = {name for name, _ in rule_queries()}
    assert alerts == {
        "HamiContainerGPUMemoryNearLimit",
        "HamiGPUMemoryLow",
        "HamiBindFailureRateHigh",
        "HamiGPUUnhealthy",
        "HamiNodeInventoryStale",
        "HamiNodeHandshakeUnanswered",
    }
    tested = RULE_TESTS.read_text()
    for name in alerts:
        assert f"alertname: {name}" in tested, f"{name} has no promtool unit test"


def test_a_broken_rule_is_caught_by_promtool(promtool, tmp_path):
    """The check can fail: an expression with a typo is rejected."""
    bad = tmp_path / "bad.rules.yaml"
    bad.write_text(RULES.read_text().replace("hami_gpu_healthy == 0", "hami_gpu_healthy == == 0"))
    proc = subprocess.run([promtool, "check", "rules", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0


def test_dashboards_match_their_generator():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-dashboards.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


def test_dashboards_are_grafana_json_with_a_prometheus_datasource_variable():
    boards = sorted(DASHBOARDS.glob("*.json"))
    assert [p.stem for p in boards] == [
        "hami-cluster-overview",
        "hami-device-health",
        "hami-node-gpus",
        "hami-pod-usage",
        "hami-scheduler",
    ]
    uids = set()
    for path in boards:
        board = json.loads(path.read_text())
        uids.add(board["uid"])
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[0] == "datasource"
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"], panel["title"]
            used = {
                v for t in panel["targets"] for v in ("node", "namespace") if f"${v}" in t["expr"]
            }
            assert used <= set(names), f"{path.name}: {panel['title']} uses an undefined variable"
    assert len(uids) == len(boards)
    assert len(dashboard_queries()) >= 30
