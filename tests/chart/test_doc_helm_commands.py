"""The `helm install|upgrade|template` commands the docs give a reader render as written.

Each command's `--set`/`--set-string` pairs (Helm's dotted paths; `--set k=null` deletes a
default) are rendered through the chart, so a key that does not exist is refused by
`values.schema.json` here instead of on the reader's cluster. The migration guide's
install must also keep hami's device plugin off the nodes HAMi's still runs on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.chart.helm import render

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SET = re.compile(r"--set(-string)?[ =]'?([^'=\s]+)=([^'\s]+)'?")


def _commands(text: str) -> list[str]:
    """Every `helm install|upgrade|template` command, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [
        line.strip()
        for line in joined.splitlines()
        if re.match(r"\s*helm (install|upgrade|template)\b", line) and "--set" in line
    ]


def _values(command: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for string, path, raw in SET.findall(command):
        value: Any = raw
        if raw.startswith("{") and raw.endswith("}"):
            value = raw[1:-1].split(",")  # Helm's list form
        elif raw.startswith("<"):
            value = "example"  # a placeholder the reader fills in
        elif not string and raw == "null":
            value = None
        elif not string and raw in ("true", "false"):
            value = raw == "true"
        node = values
        *parents, leaf = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return values


CASES = [(doc, cmd) for doc in DOCS for cmd in _commands(doc.read_text())]


def test_the_docs_give_helm_commands_with_set_flags():
    assert {doc.name for doc, _ in CASES} >= {"README.md", "migrating-from-hami.md"}


@pytest.mark.parametrize(
    ("doc", "command"), CASES, ids=[f"{d.name}:{i}" for i, (d, _) in enumerate(CASES)]
)
def test_each_documented_helm_command_renders(doc: Path, command: str):
    objs = render(_values(command))
    assert any(o["kind"] == "Deployment" for o in objs), (doc.name, command)


def test_the_migration_install_keeps_off_hamis_device_plugin_label():
    """Both charts select `gpu=on`; hami's DaemonSets must wait for a label of their own."""
    (command,) = _commands((ROOT / "docs" / "migrating-from-hami.md").read_text())
    objs = render(_values(command))
    selectors = {
        o["metadata"]["name"]: o["spec"]["template"]["spec"].get("nodeSelector") or {}
        for o in objs
        if o["kind"] == "DaemonSet"
    }
    assert selectors, "no DaemonSet rendered"
    for name, selector in selectors.items():
        assert selector and "gpu" not in selector, (name, selector)


def test_the_migration_install_trusts_hamis_device_plugin_while_it_runs():
    """HAMi's device plugin patches bind-phase and devices-to-allocate on the pods it
    serves; hami's webhook denies that to anyone not `--trusted-user`, so while a node
    still runs HAMi's device plugin its service account must be trusted."""
    (command,) = _commands((ROOT / "docs" / "migrating-from-hami.md").read_text())
    webhook = next(
        o
        for o in render(_values(command))
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-webhook")
    )
    args = webhook["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--trusted-user=system:serviceaccount:kube-system:hami-device-plugin" in args
