"""``hami simulate`` preempts as the servers do (issue 27 item 4): PriorityClasses from
the files, kube-apiserver's Priority admission, the same choice of victims, and the
report naming who was evicted for whom and why."""

from __future__ import annotations

from hami_core.simulate.loader import WorkloadPod, Workloads, load_workloads, parse_cluster
from hami_core.simulate.report import (
    build_explanation,
    build_report,
    render_explanation,
    render_text,
)
from hami_core.simulate.runner import simulate

from .helpers import gpu_pod, manager, simple_cluster, write

CLUSTER = simple_cluster(("node-a", [{"model": "NVIDIA A100-PCIE-40GB", "memoryMiB": 40960}]))
CLASSES = [
    {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": n},
        "value": v,
    }
    for n, v in (("low", 10), ("high", 1000))
]


def _with_class(pod, cls):
    pod["spec"]["priorityClassName"] = cls
    return pod


def _run(pods, classes=CLASSES, **kw):
    mgr = manager()
    cluster = parse_cluster([CLUSTER], source="test", manager=mgr)
    workloads = Workloads(
        pods=tuple(WorkloadPod(pod=p, source="test") for p in pods),
        priority_classes=tuple(classes),
    )
    return simulate(cluster, workloads, mgr, **kw)


def test_a_high_priority_pod_evicts_the_fewest_and_the_report_says_so():
    pods = [
        _with_class(gpu_pod("a", gpu=1, gpumem=20000), "low"),
        _with_class(gpu_pod("b", gpu=1, gpumem=12000), "low"),
        _with_class(gpu_pod("c", gpu=1, gpumem=8000), "low"),
        _with_class(gpu_pod("big", gpu=1, gpumem=20000), "high"),
    ]
    sim = _run(pods, explain="big")
    big = sim.find("big").outcome
    assert big.node == "node-a" and big.preempted == ("default/a",)  # one victim frees 20000
    report = build_report(sim)
    text = render_text(report)
    assert "Preempted for (1)" in text
    assert "default/big evicted default/a: node node-a: evict default/a (priority 10)" in text
    names = {p["metadata"]["name"] for p in sim.pipeline.cluster.list_pods()}
    assert names == {"b", "c", "big"}
    explained = render_explanation(build_explanation(sim, "big"))
    assert "preemption: evicted default/a" in explained


def test_priority_comes_from_the_priority_class_only():
    stated = gpu_pod("stated", gpu=1, gpumem=1000)
    stated["spec"]["priority"] = 1000000
    unknown = _with_class(gpu_pod("unknown", gpu=1, gpumem=1000), "nope")
    forged = gpu_pod("forged", gpu=1, gpumem=40000, annotations={"hami.io/priority": "1000000"})
    sim = _run([_with_class(gpu_pod("held", gpu=1, gpumem=40000), "low"), stated, unknown, forged])
    out = {r.outcome.name: r.outcome for r in sim.runs}
    assert out["stated"].denied == (
        'pods "stated" is forbidden: the integer value of priority (1000000) must not be '
        "provided in pod spec; priority admission controller computed 0 from the given "
        "PriorityClass name"
    )
    assert out["stated"].denied_by == "kube-apiserver"
    assert (
        out["unknown"].denied
        == 'pods "unknown" is forbidden: no PriorityClass with name nope was found'
    )
    # priority 0 < "held"'s 10: nothing to evict, whatever the annotations say
    assert not out["forged"].scheduled and out["forged"].preempted == ()
    assert "priority < 0" in out["forged"].preemption
    assert out["held"].node == "node-a"


def test_priority_classes_are_read_from_workload_files(tmp_path):
    path = write(
        tmp_path / "w.yaml", *CLASSES, _with_class(gpu_pod("p", gpu=1, gpumem=1000), "high")
    )
    loaded = load_workloads([path])
    assert [c["metadata"]["name"] for c in loaded.priority_classes] == ["low", "high"]
    assert not loaded.warnings
