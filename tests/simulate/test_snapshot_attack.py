"""The issue-24 attack run on ``hami simulate`` with a hostile snapshot: names carrying
terminal escape sequences (ESC, BEL) and bidirectional overrides, and a ``*List``
``kind`` of megabytes. ``hami top`` already escaped every cell (item 18); the simulate
report printed the names and the loader's warnings raw, and a warning as long as the
kind it quoted."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from click.testing import CliRunner

from hami_core.cli import cli

REPO = Path(__file__).resolve().parents[2]
ESC = "\x1b[2J\x1b]0;owned\x07\u202eevil"
RAW = ("\x1b", "\x07", "\u202e")


def _snapshot(tmp_path: Path) -> Path:
    base = yaml.safe_load((REPO / "examples" / "snapshot.yaml").read_text())
    hostile = copy.deepcopy(base)
    for item in hostile["items"]:
        item["metadata"]["name"] = ESC + item["metadata"]["name"]
    junk = {"apiVersion": "v1", "kind": ESC + "X" * 1_000_000 + "List", "items": 5}
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump_all([junk, hostile]))
    return path


def test_simulate_escapes_names_and_bounds_warnings_from_a_snapshot(tmp_path):
    path = _snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["simulate", "--cluster", str(path)])
    assert result.exit_code == 0, result.output[:500]
    out = result.output  # stdout and stderr together
    for raw in RAW:
        assert raw not in out, f"{raw!r} reached the terminal"
    assert "\\x1b[2J" in out  # the names are shown, escaped
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert warnings, out[:500]
    assert all(len(line) < 1000 for line in warnings), [len(w) for w in warnings]


def test_simulate_explain_escapes_names_from_a_snapshot(tmp_path):
    path = _snapshot(tmp_path)
    result = CliRunner().invoke(
        cli, ["simulate", "--cluster", str(path), "--explain", "default/train-whole-card"]
    )
    assert result.exit_code == 0, result.output[:500]
    assert "\\x1b[2J" in result.output  # the nodes are named, escaped
    for raw in RAW:
        assert raw not in result.output, f"{raw!r} reached the terminal"
