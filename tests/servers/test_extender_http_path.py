"""The extender's HTTP path as kube-scheduler uses it (docs/performance.md, issue 26):
kube-scheduler 1.20 waits for ``/filter`` and ``/prioritize`` one pod at a time, so what
the server adds per request is paid per pod."""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_core.errors import ConfigError
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers import scheduler_main
from hami_core.servers.extender import create_extender_app
from hami_core.servers.options import SchedulerOptions
from tests.builders import cluster, container, gpu, manager, node, pod

FIXTURES = Path(__file__).parent.parent / "fixtures" / "extender"


@pytest.fixture
def default_switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_hami_scheduler_shortens_the_gil_switch_interval(default_switch_interval: None):
    """A request thread back from a socket call waits for the GIL at most the switch
    interval per call while a watch thread is busy; ``hami scheduler`` sets it before
    anything else can fail (here: no signing key)."""
    with pytest.raises(ConfigError):
        scheduler_main.run_scheduler(SchedulerOptions(leader_elect=False))
    assert sys.getswitchinterval() == pytest.approx(scheduler_main.SWITCH_INTERVAL_S)
    assert scheduler_main.SWITCH_INTERVAL_S <= 0.001


def test_kube_scheduler_reuses_one_connection_for_every_request(monkeypatch: pytest.MonkeyPatch):
    """Go's ``http.Transport`` (kube-scheduler's extender client) reuses a connection only
    when the server keeps it alive and the body it decodes ends where ``Content-Length``
    says (it sees EOF with the last byte); a new TCP connection per request would add a
    handshake and an accept to every filter and prioritize. The server ``hami scheduler``
    runs (plain HTTP on loopback) keeps one connection for filter, prioritize and bind."""
    c = cluster(node("n1", [gpu("GPU-1")]), node("n2", [gpu("GPU-2")]))
    p = c.add_pod(pod("p", container(gpu=1)))
    app = create_extender_app(Scheduler(c, manager()), is_leader=lambda: False)
    accepted = []
    real_accept = socket.socket.accept

    def counting_accept(self: socket.socket) -> tuple[socket.socket, object]:
        got = real_accept(self)
        accepted.append(got)
        return got

    monkeypatch.setattr(socket.socket, "accept", counting_accept)
    server = scheduler_main.extender_server(app, SchedulerOptions(bind_address="127.0.0.1", port=0))
    port = server.effective_port
    threading.Thread(target=server.run, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        bodies = []
        for verb in ("filter", "prioritize", "bind"):
            args = json.loads((FIXTURES / f"{verb}-request.json").read_text())
            if verb != "bind":
                args["Pod"], args["NodeNames"] = p, ["n1", "n2"]
            bodies.append((f"/{verb}", json.dumps(args)))
        first = None
        for path, body in bodies * 2:
            conn.request("POST", path, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            assert resp.status == 200, data
            assert resp.getheader("Content-Length") == str(len(data)), path
            assert not resp.will_close, f"{path}: the server closes the connection"
            first = first or conn.sock
            assert conn.sock is first, f"{path}: a new connection was opened"
        conn.close()
    finally:
        server.close()
    assert len(accepted) == 1


def test_build_scheduler_carries_every_setting_of_hami_scheduler():
    """``build_scheduler`` is the one place ``hami scheduler`` and the benches that
    measure it turn options into a ``Scheduler``; a bad policy is refused naming it."""
    opts = SchedulerOptions(
        node_policy="spread",
        gpu_policy="binpack",
        bind_lock_wait_s=1.5,
        success_events=True,
        node_label_selector={"gpu": "on"},
        gang_timeout_s=42.0,
    )
    store = cluster()
    built = scheduler_main.build_scheduler(opts, store, manager(), store)
    assert built.binder.lock_wait_s == 1.5
    assert built.binder.success_events and built.success_events
    assert built.node_selector == {"gpu": "on"}
    assert built.gangs.timeout_s == 42.0
    assert "spread" in str(built._node_policy).lower()
