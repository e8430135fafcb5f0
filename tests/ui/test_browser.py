"""The web view in headless Chromium (Debian's package), as a person sees it: the DOM
the page's script drew, not the HTML source. The GPUs, each bar's segments sized as the
allocations, the pending pod's reason, markup in a tenant's pod name shown as text and
never run, a phone-width screen without sideways scrolling, the token asked for when
the server wants one, and nothing fetched from anywhere but the server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from hami_core.options import UiOptions
from hami_core.servers.keepalive import KeepAliveServer
from hami_core.simulate.runner import make_manager
from hami_core.ui.access import Gate
from hami_core.ui.app import make_app
from hami_core.ui.main import page_builder
from hami_core.ui.reading import PageCache
from tests.browser import Browser, chromium_path
from tests.defrag.world import MIB
from tests.ui.cluster import PENDING, SLICES, XSS, write_snapshot
from tests.ui.test_app import FakeReviews

pytestmark = pytest.mark.skipif(
    chromium_path() is None,
    reason="chromium is not installed (scripts/chromium-install.sh; make install runs it)",
)


@contextmanager
def serve(tmp_path, *, require_token: bool = False) -> Iterator[str]:
    snap = write_snapshot(tmp_path / "snap.json")
    build = page_builder(UiOptions(snapshot=str(snap), refresh=1.0), make_manager(None))
    gate = Gate(require_token=require_token, reviews=FakeReviews())
    server = KeepAliveServer(
        make_app(PageCache(build, refresh_s=1.0).get, gate), host="127.0.0.1", port=0
    )
    threading.Thread(target=server.run, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser() as b:
        yield b


#: Each memory / compute segment as drawn: pod, GPU, amount, its width over the bar's.
SEGMENTS = """[...document.querySelectorAll('.gpu')].flatMap(g =>
  [...g.querySelectorAll('.bar')].flatMap(b => [...b.querySelectorAll('.seg')].map(s => ({
    gpu: g.dataset.uuid, kind: b.dataset.kind, pod: s.dataset.pod,
    amount: Number(s.dataset.amount),
    share: s.getBoundingClientRect().width / b.getBoundingClientRect().width}))))"""


def test_gpus_bars_and_pending_reason_as_drawn(tmp_path, browser):
    with serve(tmp_path) as url:
        browser.open(url + "/")
        browser.wait("document.body.dataset.painted")
        assert browser.eval("document.querySelectorAll('.node').length") == 2
        gpus = browser.eval("[...document.querySelectorAll('.gpu')].map(g => g.dataset.uuid)")
        assert sorted(gpus) == [f"GPU-node-{n}-{i}" for n in (0, 1) for i in (0, 1)]
        segments = browser.eval(SEGMENTS)
        for pod, node, index, mib, cores in SLICES:
            mine = {
                s["kind"]: s
                for s in segments
                if s["pod"] == pod and s["gpu"] == f"GPU-{node}-{index}"
            }
            assert mine["memory"]["amount"] == mib
            assert mine["memory"]["share"] == pytest.approx(mib / MIB, abs=0.01)
            assert mine["compute"]["share"] == pytest.approx(cores / 100, abs=0.01)
        assert len(segments) == 2 * len(SLICES)
        pending = browser.eval("document.querySelector('#pending table').innerText")
        assert PENDING in pending and "CardInsufficientMemory on 4 GPU(s)" in pending
        quota = browser.eval("document.querySelector('#namespaces').innerText")
        assert "limits.nvidia.com/gpumem 61440 / 200000" in quota
        assert all(u.startswith(url + "/") for u in browser.requested_urls())


def test_markup_in_a_pod_name_is_text_and_never_runs(tmp_path, browser):
    with serve(tmp_path) as url:
        browser.open(url + "/")
        browser.wait("document.body.dataset.painted")
        browser.wait("Number(document.body.dataset.rendered) >= 2", timeout_s=10)  # a refresh
        assert browser.eval("window.__xss === undefined")
        assert browser.eval("document.querySelectorAll('#view img').length") == 0
        legend = browser.eval("document.querySelector('#nodes').innerText")
        assert XSS in legend  # shown as the characters it is
        assert not any("/x" in u for u in browser.requested_urls())


def test_readable_on_a_phone(tmp_path, browser):
    try:
        browser.resize(375, 800, mobile=True)
        with serve(tmp_path) as url:
            browser.open(url + "/")
            browser.wait("document.body.dataset.painted")
            width = browser.eval("document.scrollingElement.scrollWidth")
            assert width <= 375, "the page scrolls sideways at phone width"
            # every GPU's bars are drawn and at least half the screen wide
            bars = browser.eval(
                "[...document.querySelectorAll('.bar')].map(b => b.getBoundingClientRect().width)"
            )
            assert len(bars) == 8 and min(bars) >= 375 / 2
    finally:
        browser.resize(1280, 900)


def test_token_asked_for_then_used(tmp_path, browser):
    with serve(tmp_path, require_token=True) as url:
        browser.open(url + "/")
        browser.wait("!document.getElementById('login').hidden")
        assert browser.eval("document.querySelectorAll('.gpu').length") == 0
        browser.eval(
            "document.getElementById('token').value = 'b-token';"
            "document.querySelector('#login button').click(); true"
        )
        browser.wait("document.body.dataset.painted")
        assert browser.eval("document.getElementById('login').hidden")
        text = browser.eval("document.getElementById('view').innerText")
        assert "as bob" in text and "team-a" not in text and "(another namespace)" in text
        browser.eval("sessionStorage.clear(); true")
