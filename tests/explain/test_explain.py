"""``hami explain NAMESPACE/POD --snapshot``: a Pending pod's reasons (per node and GPU,
quota, largest that fits, node lock, preemption, consolidation), a bound pod's slices,
another scheduler's pod, a missing one, the exit codes, JSON and YAML, and a tenant's
pod name holding terminal escapes."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from hami_core.cli import cli
from hami_core.protocol.annotations import NODE_LOCK
from tests.defrag.world import MIB, gpu_id, gpu_node, owner, pending, running


def snapshot(tmp_path: Path, *extra: dict[str, Any], nodes: int = 2) -> str:
    """Two nodes of two 80 GiB GPUs, each GPU half used (40 GiB, 50%) by a movable pod."""
    items: list[dict[str, Any]] = [gpu_node(f"node-{n}") for n in range(nodes)]
    items += [
        running(f"h-{n}-{g}", f"node-{n}", (g,), mem=MIB // 2, cores=50, owned_by=owner())
        for n in range(nodes)
        for g in range(2)
    ]
    items += list(extra)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["explain", *args])
    return result.exit_code, result.output


def as_json(*args: str) -> tuple[int, dict[str, Any]]:
    code, out = run(*args, "-o", "json")
    return code, json.loads(out)


def test_pending_pod_reasons_per_node_and_gpu_with_largest_and_consolidation(tmp_path):
    snap = snapshot(tmp_path, pending("big"))
    code, data = as_json("default/big", "--snapshot", snap)
    assert code == 3
    assert data["status"] == "pending" and "fits on none of 2 node(s)" in data["reason"]
    assert data["request"][0]["memoryMiB"] == MIB and data["request"][0]["count"] == 1
    assert [n["node"] for n in data["nodes"]] == ["node-0", "node-1"]
    for n in data["nodes"]:
        assert not n["fits"] and "CardInsufficientMemory" in n["reason"]
        assert {d["reason"] for d in n["devices"]} == {"CardInsufficientMemory"}
    assert data["largest"]["memoryMiB"] == MIB // 2
    # every running pod is owned by a ReplicaSet: one move frees a whole GPU
    con = data["consolidation"]
    assert len(con["moves"]) == 1 and con["node"] in ("node-0", "node-1")
    assert con["moves"][0]["fromGpus"] != con["moves"][0]["toGpus"]
    # same priority as everyone: nothing to preempt, and the reason says why
    assert data["preemption"]["victims"] == []
    assert "lower-priority" in data["preemption"]["reason"]


def test_pending_pod_text_names_codes_and_what_would_help(tmp_path):
    snap = snapshot(tmp_path, pending("big"))
    code, out = run("default/big", "--snapshot", snap)
    assert code == 3, out
    assert out.startswith("Pod default/big: pending\n")
    assert f"#0 {gpu_id('node-0', 0)}: CardInsufficientMemory" in out
    assert f"largest that fits now: {MIB // 2} MiB" in out
    assert "consolidation: 1 move(s), then it fits on" in out
    assert "  move default/h-" in out


def test_preemption_names_its_victims_for_a_higher_priority_pod(tmp_path):
    snap = snapshot(tmp_path, pending("urgent", priority=1000))
    code, data = as_json("default/urgent", "--snapshot", snap)
    assert code == 3
    pre = data["preemption"]
    assert len(pre["victims"]) == 1 and pre["victims"][0]["priority"] == 0
    assert pre["victims"][0]["pod"].startswith("default/h-")


def test_quota_used_and_hard_and_the_node_lock_of_another_pod(tmp_path):
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-quota", "namespace": "default"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": str(3 * MIB)}},
    }
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    snap_items = [pending("big"), quota]
    path = Path(snapshot(tmp_path, *snap_items))
    doc = json.loads(path.read_text())
    doc["items"][0]["metadata"].setdefault("annotations", {})[NODE_LOCK] = f"{stamp},other,binder"
    path.write_text(json.dumps(doc))
    code, data = as_json("default/big", "--snapshot", str(path))
    assert code == 3
    (q,) = data["quota"]
    assert q["quota"] == "gpu-quota" and q["hard"] == 3 * MIB
    assert q["used"] == 4 * (MIB // 2)  # the four running pods of default
    (lock,) = data["nodeLocks"]
    assert lock["node"] == "node-0" and lock["holder"] == "other/binder"
    code, out = run("default/big", "--snapshot", str(path))
    assert f"quota gpu-quota: limits.nvidia.com/gpumem used {2 * MIB} of {3 * MIB}" in out
    assert "node lock: node-0 held by other/binder" in out


def test_a_pod_that_fits_now_needs_neither_preemption_nor_moves(tmp_path):
    snap = snapshot(tmp_path, pending("small", mem=4000, cores=10))
    code, data = as_json("default/small", "--snapshot", snap)
    assert code == 3  # still Pending: the answer says kube-scheduler has not placed it
    assert "fits now on 2 node(s)" in data["reason"]
    assert data["preemption"]["reason"].startswith("not needed")
    assert data["consolidation"]["reason"].startswith("not needed")


def test_bound_pod_shows_node_gpus_slices_mode_priority(tmp_path):
    snap = snapshot(tmp_path)
    code, data = as_json("default/h-1-0", "--snapshot", snap)
    assert code == 0
    assert data["status"] == "placed" and data["node"] == "node-1"
    (d,) = data["devices"]
    assert d["uuid"] == gpu_id("node-1", 0) and d["memoryMiB"] == MIB // 2
    assert d["coresPct"] == 50 and d["mode"] == "hami-core"
    assert data["priority"] == 0 and data["bindPhase"] == "success"
    code, out = run("default/h-1-0", "--snapshot", snap)
    assert code == 0
    assert f"main: #0 {gpu_id('node-1', 0)} NVIDIA A100-SXM4-80GB, {MIB // 2} MiB, 50%" in out
    assert "(shim)" in out


def test_another_schedulers_pod_is_not_ours(tmp_path):
    theirs = pending("theirs")
    theirs["spec"]["schedulerName"] = "default-scheduler"
    code, data = as_json("default/theirs", "--snapshot", snapshot(tmp_path, theirs))
    assert code == 4
    assert data["status"] == "not-ours" and "default-scheduler" in data["reason"]


def test_a_pod_asking_no_managed_device_is_not_ours(tmp_path):
    plain = pending("plain")
    plain["spec"]["containers"][0]["resources"] = {}
    code, data = as_json("default/plain", "--snapshot", snapshot(tmp_path, plain))
    assert code == 4 and data["reason"] == "asks no managed device"


def test_missing_pod_and_bad_reference_exit_1(tmp_path):
    snap = snapshot(tmp_path)
    code, out = run("default/nope", "--snapshot", snap)
    assert code == 1 and "pod default/nope not found" in out
    code, out = run("a/b/c", "--snapshot", snap)
    assert code == 1 and "not NAMESPACE/POD" in out


def test_yaml_is_the_json_answer(tmp_path):
    snap = snapshot(tmp_path, pending("big"))
    code, out = run("default/big", "--snapshot", snap, "-o", "yaml")
    assert code == 3
    _, data = as_json("default/big", "--snapshot", snap)
    assert yaml.safe_load(out) == data


def test_a_tenants_terminal_escapes_never_reach_the_terminal(tmp_path):
    """A tenant names its pods (and so the victims and moves shown) with escapes that
    would retitle or clear the viewer's terminal: text shows them escaped, JSON and YAML
    carry them as data."""
    evil = "\x1b]0;pwned\x07\x1b[2Jx"
    hostile = pending(evil, priority=1000)
    squatter = running(f"{evil}-victim", "node-0", (0,), mem=MIB // 2, cores=50, namespace="t")
    snap = snapshot(tmp_path, hostile, squatter)
    code, out = run(f"default/{evil}", "--snapshot", snap)
    assert code == 3, out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;pwned" in out
    code, out = run(f"default/{evil}", "--snapshot", snap, "-o", "json")
    assert "\x1b" not in out and json.loads(out)["name"] == evil
    code, out = run(f"default/{evil}", "--snapshot", snap, "-o", "yaml")
    assert "\x1b" not in out and yaml.safe_load(out)["name"] == evil


def test_over_quota_is_named_in_the_reason(tmp_path):
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-quota", "namespace": "default"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": str(2 * MIB + 1000)}},
    }
    code, data = as_json("default/big", "--snapshot", snapshot(tmp_path, pending("big"), quota))
    assert code == 3
    (q,) = data["quota"]
    assert q["thisPod"] == MIB and q["over"] is True
    assert f"over quota gpu-quota: limits.nvidia.com/gpumem {2 * MIB + 1000}" in data["reason"]
    # the planner's moves cannot help a pod over its quota
    assert data["consolidation"]["moves"] == []


ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_shows_what_hami_explain_prints():
    """README's answer is the command's output on examples/snapshot-pending.yaml."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("$ hami explain ml-team/finetune-7b", 1)[1].split("```", 1)[0]
    shown = block.split("\n", 1)[1]
    code, out = run(
        "ml-team/finetune-7b", "--snapshot", str(ROOT / "examples" / "snapshot-pending.yaml")
    )
    assert code == 3
    assert shown == out


def test_a_bound_pod_on_an_mps_gpu_shows_the_mode(tmp_path):
    import attrs

    from tests.builders import gpu, node

    mps = node("mps-0", [attrs.evolve(gpu("GPU-mps-0", memory_mib=MIB), mode="mps")])
    holder = running("on-mps", "mps-0", (0,), mem=8000, cores=25)
    alloc = "GPU-mps-0,NVIDIA,8000,25:;"
    holder["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = alloc
    holder["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"] = alloc
    snap = snapshot(tmp_path, mps, holder)
    code, data = as_json("default/on-mps", "--snapshot", snap)
    assert code == 0 and [d["mode"] for d in data["devices"]] == ["mps"]
    assert "8000 MiB, 25% (mps)" in run("default/on-mps", "--snapshot", snap)[1]


def test_a_node_without_our_devices_says_so(tmp_path):
    from tests.builders import node

    bare = node("cpu-only", [])
    code, data = as_json("default/big", "--snapshot", snapshot(tmp_path, bare, pending("big")))
    assert code == 3
    (entry,) = [n for n in data["nodes"] if n["node"] == "cpu-only"]
    assert not entry["fits"] and entry["reason"] and entry["devices"] == []
    assert f"{entry['reason']} on 1 node(s)" in data["reason"]


def test_a_missing_pod_named_with_escapes_is_reported_escaped(tmp_path):
    code, out = run("default/\x1b[2Jgone", "--snapshot", snapshot(tmp_path))
    assert code == 1 and "\x1b" not in out and "\\x1b[2Jgone" in out


def test_text_of_a_large_cluster_shows_the_closest_nodes_and_sums_the_rest(tmp_path):
    """40 nodes of 8 GPUs: the text stays short (the nodes closest to fitting, one line
    per node's GPUs when they share a code, the rest summed up); JSON has every node."""
    items: list[dict[str, Any]] = [gpu_node(f"n-{i:02}", gpus=8) for i in range(40)]
    items += [
        running(f"h-{i}-{g}", f"n-{i:02}", (g,), mem=MIB // 2 + (i == 7), cores=50)
        for i in range(40)
        for g in range(8)
    ]
    path = tmp_path / "big.json"
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [*items, pending("big")]})
    )
    code, out = run("default/big", "--snapshot", str(path))
    assert code == 3
    assert len(out.splitlines()) < 40, out
    assert "      8 GPUs: CardInsufficientMemory" in out
    assert "and 32 more node(s): 32 x 8/8 CardInsufficientMemory (-o json lists each)" in out
    # n-07 offers one MiB less than the others: it is not among the closest shown
    assert "n-07:" not in out and "n-00:" in out
    _, data = as_json("default/big", "--snapshot", str(path))
    assert len(data["nodes"]) == 40


def test_after_simulate_each_mode_and_the_mig_pod_that_found_no_placement(tmp_path):
    """The cluster ``hami simulate`` leaves after the modes example, read back as a
    snapshot: each bound pod's mode (MIG with its profile, MPS, shim) and the MIG pod
    that fits nowhere, pending with the filter's codes."""
    from hami_core.simulate import runner

    sim = runner.run_files(
        cluster_path=str(ROOT / "examples" / "cluster-modes.yaml"),
        workload_paths=[str(ROOT / "examples" / "workloads-modes")],
    )
    store = sim.pipeline.cluster
    items = [*store.list_nodes(), *store.list_pods()]
    path = tmp_path / "after.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    modes = {}
    for name in ("mig-large", "mig-small", "mps-client", "shim-slice"):
        code, data = as_json(f"default/{name}", "--snapshot", str(path))
        assert code == 0, data
        ((mode, profile),) = {(d["mode"], d["migProfile"]) for d in data["devices"]}
        modes[name] = (mode, profile)
    assert modes == {
        "mig-large": ("mig", "3g.40gb"),
        "mig-small": ("mig", "1g.10gb"),
        "mps-client": ("mps", None),
        "shim-slice": ("hami-core", None),
    }
    assert "(mig 3g.40gb)" in run("default/mig-large", "--snapshot", str(path))[1]
    code, data = as_json("default/mig-no-placement", "--snapshot", str(path))
    assert code == 3 and data["status"] == "pending"
    assert any(d["reason"] for n in data["nodes"] for d in n["devices"])


def test_a_forged_allocation_on_a_pod_asking_no_gpu_is_not_shown_as_its_slice(tmp_path):
    """A tenant's pod asks no GPU but carries an allocation annotation naming one (the
    accounting ignores it, PROTOCOL.md §6): explain does not present it as placed on it."""
    forged = running("forger", "node-0", (0,), mem=MIB // 2, cores=50)
    forged["spec"]["containers"][0]["resources"] = {}
    code, data = as_json("default/forger", "--snapshot", snapshot(tmp_path, forged))
    assert code == 4 and data["status"] == "not-ours"
    assert "devices" not in data
