"""Skipped tests, and CI's refusal of the silent ones (a pytest plugin, loaded by
``tests/conftest.py``).

A test skips for one of two reasons:

- a tool or package its tier needs is missing (Chromium, the helm SDK, HiGHS, gcc, a
  backend, ...): ``make install`` installs them all, so on a developer's machine the skip
  says what to install; under ``HAMI_TEST_NO_SKIPS=1`` (what ``.ci/run`` sets) the run
  fails instead, naming each such skip: the Chromium install only warned on failure,
  and the browser tests then skipped without a word in CI;
- the test does not apply to this machine (an aarch64 host for a cross build, a real
  NVIDIA driver present, a backend that declares no such hook): its reason starts with
  ``NOT_APPLICABLE`` (``not_applicable``, ``not_applicable_if``), and CI allows it.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

import pytest

#: Set (to 1) by ``.ci/run``: a skip that is not ``NOT_APPLICABLE`` fails the run.
NO_SKIPS_ENV = "HAMI_TEST_NO_SKIPS"
#: How a skip that CI allows starts its reason.
NOT_APPLICABLE = "not applicable here: "

_skips: list[tuple[str, str]] = []


def not_applicable(reason: str) -> NoReturn:
    """Skip the running test: it does not apply to this machine (CI allows it)."""
    __tracebackhide__ = True  # the skip is reported where the test calls this
    pytest.skip(NOT_APPLICABLE + reason)


def not_applicable_if(condition: bool, reason: str) -> pytest.MarkDecorator:
    """``pytest.mark.skipif`` for a test that does not apply where ``condition`` holds."""
    return pytest.mark.skipif(condition, reason=NOT_APPLICABLE + reason)


def _reason(report: Any) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix("Skipped: ")


def _record(report: Any) -> None:
    if report.skipped and not getattr(report, "wasxfail", None):
        reason = _reason(report)
        if not reason.startswith(NOT_APPLICABLE):
            _skips.append((report.nodeid, reason))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each skipped test (a ``skipif`` mark or a ``pytest.skip`` call), with its reason."""
    _record(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Each skipped module (``pytest.importorskip`` at its top), with its reason."""
    _record(report)


def refused() -> list[tuple[str, str]]:
    """The skips CI refuses in this run (``(node id, reason)``); none without
    ``NO_SKIPS_ENV``."""
    return list(_skips) if os.environ.get(NO_SKIPS_ENV) == "1" else []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under ``NO_SKIPS_ENV``, a run with a refused skip fails (exit status 1)."""
    if refused() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Name each refused skip and what to do about it."""
    shown = refused()
    if not shown:
        return
    terminalreporter.section(f"skips {NO_SKIPS_ENV}=1 refuses", sep="=", red=True, bold=True)
    for nodeid, reason in shown:
        terminalreporter.line(f"{nodeid}: {reason}")
    terminalreporter.line(
        f"{len(shown)} test(s) or module(s) skipped for want of what the tiers need: install "
        "it (make install), or say why the test does not apply here (tests/skips.py)"
    )
