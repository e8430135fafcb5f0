"""Reading clusters (simple form and snapshots) and workloads (kinds, files, directories)."""

import json

import pytest

from hami_core.errors import InvalidInputError
from hami_core.protocol import decode_inventory, decode_link_scores
from hami_core.simulate.loader import SIMPLE, SNAPSHOT, load_cluster, load_workloads, parse_cluster
from hami_core.simulate.runner import simulate

from .helpers import EXAMPLES, gpu_pod, manager, write

REGISTER = "hami.io/node-nvidia-register"


def devices_of(node):
    return decode_inventory(
        node["metadata"]["annotations"][REGISTER], node=node["metadata"]["name"], vendor="NVIDIA"
    )


# -- simple cluster ------------------------------------------------------------------


def test_simple_cluster_becomes_nodes_with_inventory(tmp_path):
    path = write(
        tmp_path / "c.yaml",
        {
            "nodes": [
                {
                    "name": "n2",
                    "labels": {"zone": "b"},
                    "gpus": [
                        {
                            "model": "NVIDIA A100-SXM4-80GB",
                            "memoryMiB": 81920,
                            "count": 2,
                            "numa": 0,
                        },
                        {
                            "model": "NVIDIA A100-SXM4-80GB",
                            "memoryMiB": 81920,
                            "count": 2,
                            "numa": 1,
                            "splitCount": 4,
                        },
                    ],
                    "links": [{"gpus": [0, 1], "score": 400}],
                },
                {
                    "name": "n1",
                    "gpus": [
                        {
                            "model": "NVIDIA Tesla T4",
                            "memoryMiB": 15360,
                            "uuid": "GPU-t4",
                            "cores": 50,
                        }
                    ],
                },
            ],
            "quotas": [
                {"namespace": "team", "name": "q", "hard": {"limits.nvidia.com/gpumem": 24000}}
            ],
        },
    )
    c = load_cluster(path, manager())
    assert c.form == SIMPLE
    assert [n["metadata"]["name"] for n in c.nodes] == ["n1", "n2"]  # sorted
    n1, n2 = c.nodes
    assert [
        (d.uuid, d.index, d.memory_mib, d.cores_pct, d.split_count) for d in devices_of(n1)
    ] == [("GPU-t4-0", 0, 15360, 50, 10)]
    devs = devices_of(n2)
    assert [d.uuid for d in devs] == [f"GPU-n2-{i}" for i in range(4)]
    assert [d.numa for d in devs] == [0, 0, 1, 1]
    assert [d.split_count for d in devs] == [10, 10, 4, 4]
    assert all(d.model == "NVIDIA A100-SXM4-80GB" and d.healthy for d in devs)
    assert n2["metadata"]["labels"] == {"kubernetes.io/hostname": "n2", "zone": "b"}
    assert n2["status"]["allocatable"]["nvidia.com/gpu"] == "28"
    scores = decode_link_scores(
        n2["metadata"]["annotations"]["hami.io/node-nvidia-score"], node="n2"
    )
    assert scores["GPU-n2-0"]["GPU-n2-1"] == 400
    assert c.quotas[0]["metadata"] == {"name": "q", "namespace": "team"}
    assert c.quotas[0]["spec"]["hard"] == {"limits.nvidia.com/gpumem": "24000"}


