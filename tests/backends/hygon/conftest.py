"""Fixtures of the Hygon backend tests."""

from __future__ import annotations

from collections.abc import Iterator
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
def hy_smi() -> Iterator[FakeHySmi]:
    """The hooks' ``hy-smi`` replaced by a fake answering from the K100_AI samples; the
    DCU table is emptied before and after."""
    fake = FakeHySmi("k100")
    saved = discover.RUNNER[0]
    discover.RUNNER[0] = fake
    discover.DCUS.replace({})
    yield fake
    discover.RUNNER[0] = saved
    discover.DCUS.replace({})


@pytest.fixture
def no_hy_smi() -> Iterator[FakeHySmi]:
    """The hooks' ``hy-smi`` replaced by one that is not installed."""
    fake = FakeHySmi(None)
    saved = discover.RUNNER[0]
    discover.RUNNER[0] = fake
    discover.DCUS.replace({})
    yield fake
    discover.RUNNER[0] = saved
    discover.DCUS.replace({})
