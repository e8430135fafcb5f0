"""docs/hami-go-tests.md lists every HAMi Go test function of ``pkg/device`` and
``pkg/scheduler`` (issue #15 item 11) with a status.

``tests/fixtures/hami/go-test-functions.txt`` holds their names (``<file>::<function>``,
Project-HAMi/HAMi at the commit the document names): a name without a row is a
checklist item nobody looked at.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMES = ROOT / "tests" / "fixtures" / "hami" / "go-test-functions.txt"
DOC = ROOT / "docs" / "hami-go-tests.md"
STATUSES = {"covered", "differs", "n/a", "open"}


def _rows() -> dict[str, str]:
    """``<file>::<function>`` -> status, from the document's per-file tables."""
    rows: dict[str, str] = {}
    current = None
    for line in DOC.read_text().splitlines():
        if m := re.match(r"^## `(pkg/[^`]+_test\.go)`$", line):
            current = m.group(1)
        elif current and (m := re.match(r"^\| `(Test\w*)` \| ([^|]+) \|", line)):
            rows[f"{current}::{m.group(1)}"] = m.group(2).strip()
    return rows


def test_every_upstream_test_function_has_a_row_with_a_status():
    names = [n for n in NAMES.read_text().split() if n]
    assert len(names) == len(set(names)) > 400
    rows = _rows()
    missing = [n for n in names if n not in rows]
    assert missing == []
    assert {rows[n] for n in names} <= STATUSES


def test_differs_and_na_rows_say_why():
    text = DOC.read_text().splitlines()
    checked = 0
    for line in text:
        if line.startswith("| `Test") and ("| differs |" in line or "| n/a |" in line):
            why = line.split("|")[3].strip()
            assert why, line
            checked += 1
    assert checked > 10  # the table's rows were read (a format change reads none)


def test_the_tests_the_document_names_exist():
    """Each ``tests/compat/<file>.py::<test>`` or ``tests/backends/<vendor>/<file>.py::<test>``
    the document cites is a real test (a name ending in ``*`` names at least one)."""
    cited = set(
        re.findall(r"tests/((?:compat|backends/\w+)/test_\w+)\.py::(test_\w+\*?)", DOC.read_text())
    )
    assert cited
    for module, name in cited:
        source = (ROOT / "tests" / f"{module}.py").read_text()
        needle = f"def {name[:-1]}" if name.endswith("*") else f"def {name}("
        assert needle in source, (module, name)
