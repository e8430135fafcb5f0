"""Every hook is documented (who calls it, what it returns) and exercised by a test."""

import inspect
from pathlib import Path

import pytest

from hami_core.plugin import hookspecs

HOOKS = [
    name
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if name.startswith("hami_")
]
TESTS = Path(__file__).resolve().parents[1]


def test_the_five_hooks_of_the_product_card_exist():
    assert {"hami_discover", "hami_fit", "hami_score", "hami_allocate", "hami_mutate"} <= set(HOOKS)


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_documented(name):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert "Called by" in doc, f"{name}: say who calls it and when"
    assert "Returns" in doc, f"{name}: say what it returns (with units)"


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_used_by_a_test(name):
    sources = "\n".join(
        p.read_text(encoding="utf-8") for p in TESTS.rglob("*.py") if p.name != Path(__file__).name
    )
    method = name.removeprefix("hami_")
    assert name in sources or f".{method}(" in sources, f"no test exercises {name}"
