"""The scheduler's /metrics under HAMi 2.10's names and labels (PROTOCOL.md §9), with
exact values, plus our outcome, lock-wait, health, registration and cache metrics."""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from hami_core.protocol.handshake import HandshakeState, encode_handshake
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.extender import create_extender_app
from hami_core.servers.metrics import SchedulerMetrics
from tests.builders import cluster, container, gpu, manager, node, pod
from tests.servers.test_extender import admitted

MiB = 2**20


def samples(metrics: SchedulerMetrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def one(m, name, **labels):
    found = [v for lab, v in m.get(name, []) if lab == labels]
    assert len(found) == 1, f"{name}{labels}: {m.get(name)}"
    return found[0]


def bound_cluster():
    c = cluster(
        node(
            "n1",
            [gpu("GPU-1", memory_mib=16384), gpu("GPU-2", index=1, memory_mib=8192, healthy=False)],
        ),
    )
    sched = Scheduler(c, manager())
    metrics = SchedulerMetrics(sched)
    p = admitted(
        c,
        pod(
            "trainer",
            container("a", gpu=1, gpumem=3000, gpucores=30),
            container("b"),
            container("c", gpu=1, gpumem=1000, gpucores=10),
            init=[container("setup")],
            namespace="team-a",
        ),
    )
    sched.bind("team-a", "trainer", uid=p["metadata"]["uid"], node="n1")
    return c, sched, metrics


def test_device_and_container_metrics_carry_hamis_labels_and_exact_values():
    _, _, metrics = bound_cluster()
    m = samples(metrics)
    dev1 = {
        "node": "n1",
        "device_uuid": "GPU-1",
        "device_index": "0",
        "device_type": "NVIDIA A100-PCIE-16GB",
    }
    dev2 = {**dev1, "device_uuid": "GPU-2", "device_index": "1"}
    assert one(m, "hami_gpu_memory_limit_bytes", **dev1) == 16384 * MiB
    assert one(m, "hami_gpu_memory_limit_bytes", **dev2) == 8192 * MiB
    assert one(m, "hami_gpu_core_limit_ratio", **dev1) == 100
    assert one(m, "hami_gpu_memory_allocated_bytes", **dev1, device_cores="100") == 4000 * MiB
    assert one(m, "hami_gpu_shared_count", **dev1) == 2
    assert one(m, "hami_gpu_core_allocated_ratio", **dev1) == 40
    assert one(m, "hami_node_gpu_memory_allocated_ratio", **dev1) == 4000 / 16384
    assert (
        one(m, "hami_node_gpu_overview", **dev1, device_cores="100", device_memory_limit="16384")
        == 4000 * MiB
    )
    assert one(m, "hami_gpu_healthy", **dev1) == 1
    assert one(m, "hami_gpu_healthy", **dev2) == 0
    ctr = {"namespace": "team-a", "node": "n1", "pod": "trainer", "device_uuid": "GPU-1"}
    # container_index counts init containers first: setup=0, a=1, b=2, c=3
    assert one(m, "hami_vgpu_memory_allocated_bytes", **ctr, container_index="1") == 3000 * MiB
    assert one(m, "hami_vgpu_memory_allocated_bytes", **ctr, container_index="3") == 1000 * MiB
    assert one(m, "hami_vgpu_core_allocated_ratio", **ctr, container_index="1") == 30
    assert len(m["hami_vgpu_memory_allocated_bytes"]) == 2


def test_quota_metrics_under_hamis_names():
    c, _, metrics = bound_cluster()
    c.add_quota(
        {
            "metadata": {"name": "gpu-quota", "namespace": "team-a"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}},
        }
    )
    m = samples(metrics)
    assert (
        one(
            m,
            "hami_resource_quota_used",
            namespace="team-a",
            quota_name="nvidia.com/gpumem",
            limit="20000",
        )
        == 4000
    )
    assert (
        one(m, "hami_resource_quota_limit", namespace="team-a", quota_name="nvidia.com/gpumem")
        == 20000
    )


