"""A vendor backend imports only the kit (``hami_core.backend``; ``hami_core.testing``
in its tests): the import-linter contract that ``make test`` runs (``make layers``)
names every backend package under ``backends/`` and forbids every other module of the
core, and it does refuse a backend that imports past the kit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hami_core
from tests.importcontracts import contract_named, importlinter_config, lint_made_up_packages

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "A vendor backend imports only the backend kit"
ALLOWED = {"hami_core.backend", "hami_core.testing"}


def _config() -> dict[str, Any]:
    return importlinter_config()


def _contract(cfg: dict[str, Any]) -> dict[str, Any]:
    return contract_named(CONTRACT)


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
    code, out = lint_made_up_packages(
        tmp_path,
        _contract(_config()),
        {
            "hami_good": "from hami_core.backend import DeviceInfo\n",
            "hami_bad": "from hami_core.backend import DeviceInfo\nimport hami_core.scheduling\n",
        },
        timeout_s=120,
    )
    assert code == 1, out
    assert "hami_bad -> hami_core.scheduling" in out, out
    assert "hami_good ->" not in out, out
