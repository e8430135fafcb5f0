"""Fixtures of the Ascend backend tests."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from hami_ascend import discover

from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config

from .support import FakeNpuSmi


def only(*names: str, config: dict[str, object] | None = None) -> BackendManager:
    """A manager with only the named installed backends (others' work is left out)."""
    installed = {ep.name for ep in entry_points(group="hami.backends")}
    base = BackendManager.from_entry_points(disabled=sorted(installed - set(names)))
    if config is None:
        return base
    return base.with_config(parse_config({"version": "v1", **config}, backends=base.infos))


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
