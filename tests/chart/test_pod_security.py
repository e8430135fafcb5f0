"""Each component's pods meet the Pod Security Standards level the chart declares for it
(README, "Support"; NOTES): restricted for the scheduler and webhook, privileged for the
node agents, whose every exception checkov's skips explain (test_security_scan.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chart.helm import EXAMPLES, example_values, render
from tests.chart.pod_security import level, restricted_violations

helm_python = pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

DECLARED = {
    "scheduler": "restricted",
    "webhook": "restricted",
    "device-plugin": "privileged",
    "monitor": "privileged",
    "mps-control-daemon": "privileged",
}


def _pods(objs: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (
            o["metadata"]["name"],
            o["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"],
            o["spec"]["template"]["spec"],
        )
        for o in objs
        if o["kind"] in ("Deployment", "DaemonSet")
    ]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_each_component_meets_its_declared_level(example):
    values = example_values(example)
    for name, component, spec in _pods(render(values)):
        want = DECLARED[component]
        if values.get(component.split("-")[0], {}).get("hostNetwork"):
            want = "privileged"  # hostNetwork is an opt-in the example documents
        assert level(spec) == want, (example.stem, name, restricted_violations(spec))


def test_the_checker_is_not_blind():
    """A tenant-like change to the webhook pod (root, a hostPath, an added capability)
    drops it below restricted; privileged drops it below baseline."""
    objs = render()
    spec = next(s for _, c, s in _pods(objs) if c == "webhook")
    assert level(spec) == "restricted"
    c = spec["containers"][0]
    c["securityContext"]["runAsUser"] = 0
    assert "webhook: runAsUser 0" in restricted_violations(spec)
    c["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]
    spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    assert level(spec) == "privileged"
