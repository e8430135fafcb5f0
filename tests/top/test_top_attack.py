"""The issue-24 attack run on ``hami top --prometheus``, against a real HTTP server:
values Prometheus itself writes for an empty or overflowing expression (``NaN``,
``+Inf``), values no GPU has (negative, 1e300), and an answer trickled a byte at a time.
``-o json`` must stay strict JSON (``NaN`` and ``Infinity`` are not JSON, RFC 8259 §6),
the table must not show ``nan``/``inf``, and the whole query must end within its
timeout (urllib's timeout is per socket read, so a trickle never reached it)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import HamiError
from hami_core.top.sources import usage_from_prometheus

UUIDS = ["GPU-4f1e9c02-5b1a-8d7e-2c44-0a9b3e6f1d21", "GPU-9d3a7b10-2e6c-41f5-b8a9-7c0d5e2f4a63"]


class Prometheus:
    """Answers every query with one sample per ``UUIDS`` of value ``value`` (the string
    Prometheus writes), or, when ``trickle``, a 2000-byte body a byte every 0.2 s."""

    def __init__(self, value: str = "1", *, trickle: bool = False) -> None:
        stop = self.stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if trickle:
                    self.send_response(200)
                    self.send_header("Content-Length", "2000")
                    self.end_headers()
                    for _ in range(2000):
                        if stop.is_set():
                            return
                        try:
                            self.wfile.write(b" ")
                            self.wfile.flush()
                        except OSError:
                            return
                        time.sleep(0.2)
                    return
                result = [{"metric": {"device_uuid": u}, "value": [0, value]} for u in UUIDS]
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": result}}
                ).encode()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"

    def close(self) -> None:
        self.stop.set()
        self.http.shutdown()


@pytest.fixture
def prometheus(request: pytest.FixtureRequest) -> Iterator[Prometheus]:
    prom = Prometheus(**request.param)
    yield prom
    prom.close()


def _strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "prometheus",
    [{"value": v} for v in ("NaN", "+Inf", "-Inf", "1e400", "-1e300", "-5")],
    indirect=True,
    ids=["NaN", "+Inf", "-Inf", "1e400", "-1e300", "-5"],
)
def test_values_no_gpu_has_are_left_out_and_json_stays_json(prometheus):
    use = usage_from_prometheus(prometheus.url, timeout_s=10)
    assert use == {}, use  # no figure rather than a figure no GPU can have
    result = CliRunner().invoke(
        cli, ["top", "--example", "--prometheus", prometheus.url, "-o", "json"]
    )
    assert result.exit_code == 0, result.output[:300]
    _strict(result.output)
    table = CliRunner().invoke(cli, ["top", "--example", "--prometheus", prometheus.url])
    assert table.exit_code == 0
    for word in ("nan", "inf"):
        assert word not in table.output.lower(), table.output


@pytest.mark.timeout(60)
@pytest.mark.parametrize("prometheus", [{"trickle": True}], indirect=True, ids=["trickle"])
def test_a_trickled_answer_ends_at_the_timeout(prometheus):
    started = time.monotonic()
    with pytest.raises(HamiError) as caught:
        usage_from_prometheus(prometheus.url, timeout_s=2)
    took = time.monotonic() - started
    assert took < 2 + 2 + 2, f"took {took:.1f}s"  # the deadline, one read's timeout, slack
    assert str(caught.value).startswith(f"Prometheus at {prometheus.url}")
    assert "2" in str(caught.value)


@pytest.mark.parametrize("url", ["notaurl", "file:///etc/passwd", "ftp://x"])
def test_a_prometheus_url_that_is_not_http_is_named_not_a_traceback(tmp_path, url):
    """``--prometheus notaurl`` ended hami top in urllib's ValueError traceback, and a
    file:// URL was opened as a local path; each is n/a with the reason, as a
    --monitor URL of the same kind is."""
    from pathlib import Path

    snapshot = Path(__file__).parents[2] / "examples" / "snapshot-pending.yaml"
    result = CliRunner().invoke(
        cli, ["top", "--snapshot", str(snapshot), "-o", "wide", "--prometheus", url]
    )
    assert result.exit_code == 0, result.output
    assert "not an http:// or https:// URL" in result.output
    with pytest.raises(HamiError, match="not an http:// or https:// URL"):
        usage_from_prometheus(url)
