"""The web view's data: the GPUs and each pod's slice as ``hami top`` counts them, the
pending pod's reason as ``hami explain`` gives it, quotas used / hard, and the cut a
viewer restricted to some namespaces sees."""

from __future__ import annotations

from hami_core.explain.summary import summarize
from hami_core.options import UiOptions
from hami_core.simulate.runner import make_manager
from hami_core.ui.main import page_builder
from hami_core.ui.page import for_viewer, page_namespaces
from hami_core.ui.reading import from_file
from tests.defrag.world import MIB
from tests.ui.cluster import PENDING, SLICES, XSS, write_snapshot


def page(tmp_path):
    snap = write_snapshot(tmp_path / "snap.json")
    return page_builder(UiOptions(snapshot=str(snap)), make_manager(None))()


def test_every_gpu_and_slice_as_allocated(tmp_path):
    data = page(tmp_path)
    assert [n["name"] for n in data["nodes"]] == ["node-0", "node-1"]
    gpus = {g["uuid"]: g for n in data["nodes"] for g in n["gpus"]}
    assert len(gpus) == 4
    for ref, node, index, mib, cores in SLICES:
        g = gpus[f"GPU-{node}-{index}"]
        assert {
            "pod": ref,
            "namespace": ref.split("/")[0],
            "memoryMiB": mib,
            "cores": cores,
            "mig": [],
            "whole": False,
        } in g["slices"]
        assert g["memoryTotalMiB"] == MIB and g["coresTotal"] == 100
        assert g["modeShown"] == "shim"
    g0 = gpus["GPU-node-0-0"]
    assert g0["memoryAllocatedMiB"] == 40960 + 20480 and g0["coresAllocated"] == 75
    assert gpus["GPU-node-1-1"]["slices"] == []


def test_pending_reason_is_explains_and_quota_used_over_hard(tmp_path):
    data = page(tmp_path)
    (p,) = data["pending"]
    assert p["pod"] == PENDING
    # the same sentence hami explain prints for the pod
    read = from_file(tmp_path / "snap.json", make_manager(None))().read
    (again,) = summarize(read, make_manager(None), read.pending, ()).pending
    assert p["reason"] == again["reason"]
    assert p["reason"].startswith("fits on none of 2 node(s): CardInsufficientMemory on 4 GPU(s)")
    (team_a,) = [n for n in data["namespaces"] if n["name"] == "team-a"]
    assert team_a["pods"] == 2 and team_a["pending"] == 1
    assert team_a["quota"] == [
        {"quota": "gpu-quota", "key": "limits.nvidia.com/gpumem", "used": 61440, "hard": 200000}
    ]


def test_explain_and_the_page_give_one_reason(tmp_path):
    """``hami explain``'s answer for the pod holds the page's reason word for word."""
    from hami_core.explain import explain
    from hami_core.explain.sources import from_file as explain_file

    data = page(tmp_path)
    manager = make_manager(None)
    read, lookup = explain_file(tmp_path / "snap.json", manager)
    answer = explain(read, manager, PENDING, lookup=lookup)
    assert answer["reason"] == data["pending"][0]["reason"]


def test_a_viewer_sees_only_its_namespaces(tmp_path):
    data = page(tmp_path)
    assert page_namespaces(data) == {"team-a", "team-b"}
    cut = for_viewer(data, user="alice", namespaces={"team-b"})
    assert cut["viewer"] == {"user": "alice", "namespaces": ["team-b"]}
    assert cut["pending"] == [] and [n["name"] for n in cut["namespaces"]] == ["team-b"]
    shown = [s for n in cut["nodes"] for g in n["gpus"] for s in g["slices"]]
    named = sorted(s["pod"] for s in shown if s["pod"] is not None)
    assert named == sorted(["team-b/infer-0", "team-b/" + XSS])
    hidden = [s for s in shown if s["pod"] is None]
    # team-a's slices keep their sizes (the GPU's totals show them) but not their names
    assert sorted(s["memoryMiB"] for s in hidden) == [20480, 40960]
    assert all(s["namespace"] is None for s in hidden)
    assert "team-a" not in repr(cut)
    # the full page is left as it was
    assert any(
        s["pod"] == "team-a/train-0" for n in data["nodes"] for g in n["gpus"] for s in g["slices"]
    )


def test_live_usage_from_prometheus_and_its_absence_named(tmp_path):
    """With --prometheus the GPUs carry memory in use and utilization; a Prometheus that
    cannot be reached leaves the allocations shown and says why."""
    from tests.top.test_top import FakePrometheus

    snap = write_snapshot(tmp_path / "snap.json")
    prom = FakePrometheus(
        {
            "hami_host_gpu_memory_used_bytes": {"GPU-node-0-0": 50000 * 2**20},
            "hami_host_gpu_utilization_ratio": {"GPU-node-0-0": 61.0},
        }
    )
    try:
        data = page_builder(
            UiOptions(snapshot=str(snap), prometheus=prom.url), make_manager(None)
        )()
    finally:
        prom.http.shutdown()
    gpus = {g["uuid"]: g for n in data["nodes"] for g in n["gpus"]}
    assert gpus["GPU-node-0-0"]["memoryUsedMiB"] == 50000
    assert gpus["GPU-node-0-0"]["utilizationPct"] == 61
    assert gpus["GPU-node-1-0"]["memoryUsedMiB"] is None
    assert data["usage"] == {"source": "prometheus", "problem": None}
    down = page_builder(
        UiOptions(snapshot=str(snap), prometheus="http://127.0.0.1:9"), make_manager(None)
    )()
    assert down["usage"]["source"] is None and "Prometheus at" in down["usage"]["problem"]
    assert sum(len(g["slices"]) for n in down["nodes"] for g in n["gpus"]) == 4
