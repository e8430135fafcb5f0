"""Fixtures of the Hygon backend tests."""

from __future__ import annotations

import pytest
from hami_hygon import discover

from .support import FakeHySmi


@pytest.fixture
def hy_smi(monkeypatch: pytest.MonkeyPatch) -> FakeHySmi:
    """The hooks' ``hy-smi`` replaced by a fake answering from the K100_AI samples."""
    fake = FakeHySmi("k100")
    monkeypatch.setattr(discover, "runner_for", lambda cfg: fake)
    return fake


@pytest.fixture
def no_hy_smi(monkeypatch: pytest.MonkeyPatch) -> FakeHySmi:
    """The hooks' ``hy-smi`` replaced by one that is not installed."""
    fake = FakeHySmi(None)
    monkeypatch.setattr(discover, "runner_for", lambda cfg: fake)
    return fake
