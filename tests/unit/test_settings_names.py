"""Label selectors, namespaces and ``NAMESPACE/NAME`` references given to any ``hami``
command are checked at start against Kubernetes' rules (a label's key and value, a
DNS-1123 label for a namespace, a DNS-1123 subdomain for an object's name), the option
named, exit status 2: ``hami top -l a=b=c`` selected on the value ``b=c`` (no label can
have it) and ``hami top -n ''`` matched nothing, both without a word."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import ConfigError, InvalidInputError
from hami_core.options import all_commands
from hami_core.servers.options import label_pairs
from hami_core.servers.signingkeys import CONFIGMAP_PREFIX, SECRET_PREFIX
from hami_core.settings import settings_of


def top(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["top", "--example", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("selector", "says"),
    [
        ("a=b=c", "'a=b=c': the value 'b=c' is not a label value"),
        ("a!=b", "'a!=b': the key 'a!' is not a label key"),
        ("gpu", "'gpu' is not key=value"),
        ("=on", "'=on' is not key=value"),
        ("gpu=on,", "'' is not key=value"),
        ("gpu=on,gpu=off", "the key 'gpu' is given twice"),
        ("a/b/c=1", "the key 'a/b/c' is not a label key: its prefix"),
        ("Example.com/gpu=on", "the key 'Example.com/gpu' is not a label key: its prefix"),
        ("-gpu=on", "the key '-gpu' is not a label key: its name"),
        ("x" * 64 + "=1", "is not a label key: its name"),
        ("gpu=" + "v" * 64, "is not a label value"),
        ("gpu=on off", "the value 'on off' is not a label value"),
    ],
)
def test_top_refuses_a_selector_no_label_can_match_naming_the_flag(selector, says):
    code, out = top("-l", selector)
    assert code == 2, out
    assert "--selector" in out and says in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize("namespace", ["", "Kube-System", "kube_system", "-a", "a" * 64, "a/b"])
def test_top_refuses_a_namespace_no_namespace_can_have_naming_the_flag(namespace):
    code, out = top("-n", namespace)
    assert code == 2, out
    assert f"--namespace: {namespace!r} is not a namespace: a DNS-1123 label" in out, out


def test_top_takes_kubernetes_label_keys_values_and_namespaces():
    """Prefixed keys, '_' and '.' inside, an empty value and a 63-character namespace
    are all Kubernetes' own: taken, and the view is drawn."""
    code, out = top("-l", "example.com/gpu.model=A100_80G,zone=,gpu=on", "-n", "a" * 63)
    assert code == 0, out
    assert label_pairs(" app.kubernetes.io/name = x , k=v ") == {
        "app.kubernetes.io/name": "x",
        "k": "v",
    }
    assert label_pairs("") == {} and label_pairs("  ") == {}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["scheduler", "--node-label-selector", "gpu=on=1"], "--node-label-selector"),
        (["scheduler", "--lease-namespace", "Kube_System"], "--lease-namespace: 'Kube_System'"),
        (
            ["scheduler", "--allocation-public-keys-configmap", "kube-system/Keys"],
            "--allocation-public-keys-configmap: 'kube-system/Keys' has a name",
        ),
        (
            ["scheduler", "--allocation-signing-key", "secret:Kube/keys"],
            "--allocation-signing-key: 'secret:Kube/keys' has a namespace",
        ),
        (["webhook", "--service-namespace", ""], "--service-namespace: ''"),
        (
            ["device-plugin", "--node-name", "n", "--allocation-public-keys", "configmap:a/B"],
            "--allocation-public-keys: 'configmap:a/B' has a name",
        ),
        (["defrag", "--protect-namespace", "kube system"], "--protect-namespace: 'kube system'"),
        (["defrag", "--pod", "Team/pod"], "--pod: 'Team/pod' has a namespace"),
        (["explain", "ns/p", "--protect-namespace", "A"], "--protect-namespace: 'A'"),
    ],
)
def test_every_command_refuses_a_bad_name_at_start_naming_the_flag(args, says):
    """Before anything is contacted: the servers never start, the cluster is not read."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert says in result.output, result.output


def test_explain_refuses_a_pod_reference_no_pod_can_have():
    result = CliRunner().invoke(cli, ["explain", "Team/pod", "--snapshot", "/dev/null"])
    assert result.exit_code == 1
    assert "NAMESPACE/POD 'Team/pod' has a namespace that is not a DNS-1123 label" in (
        result.output
    )


def test_the_prefixes_checked_at_start_are_the_ones_the_keys_are_read_by():
    assert (SECRET_PREFIX, CONFIGMAP_PREFIX) == ("secret:", "configmap:")


#: A value of each kind that Kubernetes refuses.
BAD: dict[str, Any] = {
    "selector": {"a": "b=c"},
    "namespace": "Kube_System",
    "namespaces": ("kube-system", "Kube_System"),
    "object": "Kube_System/x",
}


def _kind(field: attrs.Attribute[Any], metavar: str, convert: Any, multiple: bool) -> str:
    if convert is label_pairs:
        return "selector"
    if "NAMESPACE/NAME" in metavar:
        return "object"
    if field.name.endswith("namespace"):
        return "namespaces" if multiple else "namespace"
    return ""


KINDED = [
    (title, cls, field, kind)
    for title, cls in all_commands()
    for field, meta in settings_of(cls)
    if (kind := _kind(field, meta.metavar, meta.convert, meta.multiple))
]


def test_the_settings_of_these_kinds_are_all_found():
    """The kinds below are recognised in every command that has them (so a new one is
    checked by the test after it)."""
    found = {(title, field.name) for title, _, field, _ in KINDED}
    assert {
        ("hami top", "selector"),
        ("hami top", "namespace"),
        ("hami scheduler", "node_label_selector"),
        ("hami scheduler", "lease_namespace"),
        ("hami scheduler", "allocation_signing_key"),
        ("hami scheduler", "allocation_public_keys_configmap"),
        ("hami scheduler", "consolidation_ledger"),
        ("hami webhook", "service_namespace"),
        ("hami device-plugin", "allocation_public_keys"),
        ("hami defrag", "pod"),
        ("hami defrag", "protect_namespace"),
        ("hami defrag", "ledger"),
        ("hami explain", "protect_namespace"),
    } <= found


@pytest.mark.parametrize(
    ("cls", "field", "kind"),
    [pytest.param(c, f, k, id=f"{t} {f.name}") for t, c, f, k in KINDED],
)
def test_every_setting_naming_a_namespace_or_labels_refuses_what_kubernetes_refuses(
    cls, field, kind
):
    """Built by code too (the processes take the class): each such setting has its
    check, whatever flag it has."""
    required = {f.name: "node-a" for f, m in settings_of(cls) if m.required}
    bad = BAD[kind]
    if field.name == "allocation_signing_key":
        bad = SECRET_PREFIX + bad
    elif field.name == "allocation_public_keys":
        bad = CONFIGMAP_PREFIX + bad
    with pytest.raises(ConfigError, match=r"^--[a-z-]+: "):
        cls(**{**required, field.name: bad})


def test_label_pairs_errors_are_input_errors():
    with pytest.raises(InvalidInputError, match=r"'a=b=c': the value 'b=c'"):
        label_pairs("a=b=c")