def test_quota_metrics_of_a_namespace_with_no_pod_of_ours():
    """The scheduler's cache holds only its own pods (``KubeCluster(scheduler_name=)``): a
    namespace's quota is shown from the quota, not found through its pods; a namespace
    whose quota limits no device resource shows none."""
    c, _, metrics = bound_cluster()
    c.add_quota(
        {
            "metadata": {"name": "gpu-quota", "namespace": "idle-team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}},
        }
    )
    c.add_quota(
        {
            "metadata": {"name": "cpu-quota", "namespace": "cpu-team"},
            "spec": {"hard": {"limits.cpu": "8"}},
        }
    )
    m = samples(metrics)
    labels = dict(namespace="idle-team", quota_name="nvidia.com/gpumem")
    assert one(m, "hami_resource_quota_used", **labels, limit="8000") == 0
    assert one(m, "hami_resource_quota_limit", **labels) == 8000
    assert {s["namespace"] for s, _ in m["hami_resource_quota_limit"]} == {"idle-team"}


def test_node_registration_and_handshake_age():
    now = dt.datetime.now(dt.UTC)
    asked = encode_handshake(HandshakeState.REQUESTING, now - dt.timedelta(seconds=300))
    dead = node("dead", [gpu("GPU-D")], annotations={"hami.io/node-handshake": asked})
    dead["status"]["allocatable"] = {"nvidia.com/gpu": "0"}
    broken = node("broken", [], annotations={"hami.io/node-nvidia-register": "[not json"})
    c = cluster(dead, broken, node("ok", [gpu("GPU-O")]))
    metrics = SchedulerMetrics(Scheduler(c, manager()))
    m = samples(metrics)
    assert one(m, "hami_node_unregistered", node="dead", vendor="NVIDIA") == 1
    assert one(m, "hami_node_unregistered", node="broken", vendor="NVIDIA") == 1
    assert [lab["node"] for lab, _ in m["hami_node_unregistered"]] == ["broken", "dead"]
    age = one(
        m, "hami_node_handshake_age_seconds", node="dead", vendor="NVIDIA", state="Requesting"
    )
    assert 299 <= age < 330


def test_filter_outcomes_lock_waits_and_bind_counts():
    c = cluster(node("n1", [gpu("GPU-1")]))
    sched = Scheduler(c, manager(), lock_wait_s=0.3)
    metrics = SchedulerMetrics(sched)
    client = create_extender_app(sched, metrics=metrics).test_client()
    fits = admitted(c, pod("fits", container(gpu=1, gpumem=1000)))
    huge = admitted(c, pod("huge", container(gpu=1, gpumem=99999)))
    client.post("/filter", json={"Pod": fits, "NodeNames": ["n1"]})
    client.post("/filter", json={"Pod": huge, "NodeNames": ["n1"]})
    client.post("/filter", json={"Pod": "not a pod", "NodeNames": ["n1"]})
    # Another pod holds the node's lock: bind waits lock_wait_s, then is refused.
    holder = admitted(c, pod("holder", container(gpu=1, gpumem=1000)))
    c.patch_node_annotations(
        "n1",
        {"hami.io/mutex.lock": f"{dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M:%SZ},default,holder"},
    )
    body = {
        "PodName": "fits",
        "PodNamespace": "default",
        "PodUID": fits["metadata"]["uid"],
        "Node": "n1",
    }
    assert client.post("/bind", json=body).get_json()["Error"]
    assert holder
    c.patch_node_annotations("n1", {"hami.io/mutex.lock": None})
    assert client.post("/bind", json=body).get_json() == {"Error": ""}
    m = samples(metrics)
    assert one(m, "hami_scheduler_filter_total", outcome="fit") == 1
    assert one(m, "hami_scheduler_filter_total", outcome="nofit") == 1
    assert one(m, "hami_scheduler_filter_total", outcome="error") == 1
    assert one(m, "hami_scheduler_bind_success_total") == 1
    assert one(m, "hami_scheduler_bind_failure_total") == 1
    assert one(m, "hami_scheduler_node_lock_wait_seconds_count", outcome="refused") == 1
    assert one(m, "hami_scheduler_node_lock_wait_seconds_sum", outcome="refused") >= 0.3
    assert one(m, "hami_scheduler_node_lock_wait_seconds_count", outcome="acquired") == 1
    assert one(m, "hami_scheduler_bind_duration_seconds_count") == 2
    assert one(m, "hami_scheduler_filter_duration_seconds_count") == 3


class FakeInformer:
    def __init__(self, synced: bool, last: float | None, relists: int) -> None:
        self._synced = threading.Event()
        if synced:
            self._synced.set()
        self.last_update_monotonic = last
        self.relists = relists

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)


