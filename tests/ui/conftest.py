"""The web view's tests leave no reader behind: a ``hami-ui-reader`` thread left running
re-reads its cluster beside every later test of the session (it skewed
tests/unit/test_admission_linear.py's count of copies in a full run)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def no_reader_left_behind() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    deadline = threading.Event()
    for _ in range(50):
        left = [
            t.name
            for t in threading.enumerate()
            if t.name == "hami-ui-reader" and t.ident not in before and t.is_alive()
        ]
        if not left:
            return
        deadline.wait(0.1)
    pytest.fail(f"a test left reader threads running: {left}")
