"""``explain.oneshot.paused_collector``: the collector paused inside, restored after."""

from __future__ import annotations

import gc

import pytest

from hami_core.explain.oneshot import paused_collector


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_inside_and_enabled_after(collector_enabled):
    with paused_collector():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_enabled_again_after_an_error(collector_enabled):
    with pytest.raises(RuntimeError), paused_collector():
        raise RuntimeError("the answer failed")
    assert gc.isenabled()


def test_a_collector_paused_before_stays_paused(collector_enabled):
    gc.disable()
    with paused_collector():
        assert not gc.isenabled()
    assert not gc.isenabled()
    gc.enable()
