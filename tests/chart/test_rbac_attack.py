"""The issue-24 attack run on the chart's RBAC: every Role and ClusterRole the chart
renders, with its defaults and with every example's values, is scanned for what would
let a component's stolen token take the cluster: wildcard verbs or resources,
``escalate``/``bind``/``impersonate``, secrets, exec/attach/proxy, token requests, RBAC
objects, and webhook configurations other than the webhook's own (by ``resourceNames``).
The rules pinned per component are ``test_chart.py``'s; this test fails when any rule
of any values file reaches one of these, whoever adds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chart.helm import EXAMPLES, example_values, render

pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")

FORBIDDEN_VERBS = {"*", "escalate", "bind", "impersonate"}
FORBIDDEN_RESOURCES = {
    "*",
    "pods/exec",
    "pods/attach",
    "pods/portforward",
    "nodes/proxy",
    "services/proxy",
    "serviceaccounts/token",
    "clusterroles",
    "clusterrolebindings",
    "roles",
    "rolebindings",
    "certificatesigningrequests/approval",
    "validatingwebhookconfigurations",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
}
#: (kind, name, resource) -> what may be held, and why.
ALLOWED = {
    # its own configuration's caBundle (auto certificates), by name
    ("ClusterRole", "hami-webhook", "mutatingwebhookconfigurations"): {"get", "patch"},
    # its serving certificate: create cannot be narrowed by name (RBAC), the rest is
    ("Role", "hami-webhook-tls", "secrets"): {"create", "get", "patch", "update"},
    # its allocation-signing key (docs/PROTOCOL.md §4a): made at first start, read by name
    ("Role", "hami-scheduler-signing", "secrets"): {"create", "get"},
}


def _findings(objs: list[dict[str, Any]]) -> list[str]:
    out = []
    for obj in objs:
        if not obj or obj.get("kind") not in ("Role", "ClusterRole"):
            continue
        name = obj["metadata"]["name"]
        for rule in obj.get("rules") or []:
            verbs = set(rule.get("verbs") or [])
            for res in rule.get("resources") or []:
                allowed = ALLOWED.get((obj["kind"], name, res))
                if allowed is not None:
                    if not verbs <= allowed or (res != "secrets" and not rule.get("resourceNames")):
                        out.append(f"{obj['kind']} {name}: {res} {sorted(verbs)}")
                    continue
                if (
                    verbs & FORBIDDEN_VERBS
                    or res in FORBIDDEN_RESOURCES
                    or res
                    in (
                        "secrets",
                        "mutatingwebhookconfigurations",
                    )
                ):
                    out.append(f"{obj['kind']} {name}: {res} {sorted(verbs)}")
            if "*" in (rule.get("apiGroups") or []):
                out.append(f"{obj['kind']} {name}: apiGroups *")
    return out


@pytest.mark.parametrize(
    "example", [None, *EXAMPLES], ids=["defaults", *(p.stem for p in EXAMPLES)]
)
def test_no_role_of_the_chart_reaches_what_takes_the_cluster(example: Path | None):
    objs = render(example_values(example) if example else None)
    assert _findings(objs) == []