def test_informer_freshness():
    sched = Scheduler(cluster(), manager())
    metrics = SchedulerMetrics(
        sched,
        informers={
            "pods": FakeInformer(True, time.monotonic() - 42, 3),
            "nodes": FakeInformer(False, None, 0),
        },
    )
    m = samples(metrics)
    assert 42 <= one(m, "hami_scheduler_informer_last_update_age_seconds", resource="pods") < 60
    assert [lab for lab, _ in m["hami_scheduler_informer_last_update_age_seconds"]] == [
        {"resource": "pods"}
    ]
    assert one(m, "hami_scheduler_informer_synced", resource="nodes") == 0
    assert one(m, "hami_scheduler_informer_relists", resource="pods") == 3


def test_other_vendors_use_the_same_names_with_their_device_type():
    """A Hygon DCU node (HAMi's dcu-vgpu-device-plugin legacy inventory) and an NVIDIA
    node: one set of names, ``device_type`` telling them apart."""
    dcu = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "dcu-1",
            "annotations": {"hami.io/node-dcu-register": "DCU-SN0,4,65520,100,DCU-K100_AI,0,true:"},
        },
        "status": {"allocatable": {"hygon.com/dcunum": "4"}},
    }
    backends = manager()
    if "DCU" not in backends.vendors:
        pytest.skip("hami-hygon is not installed (the packaging floor run has hami-nvidia only)")
    c = cluster(dcu, node("n1", [gpu("GPU-1")]))
    metrics = SchedulerMetrics(Scheduler(c, backends))
    m = samples(metrics)
    limits = {
        lab["device_uuid"]: (lab["device_type"], v) for lab, v in m["hami_gpu_memory_limit_bytes"]
    }
    assert limits["DCU-SN0"] == ("DCU-K100_AI", 65520 * MiB)
    assert limits["GPU-1"] == ("NVIDIA A100-PCIE-16GB", 16384 * MiB)
    assert (
        one(
            m,
            "hami_gpu_core_limit_ratio",
            node="dcu-1",
            device_uuid="DCU-SN0",
            device_index="0",
            device_type="DCU-K100_AI",
        )
        == 100
    )


def _forged(name, alloc, *containers, scheduler="default-scheduler", node_name="n1", **ann):
    p = pod(name, *containers, namespace="team-a", annotations={ALLOC: alloc, **ann})
    p["metadata"]["uid"] = f"uid-{name}"
    p["spec"]["schedulerName"] = scheduler
    if node_name:
        p["spec"]["nodeName"] = node_name
    p["status"] = {"phase": "Running"}
    return p


ALLOC = "hami.io/vgpu-devices-allocated"


def test_per_pod_series_and_quota_used_follow_the_trust_rule():
    """Issue #12 items 2-3: a forged ``-allocated`` (another scheduler's pod, a non-GPU
    pod, a device of another node, a pod never placed) makes no per-container series and
    no quota use; the real pod's series and quota are unchanged beside them."""
    c, _, metrics = bound_cluster()
    c.add_quota(
        {
            "metadata": {"name": "gpu-quota", "namespace": "team-a"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "20000"}},
        }
    )
    c.add_node(node("n2", [gpu("GPU-9")]))
    for p in (
        _forged("other", "GPU-1,NVIDIA,9000,50:;", container(gpu=1, gpumem=9000)),
        _forged("nogpu", "GPU-1,NVIDIA,9000,50:;", container(), scheduler="hami-scheduler"),
        # ours and on n1, but names n2's device: not an allocation of its node
        _forged(
            "elsewhere", "GPU-9,NVIDIA,9000,50:;", container(gpu=1), scheduler="hami-scheduler"
        ),
        _forged(
            "unplaced",
            "GPU-1,NVIDIA,9000,50:;",
            container(gpu=1),
            scheduler="hami-scheduler",
            node_name="",
        ),
    ):
        c.add_pod(p)
    m = samples(metrics)
    pods = {lab["pod"] for lab, _ in m["hami_vgpu_memory_allocated_bytes"]}
    assert pods == {"trainer"}
    assert {lab["pod"] for lab, _ in m["hami_vgpu_core_allocated_ratio"]} == {"trainer"}
    assert {lab["pod"] for lab, _ in m["hami_vgpu_core_allocated_share"]} == {"trainer"}
    used = one(
        m,
        "hami_resource_quota_used",
        namespace="team-a",
        quota_name="nvidia.com/gpumem",
        limit="20000",
    )
    # "elsewhere" is a pod we placed: its odd list still charges its quota (never frees it)
    assert used == 4000 + 9000
    dev1 = {"node": "n1", "device_uuid": "GPU-1", "device_index": "0"}
    assert (
        one(
            m,
            "hami_gpu_memory_allocated_bytes",
            **dev1,
            device_cores="100",
            device_type="NVIDIA A100-PCIE-16GB",
        )
        == 4000 * MiB
    )


