"""Fixtures of the Ascend backend tests."""

from __future__ import annotations

import pytest
from hami_ascend import discover

from .support import FakeNpuSmi


@pytest.fixture
def npu_smi(monkeypatch: pytest.MonkeyPatch) -> FakeNpuSmi:
    """The hooks' ``npu-smi`` replaced by a fake answering from the 910B3 samples."""
    fake = FakeNpuSmi("910b3")
    monkeypatch.setattr(discover, "runner_for", lambda cfg: fake)
    return fake


@pytest.fixture
def no_npu_smi(monkeypatch: pytest.MonkeyPatch) -> FakeNpuSmi:
    """The hooks' ``npu-smi`` replaced by one that is not installed."""
    fake = FakeNpuSmi(None)
    monkeypatch.setattr(discover, "runner_for", lambda cfg: fake)
    return fake
