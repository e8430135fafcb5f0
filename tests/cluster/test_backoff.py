"""An unreachable API server: exponential backoff with jitter, one log line per change
of state (issue #12 item 12; before: a fixed 1 s retry and one warning per attempt)."""

import itertools
import logging
import time

import urllib3

import hami_core.cluster.kube as kube
from hami_core.cluster.backoff import Backoff


def test_delays_grow_exponentially_with_jitter_up_to_the_cap():
    seen = []
    b = Backoff(
        "x",
        logging.getLogger("t"),
        base_s=1.0,
        max_s=8.0,
        rand=lambda a, z: seen.append((a, z)) or z,
    )
    delays = [b.failed(OSError("down")) for _ in range(6)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert seen[2] == (2.0, 4.0)  # jitter: anywhere in the upper half
    real = Backoff("x", logging.getLogger("t"), base_s=1.0)
    assert len({round(real.failed(OSError()), 6) for _ in range(5)}) == 5


def test_one_warning_when_failing_starts_and_one_info_when_it_recovers(caplog):
    b = Backoff("pods watch", logging.getLogger("hami.test"))
    with caplog.at_level(logging.DEBUG, logger="hami.test"):
        for _ in range(50):
            b.failed(OSError("connection refused"))
        b.succeeded()
        b.succeeded()
    levels = [
        (r.levelname, r.getMessage().split(" (")[0])
        for r in caplog.records
        if r.levelno >= logging.INFO
    ]
    assert levels == [
        ("WARNING", "pods watch failing"),
        ("INFO", "pods watch recovered after 50 failed attempts"),
    ]


def test_an_informer_against_a_dead_api_server_backs_off_and_logs_once(caplog, monkeypatch):
    monkeypatch.setattr(kube, "RETRY_DELAY_S", 0.05)
    calls = []

    def unreachable(*a, **k):
        calls.append(time.monotonic())
        raise urllib3.exceptions.MaxRetryError(None, "/api/v1/pods", "connection refused")

    inf = kube.Informer("pods", unreachable)
    with caplog.at_level(logging.INFO, logger="hami_core.cluster.kube"):
        inf.start()
        time.sleep(2.0)
        inf.stop()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "pods watch failing" in warnings[0].getMessage()
    # A fixed 0.05 s retry would have made ~40 attempts; the backoff doubles each time.
    assert 4 <= len(calls) <= 8
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[-1] > gaps[0] * 3


def test_every_api_call_carries_a_timeout(monkeypatch):
    seen = {}

    def fn(*a, **k):
        seen.update(k)
        raise urllib3.exceptions.ReadTimeoutError(None, "/api", "read timed out")

    monkeypatch.setattr(kube, "_REQUEST_TIMEOUT", kube._REQUEST_TIMEOUT)
    kube.set_request_timeout(3.0)
    try:
        kube.call("get pod x", fn)
    except kube.ApiUnavailableError as exc:
        assert "unreachable" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("a timed-out call must raise ApiUnavailableError")
    assert seen["_request_timeout"] == (3.0, 3.0)
