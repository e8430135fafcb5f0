"""The chart's allocation signing (docs/PROTOCOL.md §4a): the scheduler alone can read
the signing key (by name), the device plugins get only the public keys (the ConfigMap the
scheduler publishes at its first start, read by name through the API)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chart.helm import find, render

pytest.importorskip("helm_python", reason="pip install -e '.[dev]' (helm-python-sdk)")


def _args(container: dict) -> list[str]:
    return list(container.get("command") or []) + list(container.get("args") or [])


def test_the_scheduler_signs_with_a_key_only_it_reads():
    objs = render(namespace="gpu")
    deploy = find(objs, "Deployment", "hami-scheduler")
    (ext,) = [
        c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    ]
    assert "--allocation-signing-key=secret:gpu/hami-allocation-key" in _args(ext)
    assert "--allocation-public-keys-configmap=gpu/hami-allocation-keys" in _args(ext)
    role = find(objs, "Role", "hami-scheduler-signing")
    assert role["metadata"]["namespace"] == "gpu"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["hami-allocation-key"],
            "verbs": ["get"],
        },
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["hami-allocation-keys"],
            "verbs": ["get", "patch"],
        },
    ]
    binding = find(objs, "RoleBinding", "hami-scheduler-signing")
    assert [s["name"] for s in binding["subjects"]] == ["hami-scheduler"]


def test_the_device_plugins_get_the_public_keys_only():
    objs = render(namespace="gpu")
    for ds in [
        o for o in objs if o["kind"] == "DaemonSet" and "device-plugin" in o["metadata"]["name"]
    ]:
        spec = ds["spec"]["template"]["spec"]
        assert not any("secret" in v for v in spec["volumes"])
        (_plugin,) = [
            c
            for c in spec["containers"]
            if "--allocation-public-keys=configmap:gpu/hami-allocation-keys" in _args(c)
        ]
    role = find(objs, "Role", "hami-device-plugin-keys")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["hami-allocation-keys"],
            "verbs": ["get"],
        }
    ]
    # no role of the device plugin reaches Secrets
    for role in [o for o in objs if o["kind"] in ("Role", "ClusterRole")]:
        if "device-plugin" in role["metadata"]["name"]:
            assert not any("secrets" in r["resources"] for r in role["rules"])


@pytest.mark.parametrize(
    ("release", "fullname"),
    [("hami", "hami"), ("gpu-hami", "gpu-hami"), ("prod", "prod-hami")],
)
def test_the_key_is_named_after_the_charts_fullname(release, fullname):
    """PROTOCOL §4a names the Secret ``<fullname>-allocation-key``: the release name when it
    contains ``hami``, ``<release>-hami`` otherwise (not ``<release>-allocation-key``)."""
    objs = render(name=release, namespace="gpu")
    deploy = find(objs, "Deployment", f"{fullname}-scheduler")
    (ext,) = [
        c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"
    ]
    assert f"--allocation-signing-key=secret:gpu/{fullname}-allocation-key" in _args(ext)
    assert f"--allocation-public-keys-configmap=gpu/{fullname}-allocation-keys" in _args(ext)
    protocol = " ".join((Path(__file__).parents[2] / "docs" / "PROTOCOL.md").read_text().split())
    assert (
        "`<fullname>-allocation-key`, where `<fullname>` is the release name when it "
        "contains `hami` and `<release>-hami` otherwise"
    ) in protocol
