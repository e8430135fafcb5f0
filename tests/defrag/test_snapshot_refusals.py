"""A snapshot's Pod the loader refuses (one no API server could have stored: here a
``gpucores`` that is no quantity) is refused everywhere, with its reason, and nothing is
decided on it: ``hami defrag`` planned for it and ``hami explain`` explained it as
Pending (both re-read the file's Pod objects past the loader), and the web view listed
it among the pending pods; now each shows it as refused, with the reason. One reading (``defrag.sources.from_file``, over
``simulate.loader``) serves all three."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.defrag.sources import from_file
from hami_core.explain import sources as explain_sources
from hami_core.simulate.loader import load_cluster
from hami_core.simulate.runner import make_manager
from hami_core.ui.page import build_page, for_viewer, page_namespaces
from hami_core.ui.reading import from_file as ui_from_file
from tests.defrag.world import MIB, gpu_node, owner, pending, running

QUANTITY = "quantities must match the regular expression"


def _bad_cores(pod: dict[str, Any]) -> dict[str, Any]:
    for part in ("limits", "requests"):
        pod["spec"]["containers"][0]["resources"][part]["nvidia.com/gpucores"] = "lots"
    return pod


def snapshot(tmp_path: Path) -> str:
    """node-0's two GPUs half held by movable pods; ``good`` fits after one move. A
    tenant's ``bad`` asks the same but with a gpucores no API server stores, and its
    ``squatter`` runs on node-0 GPU 1 with the same flaw."""
    items: list[dict[str, Any]] = [gpu_node("node-0")]
    items += [
        running(f"h-{g}", "node-0", (g,), mem=MIB // 2, cores=50, owned_by=owner())
        for g in range(2)
    ]
    items.append(pending("good", mem=MIB // 2 + 100, cores=60))
    items.append(_bad_cores(pending("bad", mem=MIB // 2 + 100, cores=60, namespace="t")))
    squatter = running("squatter", "node-0", (1,), mem=1, cores=0, namespace="t")
    items.append(_bad_cores(squatter))
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def test_the_loader_names_each_refused_pod_and_keeps_it_out_of_every_list(tmp_path):
    loaded = load_cluster(snapshot(tmp_path), make_manager(None))
    assert set(loaded.refused_pods) == {"t/bad", "t/squatter"}
    assert all(QUANTITY in why for why in loaded.refused_pods.values())
    names = {p["metadata"]["name"] for p in (*loaded.pods, *loaded.unbound_pods)}
    assert names == {"h-0", "h-1", "good"}
    assert sum("Pod skipped (t/bad)" in w for w in loaded.warnings) == 1


def test_the_shared_reading_never_holds_a_refused_pod(tmp_path):
    read = from_file(snapshot(tmp_path), make_manager(None))
    assert [p["metadata"]["name"] for p in read.pending] == ["good"]
    assert set(read.refused) == {"t/bad", "t/squatter"}
    assert {p["metadata"]["name"] for p in read.cluster.list_pods()} == {"h-0", "h-1"}


def test_defrag_plans_only_for_accepted_pods_and_lists_the_refused(tmp_path):
    result = CliRunner().invoke(cli, ["defrag", "--snapshot", snapshot(tmp_path), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [p["pod"] for p in data["pending"]] == ["default/good"]
    assert data["summary"]["pending"] == 1
    assert {r["pod"] for r in data["refused"]} == {"t/bad", "t/squatter"}
    assert all(QUANTITY in r["reason"] for r in data["refused"])
    moved = {m["pod"] for m in data["moves"]} | {m["for"] for m in data["moves"]}
    assert not moved & {"t/bad", "t/squatter"}


def test_defrag_text_says_which_pod_was_refused_and_why(tmp_path):
    result = CliRunner().invoke(cli, ["defrag", "--snapshot", snapshot(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "1 pending pod(s)" in result.output
    assert "Pod skipped (t/bad): " in result.output and QUANTITY in result.output
    assert "pod t/bad" not in result.output  # no outcome of a plan for it


def test_defrag_pod_of_a_refused_pod_says_it_was_refused(tmp_path):
    result = CliRunner().invoke(cli, ["defrag", "--snapshot", snapshot(tmp_path), "--pod", "t/bad"])
    assert result.exit_code == 1
    assert "--pod t/bad: the snapshot's Pod was refused" in result.output
    assert QUANTITY in result.output


def test_explain_answers_refused_with_the_reason_pending_or_bound(tmp_path):
    snap = snapshot(tmp_path)
    for ref in ("t/bad", "t/squatter"):
        result = CliRunner().invoke(cli, ["explain", ref, "--snapshot", snap, "-o", "json"])
        assert result.exit_code == 1, result.output
        data = json.loads(result.output[result.output.index("{") :])
        assert data["status"] == "refused" and QUANTITY in data["reason"], data
        assert set(data) == {"schema", "namespace", "name", "status", "reason"}
    text = CliRunner().invoke(cli, ["explain", "t/bad", "--snapshot", snap]).output
    assert "Pod t/bad: refused" in text and "nothing is decided on it" in text
    _, lookup = explain_sources.from_file(snap, make_manager(None))
    assert lookup("t", "bad") is None and lookup("default", "good") is not None


def test_the_web_view_shows_refused_pods_apart_with_why_and_logs_them(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="hami_core.ui.reading")
    manager = make_manager(None)
    reading = ui_from_file(snapshot(tmp_path), manager)()
    assert [p["metadata"]["name"] for p in reading.read.pending] == ["good"]
    logged = [r.getMessage() for r in caplog.records]
    assert any("Pod skipped (t/bad)" in m and QUANTITY in m for m in logged), logged
    page = build_page(reading.read, manager)
    assert [p["pod"] for p in page["pending"]] == ["default/good"]
    assert [(p["pod"], p["namespace"]) for p in page["refused"]] == [
        ("t/bad", "t"),
        ("t/squatter", "t"),
    ]
    assert all(QUANTITY in p["reason"] for p in page["refused"])
    assert "t" in page_namespaces(page)
    # a viewer of another namespace sees none of the tenant's refused pods
    assert for_viewer(page, user="u", namespaces=["default"])["refused"] == []
    assert len(for_viewer(page, user="u", namespaces=["t"])["refused"]) == 2
