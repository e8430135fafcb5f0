"""Who holds what is ``hami_core.facts``; the rooms that only read those facts (the
webhook, the device plugin, the monitor, ``hami top``, the metrics servers) do not import
the scheduling engine. The import-linter contract that ``make test`` runs (``make
layers``) names them all, and it does refuse a reader that imports the engine, directly
or through another module. The facts have one ``pod_ref`` and one liveness rule."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from hami_core.protocol.pods import is_live, live_pod_uids
from tests.importcontracts import contract_named, lint_made_up_packages

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "hami_core"
CONTRACT = "The readers of who holds what do not import the scheduling engine"
READERS = {
    "hami_core.webhook",
    "hami_core.deviceplugin",
    "hami_core.monitor",
    "hami_core.top",
    "hami_core.facts",
}


def _contract() -> dict[str, Any]:
    return contract_named(CONTRACT)


def _metrics_servers() -> set[str]:
    return {f"hami_core.servers.{p.stem}" for p in (CORE / "servers").glob("*metrics*.py")}


def test_the_contract_names_every_reader_and_metrics_server() -> None:
    contract = _contract()
    assert contract["forbidden_modules"] == ["hami_core.scheduling"]
    sources = set(contract["source_modules"])
    metrics = _metrics_servers()
    assert "hami_core.servers.metrics" in metrics
    assert READERS | metrics <= sources
    # indirect imports count too: a reader may not reach the engine through another room
    assert not contract.get("allow_indirect_imports", False)


def test_lint_imports_refuses_a_reader_importing_the_engine(tmp_path: Path) -> None:
    """The contract as written, over three made-up readers: one importing the facts
    passes; one importing ``hami_core.scheduling`` and one reaching it through
    ``hami_core.servers.extender`` are named."""
    code, out = lint_made_up_packages(
        tmp_path,
        _contract(),
        {
            "hami_good": "import hami_core.facts.usage\n",
            "hami_bad": "import hami_core.scheduling.scheduler\n",
            "hami_sly": "import hami_core.servers.extender\n",
        },
    )
    assert code == 1, out
    assert "hami_bad -> hami_core.scheduling" in out, out
    assert "hami_sly -> hami_core.servers.extender" in out, out
    assert "hami_good ->" not in out, out


def _defined(name: str) -> list[str]:
    """Modules of the core that define a top-level function ``name``."""
    found = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body):
            found.append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("name", ["pod_ref", "is_live", "live_pod_uids"])
def test_one_pod_ref_and_one_liveness_rule(name: str) -> None:
    assert _defined(name) == ["hami_core/protocol/pods.py"]


def test_podspec_is_gone() -> None:
    assert not (CORE / "scheduling" / "podspec.py").exists()
    for path in CORE.rglob("*.py"):
        assert "podspec" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize(
    ("phase", "live"),
    [("Pending", True), ("Running", True), (None, True), ("Succeeded", False), ("Failed", False)],
)
def test_the_liveness_rule_and_live_pod_uids_agree(phase: str | None, live: bool) -> None:
    pod = {"metadata": {"uid": "u1"}, "status": {"phase": phase} if phase else {}}
    assert is_live(pod) is live
    assert live_pod_uids([pod]) == (frozenset({"u1"}) if live else frozenset())
