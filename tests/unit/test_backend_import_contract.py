"""A vendor backend imports only the kit (``hami_core.backend``; ``hami_core.testing``
in its tests): the import-linter contract that ``make test`` runs (``make layers``)
names every backend package under ``backends/`` and forbids every other module of the
core, and it does refuse a backend that imports past the kit."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import hami_core

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "A vendor backend imports only the backend kit"
ALLOWED = {"hami_core.backend", "hami_core.testing"}


def _config() -> dict[str, Any]:
    cfg: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "importlinter"
    ]
    return cfg


def _contract(cfg: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in cfg["contracts"] if c["name"] == CONTRACT]
    assert found, f"no import-linter contract named {CONTRACT!r} in pyproject.toml"
    return found[0]


def _backend_packages() -> set[str]:
    return {p.name for p in ROOT.glob("backends/hami-*/hami_*") if (p / "__init__.py").is_file()}


def _core_modules() -> set[str]:
    core = Path(hami_core.__file__).parent
    return {
        f"hami_core.{p.stem}"
        for p in core.iterdir()
        if not p.name.startswith("_")
        and ((p.is_dir() and (p / "__init__.py").is_file()) or p.suffix == ".py")
    }


def test_the_contract_names_every_backend() -> None:
    cfg = _config()
    backends = _backend_packages()
    assert len(backends) >= 13
    assert set(_contract(cfg)["source_modules"]) == backends
    assert backends <= set(cfg["root_packages"])  # the graph holds them


def test_the_contract_forbids_every_core_module_but_the_kit() -> None:
    forbidden = set(_contract(_config())["forbidden_modules"])
    assert forbidden == _core_modules() - ALLOWED


def test_lint_imports_refuses_a_backend_importing_the_scheduler(tmp_path: Path) -> None:
    """The contract as written, over two made-up vendors: one importing the kit passes,
    one importing ``hami_core.scheduling`` is named."""
    for name, line in (
        ("hami_good", "from hami_core.backend import DeviceInfo\n"),
        ("hami_bad", "from hami_core.backend import DeviceInfo\nimport hami_core.scheduling\n"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(line)
    contract = dict(_contract(_config()), source_modules=["hami_good", "hami_bad"])
    lines = [
        "[importlinter]",
        "root_packages =\n    hami_core\n    hami_good\n    hami_bad",
        "include_external_packages = True",
        "[importlinter:contract:vendors]",
    ]
    for key, value in contract.items():
        if isinstance(value, list):
            lines.append(f"{key} =\n" + "\n".join(f"    {v}" for v in value))
        else:
            lines.append(f"{key} = {value}")
    (tmp_path / "setup.cfg").write_text("\n".join(lines) + "\n")
    lint = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run(
        [str(lint), "--config", str(tmp_path / "setup.cfg"), "--no-cache"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "hami_bad -> hami_core.scheduling" in out, out
    assert "hami_good ->" not in out, out
