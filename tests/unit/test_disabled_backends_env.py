"""``HAMI_DISABLED_BACKENDS`` is read in one place (``plugin.manager.disabled_backends``)
and means the same to every reader: the backends the managers load, the scheduler's
(with its ``--enable-<vendor>=false``) and the backend commands ``hami`` offers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hami_core
from hami_core.plugin.manager import DISABLE_ENV, disabled_backends

CORE = Path(hami_core.__file__).parent


def _reads_of_the_variable() -> list[str]:
    """Every ``<mapping>.get`` / ``getenv`` / ``environ[...]`` of the variable in the core."""
    out = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            arg = None
            if isinstance(node, ast.Call) and node.args:
                if ast.unparse(node.func).endswith(("get", "getenv")):
                    arg = node.args[0]
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
                arg = node.slice
            if arg is None:
                continue
            named = (isinstance(arg, ast.Constant) and arg.value == DISABLE_ENV) or (
                isinstance(arg, ast.Name) and arg.id == "DISABLE_ENV"
            )
            if named:
                out.append(f"{path.relative_to(CORE)}:{node.lineno}")
    return out


def test_the_variable_is_parsed_once() -> None:
    assert _reads_of_the_variable() == ["plugin/manager.py:" + _line_of_the_parser()]


def _line_of_the_parser() -> str:
    source = (CORE / "plugin" / "manager.py").read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "disabled_backends":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call) and ast.unparse(inner.func).endswith("get"):
                    return str(inner.lineno)
    raise AssertionError("no disabled_backends in plugin/manager.py")


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("", frozenset()),
        ("nvidia", frozenset({"nvidia"})),
        (" nvidia , amd ,,", frozenset({"nvidia", "amd"})),
        (",", frozenset()),
    ],
)
def test_the_comma_list(value: str, names: frozenset[str]) -> None:
    assert disabled_backends({DISABLE_ENV: value}) == names


def test_unset_is_none_disabled() -> None:
    assert disabled_backends({}) == frozenset()


def test_the_backend_commands_honour_a_spaced_list(monkeypatch) -> None:
    """``hami nvidia ...`` (a backend's command) is not offered when nvidia is disabled,
    spaces around the name as the managers accept them."""
    from click.testing import CliRunner

    from hami_core.cli import cli

    monkeypatch.setenv(DISABLE_ENV, " amd , nvidia ")
    out = CliRunner().invoke(cli, ["--help"])
    assert out.exit_code == 0, out.output
    assert "nvidia" not in out.output.split("Commands:")[1]
    monkeypatch.setenv(DISABLE_ENV, "amd")
    assert "nvidia" in CliRunner().invoke(cli, ["--help"]).output.split("Commands:")[1]