def test_core_shares_count_each_vendors_unit():
    """Ours, not HAMi's (PROTOCOL.md §9): the raw core gauges keep the device list's
    value (an Inferentia2 device's mask 3, a container's core 1 as mask 2), and the share
    and unit gauges count NeuronCores: one of two is 0.5 where the masks read 2/3. NVIDIA's
    shares are its percent over 100."""
    _, _, metrics = bound_cluster()
    m = samples(metrics)
    dev1 = {"node": "n1", "device_uuid": "GPU-1", "device_index": "0"}
    nv = {**dev1, "device_type": "NVIDIA A100-PCIE-16GB"}
    assert one(m, "hami_gpu_core_allocated_share", **nv) == pytest.approx(0.4)
    assert one(m, "hami_gpu_core_allocated_units", **nv, unit="%") == 40
    assert one(m, "hami_gpu_core_limit_units", **nv, unit="%") == 100
    shares = sorted(v for lab, v in m["hami_vgpu_core_allocated_share"])
    assert shares == pytest.approx([0.1, 0.3])

    backends = manager()
    if "AWSNeuron" not in backends.vendors:
        pytest.skip(
            "hami-awsneuron is not installed (the packaging floor run has hami-nvidia only)"
        )
    from hami_core.simulate.loader import load_cluster
    from hami_core.simulate.pipeline import Pipeline

    examples = Path(__file__).resolve().parents[2] / "examples"
    c = load_cluster(examples / "cluster-all-vendors.yaml", backends).to_memory()
    pipe = Pipeline(c, backends)  # the webhook, /filter and /bind, as hami simulate runs them
    metrics = SchedulerMetrics(pipe.scheduler)
    for name in ("neuron", "neuron2"):  # one NeuronCore each
        outcome = pipe.submit(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "ml"},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "x",
                            "resources": {"limits": {"aws.amazon.com/neuroncore": "1"}},
                        }
                    ]
                },
            }
        )
        assert outcome.node == "inf2-01", outcome
    m = samples(metrics)
    raw = {lab["device_uuid"]: v for lab, v in m["hami_gpu_core_allocated_ratio"]}
    share = {lab["device_uuid"]: v for lab, v in m["hami_gpu_core_allocated_share"]}
    held = {u: v for u, v in raw.items() if u.startswith("inf2-01") and v}
    assert held, raw
    for uuid, mask in held.items():
        assert share[uuid] == bin(int(mask)).count("1") / 2
    counted = {
        lab["device_uuid"]: v
        for lab, v in m["hami_gpu_core_allocated_units"]
        if lab["unit"] == "NeuronCores"
    }
    assert sum(counted.values()) == 2
    limits = [v for lab, v in m["hami_gpu_core_limit_units"] if lab["unit"] == "NeuronCores"]
    assert limits == [2, 2, 2, 2]
    pods = {
        lab["pod"]: v for lab, v in m["hami_vgpu_core_allocated_share"] if lab["namespace"] == "ml"
    }
    assert pods == {"neuron": 0.5, "neuron2": 0.5}


def test_consolidation_runs_and_evictions_are_counted():
    from hami_core.defrag.apply import ApplyReport, Step
    from hami_core.defrag.planner import Move

    metrics = SchedulerMetrics(Scheduler(cluster(node("n1", [gpu("GPU-1")])), manager()))
    assert one(samples(metrics), "hami_scheduler_consolidation_evictions_total") == 0
    assert one(samples(metrics), "hami_scheduler_consolidation_runs_total", stopped="done") == 0

    class Queue:
        observer = None

    queue = Queue()
    metrics.watch_consolidation(queue)
    move = Move(
        pod="a/x", priority=0, from_node="n1", from_gpus=(), to_node="n1", to_gpus=(), for_pod="a/b"
    )
    queue.observer(
        ApplyReport(
            steps=(Step(move=move, result="evicted"), Step(move=move, result="blocked-by-budget")),
            stopped="no target needs a move",
        )
    )
    queue.observer(ApplyReport(steps=(), stopped="eviction budget spent"))
    assert one(samples(metrics), "hami_scheduler_consolidation_evictions_total") == 1
    assert one(samples(metrics), "hami_scheduler_consolidation_runs_total", stopped="done") == 1
    assert one(samples(metrics), "hami_scheduler_consolidation_runs_total", stopped="budget") == 1
