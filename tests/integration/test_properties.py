"""Properties of the engine over random clusters and workloads (hypothesis)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import container, gpu, node, pipeline, pod

gpus = st.builds(
    lambda mem, split, cores: (mem, split, cores),
    st.sampled_from([8192, 16384, 24576, 81920]),
    st.integers(1, 6),
    st.sampled_from([100, 100, 200]),
)
clusters = st.lists(st.lists(gpus, min_size=1, max_size=3), min_size=1, max_size=3)
requests = st.fixed_dictionaries(
    {"gpu": st.integers(1, 3)},
    optional={
        "gpumem": st.integers(1, 40000),
        "gpumem_percentage": st.integers(1, 100),
        "gpucores": st.integers(0, 100),
    },
).filter(lambda r: not ("gpumem" in r and "gpumem_percentage" in r))
workloads = st.lists(st.lists(requests, min_size=1, max_size=2), min_size=1, max_size=12)
policies = st.tuples(
    st.sampled_from(["binpack", "spread"]),
    st.sampled_from(["binpack", "spread", "numa", "topology-aware"]),
)


def run(cluster_spec, workload, node_policy, gpu_policy):
    nodes = [
        node(
            f"n{i}",
            [
                gpu(f"GPU-{i}-{j}", index=j, memory_mib=m, split=s, cores=c, numa=j % 2)
                for j, (m, s, c) in enumerate(g)
            ],
        )
        for i, g in enumerate(cluster_spec)
    ]
    p = pipeline(
        *nodes,
        config={
            "defaultSchedulerPolicy": {
                "nodeSchedulerPolicy": node_policy,
                "gpuSchedulerPolicy": gpu_policy,
            }
        },
    )
    outcomes = [
        p.submit(pod(f"p{k}", *[container(f"c{i}", **r) for i, r in enumerate(reqs)]))
        for k, reqs in enumerate(workload)
    ]
    return p, outcomes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters, workloads, policies)
def test_no_device_is_ever_overcommitted(cluster_spec, workload, pols):
    p, outcomes = run(cluster_spec, workload, *pols)
    for n in p.cluster.list_nodes():
        info = p.scheduler.node_info(n)
        for u in p.scheduler.node_usage(info).values():
            assert u.used_memory_mib <= u.device.memory_mib
            assert u.used_cores_pct <= u.device.cores_pct
            assert u.used_count <= u.device.split_count
    for out in outcomes:
        if out.allocation is not None:
            for per_container in out.allocation.devices.values():
                for devices in per_container:
                    assert len({d.uuid for d in devices}) == len(devices)  # distinct devices
        elif out.filter is not None and not out.denied:
            assert set(out.filter.failed) == {n["metadata"]["name"] for n in p.cluster.list_nodes()}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters, workloads, policies)
def test_same_input_same_placement(cluster_spec, workload, pols):
    _, first = run(cluster_spec, workload, *pols)
    _, second = run(cluster_spec, workload, *pols)
    assert [(o.node, o.allocation, o.denied) for o in first] == [
        (o.node, o.allocation, o.denied) for o in second
    ]
