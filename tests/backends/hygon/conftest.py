"""Fixtures of the Hygon backend tests."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
from hami_hygon import discover

from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config

from .support import FakeHySmi


def only(*names: str, config: dict[str, object] | None = None) -> BackendManager:
    """A manager with only the named installed backends (others' work is left out)."""
    installed = {ep.name for ep in entry_points(group="hami.backends")}
    base = BackendManager.from_entry_points(disabled=sorted(installed - set(names)))
    if config is None:
        return base
    return base.with_config(parse_config({"version": "v1", **config}, backends=base.infos))


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