def test_simple_cluster_follows_the_config_split_count_and_scaling():
    mgr = manager(
        {"nvidia": {"deviceSplitCount": 4, "deviceMemoryScaling": 1.5, "deviceCoreScaling": 2}}
    )
    c = parse_cluster(
        [{"nodes": [{"name": "n", "gpus": [{"model": "NVIDIA A10", "memoryMiB": 1000}]}]}],
        source="x",
        manager=mgr,
    )
    (d,) = devices_of(c.nodes[0])
    assert (d.split_count, d.memory_mib, d.cores_pct) == (4, 1500, 200)


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"nodes": [{"name": "n", "gpu": []}]}, "unknown key 'gpu'"),
        ({"nodes": [{"name": "n", "gpus": [{"model": "X"}]}]}, "memoryMiB is required"),
        (
            {"nodes": [{"name": "n", "gpus": [{"model": "X", "memoryMiB": "80Gi"}]}]},
            "memoryMiB must be an integer",
        ),
        (
            {"nodes": [{"name": "n", "gpus": [{"model": "X", "memoryMiB": 1, "vendor": "ACME"}]}]},
            "no installed backend serves vendor 'ACME'",
        ),
        ({"nodes": [{"name": "n"}, {"name": "n"}]}, "listed twice"),
        ({"nodes": []}, "nodes must be a non-empty list"),
        (
            {"nodes": [{"name": "n", "gpus": [{"model": "X", "memoryMiB": 1}]}], "extra": 1},
            "unknown key 'extra'",
        ),
        (
            {
                "nodes": [
                    {
                        "name": "n",
                        "gpus": [{"model": "X", "memoryMiB": 1}],
                        "links": [{"gpus": [0, 5]}],
                    }
                ]
            },
            "two distinct device indexes",
        ),
    ],
)
def test_simple_cluster_errors_name_the_file_and_the_field(tmp_path, doc, needle):
    path = write(tmp_path / "bad-cluster.yaml", doc)
    with pytest.raises(InvalidInputError) as exc:
        load_cluster(path, manager())
    assert needle in str(exc.value)
    assert "bad-cluster.yaml" in str(exc.value)


# -- snapshot ------------------------------------------------------------------------


def test_bundled_snapshot_is_detected_and_keeps_live_allocated_pods():
    c = load_cluster(EXAMPLES / "snapshot.yaml", manager())
    assert c.form == SNAPSHOT
    assert [n["metadata"]["name"] for n in c.nodes] == ["gpu-a100-01", "gpu-a100-02", "gpu-t4-01"]
    assert sorted(p["metadata"]["name"] for p in c.pods) == [
        "embedding-server-0",
        "stable-diffusion-6c8d9f7b5-x2k4p",
    ]
    assert c.ignored_pods == 1  # the Succeeded pod
    # the pod without GPUs is kept: it counts for kube-scheduler's CPU / memory / pods
    assert [p["metadata"]["name"] for p in c.bound_pods] == ["coredns-5d78c9869d-7k2xs"]
    assert [q["metadata"]["name"] for q in c.quotas] == ["gpu-quota"]
    # uids are preserved
    mem = c.to_memory()
    assert (
        mem.get_pod("ml-team", "embedding-server-0")["metadata"]["uid"]
        == "a8e2c5f1-6b39-4d70-9c14-2f8b7e3d5a96"
    )


def test_snapshot_allocations_reduce_free_memory():
    mgr = manager()
    c = load_cluster(EXAMPLES / "snapshot.yaml", mgr)
    sim = simulate(c, load_workloads([]), mgr)
    sched = sim.pipeline.scheduler
    usage = sched.node_usage(sched.node_info(sim.pipeline.cluster.get_node("gpu-a100-01")))
    first = usage["GPU-4f1e9c02-5b1a-8d7e-2c44-0a9b3e6f1d21"]
    assert (first.used_memory_mib, first.used_cores_pct, first.free_memory_mib) == (
        20000,
        30,
        61920,
    )
    # the Succeeded pod's 40000 MiB on gpu-a100-02 are free again
    usage2 = sched.node_usage(sched.node_info(sim.pipeline.cluster.get_node("gpu-a100-02")))
    assert usage2["GPU-1b7c3e95-d04f-4a2b-9e61-8f5a2c7d3e10"].used_memory_mib == 0


