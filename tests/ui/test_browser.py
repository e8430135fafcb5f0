"""The web view in headless Chromium (Debian's package), as a person sees it: the DOM
the page's script drew, not the HTML source. The GPUs, each bar's segments sized as the
allocations, the pending pod's reason, markup in a tenant's pod name shown as text and
never run, a phone-width screen without sideways scrolling, the token asked for when
the server wants one, and nothing fetched from anywhere but the server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from hami_core.options import UiOptions
from hami_core.servers.keepalive import KeepAliveServer
from hami_core.simulate.runner import make_manager
from hami_core.ui.access import Gate
from hami_core.ui.app import make_app
from hami_core.ui.main import page_builder
from hami_core.ui.reading import PageCache
from tests.browser import Browser, chromium_path
from tests.defrag.world import MIB, pending
from tests.ui.cluster import PENDING, SLICES, XSS, write_snapshot
from tests.ui.test_app import FakeReviews

pytestmark = pytest.mark.skipif(
    chromium_path() is None,
    reason="chromium is not installed (scripts/chromium-install.sh; make install runs it)",
)


@contextmanager
def serve(
    tmp_path, *, require_token: bool = False, extra: list[dict[str, Any]] | None = None
) -> Iterator[str]:
    snap = write_snapshot(tmp_path / "snap.json", extra=extra)
    build = page_builder(UiOptions(snapshot=str(snap), refresh=1.0), make_manager(None))
    gate = Gate(require_token=require_token, reviews=FakeReviews())
    cache = PageCache(build, refresh_s=1.0)
    server = KeepAliveServer(make_app(cache.get, gate), host="127.0.0.1", port=0)
    threading.Thread(target=server.run, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.close()
        cache.close()  # its reader thread would read on beside later tests


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
        # shown as the characters it is (textContent: off-screen cards are skipped by
        # content-visibility, and innerText leaves out what is not rendered)
        legend = browser.eval("document.querySelector('#nodes').textContent")
        assert XSS in legend
        assert not any("/x" in u for u in browser.requested_urls())


def test_a_refused_pod_is_drawn_apart_with_why_its_name_as_text(tmp_path, browser):
    """A snapshot's Pod no API server could have stored is neither pending nor on a GPU:
    it is listed as refused, with the reason, its name (markup) shown as text."""
    bad = pending(XSS, namespace="team-b")
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "lots"
    with serve(tmp_path, extra=[bad]) as url:
        browser.open(url + "/")
        browser.wait("document.body.dataset.painted")
        tables = browser.eval(
            "[...document.querySelectorAll('#pending table')].map(t => t.textContent)"
        )
        assert len(tables) == 2 and XSS not in tables[0], tables
        assert f"team-b/{XSS}" in tables[1] and "quantities must match" in tables[1]
        assert browser.eval("window.__xss === undefined")
        assert browser.eval("document.querySelectorAll('#view img').length") == 0


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
        text = browser.eval("document.getElementById('view').textContent")
        assert "as bob" in text and "team-a" not in text and "(another namespace)" in text
        browser.eval("sessionStorage.clear(); true")


def test_each_gpus_mode_and_mig_instances_as_drawn(browser):
    """The modes example after its workloads ran (a MIG, an MPS and a shim node): each
    GPU names its mode, a MIG GPU the instances held, and each MIG slice its profile."""
    from hami_core.defrag.sources import DefragInput
    from hami_core.simulate.runner import bundled_examples, run_files
    from hami_core.ui.page import build_page

    examples = bundled_examples()
    sim = run_files(
        cluster_path=examples / "cluster-modes.yaml",
        workload_paths=[examples / "workloads-modes"],
    )
    page = build_page(DefragInput(cluster=sim.pipeline.cluster), sim.manager)
    gate = Gate(require_token=False, reviews=None)
    server = KeepAliveServer(make_app(lambda: page, gate), host="127.0.0.1", port=0)
    threading.Thread(target=server.run, daemon=True).start()
    try:
        browser.open(f"http://127.0.0.1:{server.port}/")
        browser.wait("document.body.dataset.painted")
        modes = browser.eval(
            """Object.fromEntries([...document.querySelectorAll('.node')].map(n =>
               [n.dataset.node, [...n.querySelectorAll('.gpu .mode')].map(m => m.textContent)]))"""
        )
        legends = browser.eval(
            """Object.fromEntries([...document.querySelectorAll('.node')].map(n =>
               [n.dataset.node, n.querySelector('.legend') ? n.querySelector('.legend').textContent : '']))"""
        )
    finally:
        server.close()
    mig = next(g for n in page["nodes"] if n["name"] == "mig-node" for g in n["gpus"])
    assert mig["migInstances"], "the modes example places MIG pods"
    assert mig["modeShown"] in modes["mig-node"] and mig["modeShown"].startswith("mig ")
    for profile in set(mig["migInstances"]):
        assert f"mig {profile}" in legends["mig-node"]
    assert set(modes["mps-node"]) == {"mps"} and set(modes["shim-node"]) == {"shim"}


def test_live_usage_drawn_under_the_allocations(tmp_path, browser):
    from tests.top.test_top import FakePrometheus

    snap = write_snapshot(tmp_path / "snap.json")
    prom = FakePrometheus(
        {
            "hami_host_gpu_memory_used_bytes": {"GPU-node-0-0": (MIB // 4) * 2**20},
            "hami_host_gpu_utilization_ratio": {"GPU-node-0-0": 40.0},
        }
    )
    try:
        page = page_builder(
            UiOptions(snapshot=str(snap), prometheus=prom.url), make_manager(None)
        )()
    finally:
        prom.http.shutdown()
    server = KeepAliveServer(
        make_app(lambda: page, Gate(require_token=False, reviews=None)), host="127.0.0.1", port=0
    )
    threading.Thread(target=server.run, daemon=True).start()
    try:
        browser.open(f"http://127.0.0.1:{server.port}/")
        browser.wait("document.body.dataset.painted")
        used = browser.eval(
            """[...document.querySelectorAll('.gpu')].filter(g => g.querySelector('.used'))
               .map(g => [g.dataset.uuid, [...g.querySelectorAll('.bar')].map(b =>
                 b.querySelector('.used').getBoundingClientRect().width / b.getBoundingClientRect().width)])"""
        )
        head = browser.eval(
            "document.querySelector('.gpu[data-uuid=\"GPU-node-0-0\"] .meta').textContent"
        )
    finally:
        server.close()
    assert [u for u, _ in used] == ["GPU-node-0-0"]
    memory, compute = used[0][1]
    assert memory == pytest.approx(0.25, abs=0.01) and compute == pytest.approx(0.40, abs=0.01)
    assert "in use 20.0 GiB, 40%" in head
