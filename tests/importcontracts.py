"""The import-linter contracts of ``pyproject.toml``, read and run over made-up
packages: what the contract tests (vendor kit, facts readers) share, so each asserts
only what its contract must refuse."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def importlinter_config() -> dict[str, Any]:
    """``[tool.importlinter]`` of the repository's ``pyproject.toml``."""
    cfg: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
        "importlinter"
    ]
    return cfg


def contract_named(name: str) -> dict[str, Any]:
    """The contract called ``name`` (a copy); fails the test when there is none."""
    found = [c for c in importlinter_config()["contracts"] if c["name"] == name]
    assert found, f"no import-linter contract named {name!r} in pyproject.toml"
    return dict(found[0])


def lint_made_up_packages(
    tmp_path: Path, contract: dict[str, Any], packages: dict[str, str], *, timeout_s: int = 300
) -> tuple[int, str]:
    """Run the real ``lint-imports`` with ``contract`` over ``packages`` (name -> the
    source of its ``__init__.py``) written under ``tmp_path``, as its source modules.

    Returns:
        (exit status, stdout and stderr): 1 and the offending import chains when the
        contract is broken, 0 when kept.
    """
    for name, source in packages.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(source)
    lines = [
        "[importlinter]",
        "root_packages =\n    hami_core\n" + "\n".join(f"    {n}" for n in packages),
        "include_external_packages = True",
        "[importlinter:contract:made-up]",
    ]
    for key, value in {**contract, "source_modules": list(packages)}.items():
        if isinstance(value, list):
            lines.append(f"{key} =\n" + "\n".join(f"    {v}" for v in value))
        else:
            lines.append(f"{key} = {value}")
    (tmp_path / "setup.cfg").write_text("\n".join(lines) + "\n")
    run = subprocess.run(
        [
            str(Path(sys.executable).with_name("lint-imports")),
            "--config",
            "setup.cfg",
            "--no-cache",
        ],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return run.returncode, run.stdout + run.stderr
