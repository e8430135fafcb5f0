"""CI refuses silent skips (``tests/skips.py``): under ``HAMI_TEST_NO_SKIPS=1`` (what
``.ci/run`` sets) a test or module skipped for want of a tool fails the run, each named;
a test that does not apply to the machine (``not_applicable``) may still skip; without
the variable, a developer's run skips as before. The Chromium install only warned on
failure and the browser tests then skipped without a word in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.skips import NO_SKIPS_ENV

REPO = Path(__file__).resolve().parents[2]

TESTS = """
import pytest

from tests.skips import not_applicable, not_applicable_if


def test_the_browser():
    pytest.skip("chromium is not installed (scripts/chromium-install.sh)")


def test_on_another_machine():
    not_applicable("a real NVIDIA driver library is installed here")


@not_applicable_if(True, "cross-builds from an x86_64 host only")
def test_a_cross_build():
    pass


@pytest.mark.xfail(reason="known", strict=True)
def test_expected_to_fail():
    raise AssertionError


def test_that_runs():
    assert True
"""
MODULE = """
import pytest

pytest.importorskip("hami_no_such_sdk", reason="pip install -e '.[dev]' (the SDK)")


def test_with_the_sdk():
    pass
"""


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    (tmp_path / "test_tools.py").write_text(TESTS)
    (tmp_path / "test_sdk.py").write_text(MODULE)
    return tmp_path


def run(suite: Path, *, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != NO_SKIPS_ENV}
    env["PYTHONPATH"] = str(REPO)
    if ci:
        env[NO_SKIPS_ENV] = "1"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "tests.skips", "-p", "no:cacheprovider"]
    return subprocess.run(argv, cwd=suite, env=env, capture_output=True, text=True, timeout=120)


def test_ci_fails_a_run_with_a_skip_for_a_missing_tool_naming_each(suite):
    proc = run(suite, ci=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    section = proc.stdout[proc.stdout.index(f"skips {NO_SKIPS_ENV}=1 refuses") :]
    assert "test_tools.py::test_the_browser: chromium is not installed" in section
    assert "test_sdk.py: pip install -e '.[dev]' (the SDK)" in section
    assert "2 test(s) or module(s) skipped" in section
    # what does not apply here, and an expected failure, are not refused
    assert "NVIDIA driver" not in section and "x86_64" not in section
    assert "test_expected_to_fail" not in section


def test_a_developers_run_only_skips(suite):
    proc = run(suite, ci=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "refuses" not in proc.stdout
    assert "1 passed, 4 skipped, 1 xfailed" in proc.stdout


def test_ci_passes_a_run_whose_skips_all_do_not_apply(suite):
    (suite / "test_sdk.py").unlink()
    (suite / "test_tools.py").write_text(
        TESTS.replace('    pytest.skip("chromium', '    return ("')
    )
    proc = run(suite, ci=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 skipped" in proc.stdout and "refuses" not in proc.stdout


def test_ci_sets_the_variable():
    assert f"export {NO_SKIPS_ENV}=1" in (REPO / ".ci" / "run").read_text()
