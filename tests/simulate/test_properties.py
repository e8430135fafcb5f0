"""Properties over random small clusters and pods: no device is ever over-committed, and
the same input always gives the same output."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.simulate.report import build_report

from .helpers import manager, run

MGR = manager()

gpu_groups = st.lists(
    st.fixed_dictionaries(
        {
            "model": st.sampled_from(["NVIDIA A100-SXM4-80GB", "NVIDIA A10", "NVIDIA Tesla T4"]),
            "memoryMiB": st.integers(1000, 20000),
            "count": st.integers(1, 3),
            "splitCount": st.integers(1, 4),
            "numa": st.integers(0, 1),
        },
        optional={"cores": st.sampled_from([50, 100])},
    ),
    min_size=1,
    max_size=2,
)
clusters = st.lists(gpu_groups, min_size=1, max_size=3).map(
    lambda nodes: {"nodes": [{"name": f"node-{i}", "gpus": g} for i, g in enumerate(nodes)]}
)


@st.composite
def limits(draw):
    out = {"nvidia.com/gpu": str(draw(st.integers(1, 3)))}
    memory = draw(st.sampled_from(["mib", "pct", "none"]))
    if memory == "mib":
        out["nvidia.com/gpumem"] = str(draw(st.integers(100, 20000)))
    elif memory == "pct":
        out["nvidia.com/gpumem-percentage"] = str(draw(st.integers(1, 100)))
    if draw(st.booleans()):
        out["nvidia.com/gpucores"] = str(draw(st.integers(0, 100)))
    return out


@st.composite
def pods(draw, i):
    def container(name):
        c = {"name": name, "image": "busybox"}
        if draw(st.integers(0, 4)):  # mostly with devices
            c["resources"] = {"limits": draw(limits())}
        return c

    spec = {"containers": [container(f"c{j}") for j in range(draw(st.integers(1, 2)))]}
    if draw(st.integers(0, 4)) == 0:
        spec["initContainers"] = [container("init")]
    annotations = {}
    if draw(st.booleans()):
        annotations["hami.io/gpu-scheduler-policy"] = draw(
            st.sampled_from(["binpack", "spread", "numa", "topology-aware"])
        )
    if draw(st.integers(0, 3)) == 0:
        annotations["hami.io/node-scheduler-policy"] = draw(st.sampled_from(["binpack", "spread"]))
    if draw(st.integers(0, 5)) == 0:
        annotations["nvidia.com/use-gputype"] = draw(st.sampled_from(["A10", "A100", "T4"]))
    meta = {"name": f"pod-{i}", "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


workloads = st.integers(1, 10).flatmap(lambda n: st.tuples(*[pods(i) for i in range(n)]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters, pod_list=workloads)
def test_no_device_is_ever_over_committed(cluster, pod_list):
    sim = run(cluster, list(pod_list), mgr=MGR)
    data = build_report(sim)
    for g in data["gpus"]:
        assert g["usedMemoryMiB"] <= g["memoryMiB"], g
        assert g["usedCoresPct"] <= g["coresPct"], g
        assert g["sharers"] <= g["splitCount"], g
    for p in data["pods"]:
        assert p["status"] != "error", p  # the pipeline never breaks on valid pods
        for container in {d["container"] for d in p["devices"]}:
            uuids = [d["uuid"] for d in p["devices"] if d["container"] == container]
            assert len(uuids) == len(set(uuids)), p  # N distinct devices per container
        if p["status"] == "unschedulable":
            assert {e["node"] for e in p["explanation"]} == {n["name"] for n in cluster["nodes"]}
    s = data["summary"]
    assert s["placed"] + s["unschedulable"] + s["denied"] + s["errors"] == len(pod_list)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters, pod_list=workloads)
def test_same_input_same_output(cluster, pod_list):
    first = json.dumps(build_report(run(cluster, list(pod_list), mgr=MGR)))
    second = json.dumps(build_report(run(cluster, list(pod_list), mgr=MGR)))
    assert first == second