def test_snapshot_usage_changes_where_pods_go(tmp_path):
    """A pod asking 70000 MiB does not fit next to the snapshot's 20000 MiB pod."""
    mgr = manager()
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n",
            "annotations": {
                REGISTER: json.dumps(
                    [
                        {
                            "id": "GPU-x",
                            "count": 10,
                            "devmem": 81920,
                            "devcore": 100,
                            "type": "NVIDIA A100",
                            "health": True,
                        }
                    ]
                )
            },
        },
    }
    holder = gpu_pod("holder", gpu=1, gpumem=20000)
    holder["metadata"]["annotations"] = {
        "hami.io/vgpu-devices-allocated": "GPU-x,NVIDIA,20000,0:;",
        "hami.io/vgpu-node": "n",
    }
    holder["metadata"]["uid"] = "uid-holder"
    holder["spec"]["schedulerName"] = "hami-scheduler"  # only our scheduler's pods count
    holder["status"] = {"phase": "Running"}
    snap = write(
        tmp_path / "snap.yaml", {"apiVersion": "v1", "kind": "List", "items": [node, holder]}
    )
    wl = write(
        tmp_path / "w.yaml", gpu_pod("big", gpu=1, gpumem=70000), gpu_pod("ok", gpu=1, gpumem=60000)
    )
    sim = simulate(load_cluster(snap, mgr), load_workloads([wl]), mgr)
    big, ok = sim.runs
    assert not big.outcome.scheduled
    assert big.outcome.filter.failed == {"n": "1/1 CardInsufficientMemory"}
    assert ok.outcome.node == "n"


def test_snapshot_of_plain_documents_and_typed_lists(tmp_path):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "annotations": {}}}
    path = write(
        tmp_path / "s.yaml",
        node,
        {"apiVersion": "v1", "kind": "PodList", "items": [{"metadata": {"name": "p"}, "spec": {}}]},
        {"kind": "Service", "metadata": {"name": "s"}},
    )
    c = load_cluster(path, manager())
    assert c.form == SNAPSHOT and len(c.nodes) == 1 and c.ignored_pods == 1
    assert any("Service" in w for w in c.warnings)


def test_a_file_without_nodes_is_an_error(tmp_path):
    path = write(tmp_path / "empty.yaml", {"apiVersion": "v1", "kind": "List", "items": []})
    with pytest.raises(InvalidInputError, match=r"empty.yaml: no nodes"):
        load_cluster(path, manager())


# -- workloads -----------------------------------------------------------------------


def template(**limits):
    return {
        "metadata": {"labels": {"app": "x"}, "annotations": {"nvidia.com/use-gputype": "A100"}},
        "spec": gpu_pod("t", **limits)["spec"],
    }


@pytest.mark.parametrize("kind, key", [("Deployment", "replicas"), ("Job", "parallelism")])
def test_a_null_count_is_unset_and_defaults_to_one(tmp_path, kind, key):
    """``replicas: null`` is how a Helm template writes an unset value; the API server
    defaults it (1), and so does simulate (it said "replicas is required")."""
    obj = {
        "apiVersion": "apps/v1" if kind == "Deployment" else "batch/v1",
        "kind": kind,
        "metadata": {"name": "w"},
        "spec": {key: None, "template": template(gpu=1)},
    }
    assert [p.key for p in load_workloads([write(tmp_path / "w.yaml", obj)]).pods] == [
        "default/w-0"
    ]


def test_deployment_statefulset_replicaset_and_job_expand(tmp_path):
    path = write(
        tmp_path / "w.yaml",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"replicas": 3, "template": template(gpu=1, gpumem=1000)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {"replicas": 2, "template": template(gpu=1)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "rs"},
            "spec": {"template": template(gpu=1)},
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job"},
            "spec": {"parallelism": 4, "completions": 2, "template": template(gpu=1)},
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "job1"},
            "spec": {"template": template(gpu=1)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "zero"},
            "spec": {"replicas": 0, "template": template(gpu=1)},
        },
    )
    w = load_workloads([path])
    assert [p.key for p in w.pods] == [
        "prod/web-0",
        "prod/web-1",
        "prod/web-2",
        "default/db-0",
        "default/db-1",
        "default/rs-0",
        "default/job-0",
        "default/job-1",
        "default/job1-0",
    ]
    pod = w.pods[0].pod
    assert pod["kind"] == "Pod" and pod["metadata"]["labels"] == {"app": "x"}
    assert pod["metadata"]["annotations"] == {"nvidia.com/use-gputype": "A100"}
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] == 1000
    assert w.pods[0].source.endswith("w.yaml: Deployment web")
    # each pod has its own spec
    assert w.pods[0].pod["spec"] is not w.pods[1].pod["spec"]


