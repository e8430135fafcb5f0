"""``hami top``: the GPU mode of every device (shim, MPS, MIG with the instances held),
``-o wide`` that shows more than the default table (issue 24, item 9), and names or
answers written to hurt a terminal or the reader (item 18)."""

from __future__ import annotations

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.errors import HamiError
from hami_core.simulate.runner import bundled_examples, run_files
from hami_core.top import build_view, render_table, usage_from_prometheus
from tests.builders import container, gpu, node, pipeline, pod

EXAMPLES = bundled_examples()


@pytest.fixture(scope="module")
def modes_view():
    """The modes example (one MIG, one MPS, one shim node) after its workloads ran."""
    sim = run_files(
        cluster_path=EXAMPLES / "cluster-modes.yaml",
        workload_paths=[EXAMPLES / "workloads-modes"],
    )
    return build_view(sim.pipeline.cluster, sim.manager)


def _row(view, node_name):
    return next(d for d in view.devices if d.node == node_name)


def test_every_device_shows_its_mode_and_a_mig_gpu_the_instances_held(modes_view):
    mig = _row(modes_view, "mig-node")
    assert mig.mode == "mig" and mig.mig_instances, "the modes example places MIG pods"
    assert mig.mode_shown.startswith("mig ")
    for profile in set(mig.mig_instances):
        assert profile in mig.mode_shown
    assert _row(modes_view, "mps-node").mode_shown == "mps"
    assert _row(modes_view, "shim-node").mode_shown == "shim"
    table = render_table(modes_view).splitlines()
    assert table[0].split()[:4] == ["NODE", "GPU", "TYPE", "MODE"]
    devices = table[1 : table.index("")]
    by_node = {line.split()[0]: line for line in devices}
    assert " mps " in by_node["mps-node"] and " shim " in by_node["shim-node"]
    assert mig.mode_shown in by_node["mig-node"]


def test_json_carries_the_mode_the_instances_and_each_slice(modes_view):
    devices = json.loads(json.dumps(modes_view.as_json()))["devices"]
    mig = next(d for d in devices if d["node"] == "mig-node")
    assert mig["mode"] == "mig" and mig["mig_instances"]
    assert sorted(p for s in mig["slices"] for p in s["mig_profiles"]) == sorted(
        mig["mig_instances"]
    )
    shim = next(d for d in devices if d["node"] == "shim-node")
    assert sum(s["memory_mib"] for s in shim["slices"]) == shim["memory_allocated_mib"]
    assert [s["pod"] for s in shim["slices"]] == shim["pods"]


def test_wide_shows_uuids_free_memory_and_every_slice(modes_view):
    narrow = render_table(modes_view)
    wide = render_table(modes_view, wide=True)
    assert narrow != wide
    header = wide.splitlines()[0].split()
    assert "UUID" in header and "FREE" in header
    for d in modes_view.devices:
        assert d.uuid in wide and d.uuid not in narrow
        for s in d.slices:
            assert s.show(d.unit) in wide
    shim = _row(modes_view, "shim-node")
    first = shim.slices[0]
    assert f"{first.pod}({first.memory_mib}MiB," in wide


def test_wide_lists_every_pod_where_the_table_counts_them():
    # three sharers: the table names two and counts the rest, wide names all three
    p = pipeline(node("n1", [gpu("GPU-1", memory_mib=30000)]))
    for i in range(3):
        assert p.submit(pod(f"p{i}", container(gpu=1, gpumem=1000))).node == "n1"
    view = build_view(p.cluster, p.manager)
    assert "+1" in render_table(view)
    wide = render_table(view, wide=True)
    assert all(f"default/p{i}(1000MiB,0%)" in wide for i in range(3))


def test_names_with_terminal_escapes_reach_the_terminal_escaped(tmp_path):
    hostile = "evil\x1b]0;pwned\x07\x1b[2J\u202etxt.exe"
    snap = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [node(hostile, [gpu("GPU-\x1b[31m1", model=hostile)])],
    }
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump(snap))
    for output in ("table", "wide"):
        result = CliRunner().invoke(cli, ["top", "--snapshot", str(path), "-o", output])
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\x07" not in result.output
        assert "\u202e" not in result.output
        assert "evil\\x1b]0;pwned\\x07" in result.output
    # JSON keeps the names exact, escaped as JSON does
    result = CliRunner().invoke(cli, ["top", "--snapshot", str(path), "-o", "json"])
    assert result.exit_code == 0 and "\x1b" not in result.output
    assert json.loads(result.output)["devices"][0]["model"] == hostile


class HostilePrometheus:
    """Answers every query with ``body`` (bytes, or a callable writing to the socket)."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(status)
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"


HOSTILE_ANSWERS = {
    "deep JSON": b"[" * 200_000 + b"]" * 200_000,
    "huge int": b'{"status": "success", "data": {"result": [{"metric": {}, "value": [0, '
    + b"9" * 5000
    + b"]}]}}",
    "not JSON": b"<html>\x1b[2J</html>",
    "wrong shape": b'{"status": "success", "data": {"result": [{"metric": 5}]}}',
    "result not a list": b'{"status": "success", "data": {"result": 7}}',
    "bad value": b'{"status": "success", "data": {"result": [{"metric": {"device_uuid":'
    b' "G"}, "value": [0, "x"]}]}}',
    "escape in error": json.dumps(
        {"status": "error", "error": "bad\x1b]0;owned\x07" + "y" * 100_000}
    ).encode(),
    "not UTF-8": b'{"status": "\xff"}',
    "a list": b"[1, 2]",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(HOSTILE_ANSWERS))
def test_a_hostile_prometheus_answer_is_one_short_error(case):
    prom = HostilePrometheus(HOSTILE_ANSWERS[case])
    try:
        with pytest.raises(HamiError) as caught:
            usage_from_prometheus(prom.url, timeout_s=10)
        result = CliRunner().invoke(cli, ["top", "--example", "--prometheus", prom.url])
    finally:
        prom.http.shutdown()
    message = str(caught.value)
    assert message.startswith(f"Prometheus at {prom.url}")
    assert len(message) < 500 and "\x1b" not in message and "\x07" not in message
    # the view is shown, the figures n/a with the one short reason
    assert result.exit_code == 0 and "Traceback" not in result.output
    (note,) = [line for line in result.output.splitlines() if line.startswith("usage: ")]
    assert note.startswith(f"usage: n/a from Prometheus at {prom.url}")
    assert "\x1b" not in result.output and len(note) < 600


@pytest.mark.timeout(60)
def test_an_endless_prometheus_answer_is_read_up_to_the_bound(monkeypatch):
    from hami_core.top import sources

    monkeypatch.setattr(sources, "ANSWER_LIMIT_BYTES", 1 << 20)
    prom = HostilePrometheus(b" " * (4 << 20))
    try:
        with pytest.raises(HamiError, match="larger than 1048576 bytes"):
            usage_from_prometheus(prom.url, timeout_s=10)
    finally:
        prom.http.shutdown()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,
        b"x: " + b"9" * 5000 + b"\n",
        b"\xff\xfe",
    ],
)
def test_a_hostile_snapshot_is_one_short_error(tmp_path: Path, body: bytes):
    path = tmp_path / "snap.yaml"
    path.write_bytes(body)
    result = CliRunner().invoke(cli, ["top", "--snapshot", str(path)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {path}") and "Traceback" not in result.output
    assert len(result.output) < 400