def test_pods_are_cleaned_as_kubectl_create_would(tmp_path):
    pod = gpu_pod("p", gpu=1)
    pod["metadata"].update(uid="u", resourceVersion="7", creationTimestamp="2024-01-01T00:00:00Z")
    pod["status"] = {"phase": "Succeeded"}
    w = load_workloads([write(tmp_path / "p.yaml", pod)])
    (p,) = w.pods
    assert "status" not in p.pod
    assert set(p.pod["metadata"]) == {"name", "namespace"}


def test_unknown_kinds_are_skipped_with_a_warning_and_lists_are_read(tmp_path):
    path = write(
        tmp_path / "w.yaml",
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}},
        {"apiVersion": "v1", "kind": "List", "items": [gpu_pod("a", gpu=1), gpu_pod("b", gpu=1)]},
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "q", "namespace": "t"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "1"}},
        },
    )
    w = load_workloads([path])
    assert [p.name for p in w.pods] == ["a", "b"]
    assert (
        len(w.warnings) == 1
        and "skipped Service svc" in w.warnings[0]
        and "w.yaml: document 1" in w.warnings[0]
    )
    assert [q["metadata"]["name"] for q in w.quotas] == ["q"]


def test_directories_are_read_recursively_in_sorted_order(tmp_path):
    d = tmp_path / "wl"
    write(d / "b.yaml", gpu_pod("b1", gpu=1), gpu_pod("b2", gpu=1))
    write(d / "a" / "z.yml", gpu_pod("az", gpu=1))
    (d / "c.json").write_text(json.dumps(gpu_pod("c", gpu=1)))
    write(d / ".hidden" / "h.yaml", gpu_pod("hidden", gpu=1))
    write(d / ".h.yaml", gpu_pod("hidden2", gpu=1))
    (d / "notes.txt").write_text("not yaml: [")
    single = write(tmp_path / "first.yaml", gpu_pod("first", gpu=1))
    w = load_workloads([single, d])
    assert [p.name for p in w.pods] == ["first", "az", "b1", "b2", "c"]
    assert len(w.sources) == 4


def test_empty_documents_are_ignored(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("---\n---\n" + json.dumps(gpu_pod("p", gpu=1)) + "\n---\n")
    assert [p.name for p in load_workloads([path]).pods] == ["p"]


def test_a_file_that_does_not_parse_raises_an_error_naming_the_file(tmp_path):
    """A file that is not YAML stops the run (no object can be read from it); a
    malformed *object* is refused alone (tests/simulate/test_apiserver_refusals.py)."""
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p\nspec: {}\n")
    with pytest.raises(InvalidInputError) as exc:
        load_workloads([path])
    assert "broken.yaml" in str(exc.value)
    assert "invalid YAML at line" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "w.json"
    path.write_text('{"kind": "Pod",\n "metadata": }')
    with pytest.raises(InvalidInputError, match=r"w.json: invalid JSON at line 2"):
        load_workloads([path])


def test_missing_path_is_an_error(tmp_path):
    with pytest.raises(InvalidInputError, match="no such file or directory"):
        load_workloads([tmp_path / "nope"])


def test_timestamps_stay_strings(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(
        "kind: Pod\nmetadata: {name: p, labels: {since: 2024-01-01}}\nspec: {containers: [{name: c}]}\n"
    )
    (p,) = load_workloads([path]).pods
    assert p.pod["metadata"]["labels"]["since"] == "2024-01-01"


def test_snapshot_problems_are_warned_and_the_run_goes_on():
    from pathlib import Path

    path = Path(__file__).parents[1] / "fixtures" / "snapshot-broken.yaml"
    loaded = load_cluster(path, manager())
    text = "\n".join(loaded.warnings)
    assert (
        "allocation of pod broken unreadable, the devices it names (or all of that vendor "
        "on its node) held whole"
        in text
        and "MiB ('') and cores ('') must be non-negative integers" in text
    )
    assert "node bad: NVIDIA devices unusable: hami.io/node-nvidia-register: node bad:" in text
    assert "node bad: link scores ignored" in text
    assert "node good: device GPU-1 is also on node dup" in text
    # kept (bound and live): the usage fold holds what it names whole, as the scheduler does
    assert [p["metadata"]["name"] for p in loaded.pods] == ["broken"]
