"""Numbers in a cluster or workload file that multiply into more than any cluster holds
(a typo's extra zeros) are refused with the key named, before anything is built: a
Deployment of 10^9 replicas, 10^8 GPUs in a group or a split count of 10^11 ran out of
memory or time, and a memoryMiB of 10^23 was shown rounded through a float."""

import time

import pytest

from hami_core.errors import InvalidInputError
from hami_core.simulate.loader import MAX_PODS, load_workloads, parse_cluster

from .helpers import manager, write

A100 = {"model": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920}


def cluster(**group):
    return {"nodes": [{"name": "n1", "gpus": [{**A100, **group}]}]}


@pytest.mark.parametrize(
    ("group", "says"),
    [
        ({"count": 100_000_000}, "gpus[0]: count must be at most 1024"),
        ({"splitCount": 100_000_000_000}, "gpus[0]: splitCount must be at most 1000"),
        ({"memoryMiB": 10**23}, "gpus[0]: memoryMiB must be at most 2147483647"),
        ({"cores": 2**31}, "gpus[0]: cores must be at most 2147483647"),
    ],
)
def test_cluster_numbers_past_any_cluster_are_refused(group, says):
    started = time.monotonic()
    with pytest.raises(
        InvalidInputError, match=r"nodes\[0\] \(n1\): " + says.replace("[0]", r"\[0\]")
    ):
        parse_cluster([cluster(**group)], source="c.yaml", manager=manager())
    assert time.monotonic() - started < 5  # refused up front, not after building


def test_the_largest_accepted_cluster_numbers_still_load():
    loaded = parse_cluster(
        [cluster(count=2, splitCount=1000, memoryMiB=2**31 - 1)],
        source="c.yaml",
        manager=manager(),
    )
    assert [n["metadata"]["name"] for n in loaded.nodes] == ["n1"]


def deployment(name, replicas):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
        },
    }


def test_a_replica_count_past_the_cluster_limit_is_refused(tmp_path):
    path = write(tmp_path / "d.yaml", deployment("d", 1_000_000_000))
    with pytest.raises(InvalidInputError, match=r"Deployment d\): replicas must be at most 150000"):
        load_workloads([path])


def test_workloads_adding_up_past_the_cluster_limit_are_refused(tmp_path):
    write(tmp_path / "w" / "a.yaml", deployment("a", MAX_PODS))
    write(tmp_path / "w" / "b.yaml", deployment("b", 1))
    with pytest.raises(InvalidInputError, match=r"b\.yaml: document 1: .*more than 150000 pods"):
        load_workloads([tmp_path / "w"])


def gpu_pod_with(resources):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]},
    }


@pytest.mark.parametrize(
    "resources",
    [
        {"requests": {"nvidia.com/gpu": 1}},
        {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 2}},
    ],
)
def test_extended_requests_kube_apiserver_may_refuse_load_and_are_judged_per_pod(
    tmp_path, resources
):
    """Loading never stops on them: kube-apiserver validates after the mutating
    webhook, so the run decides per pod (tests/simulate/test_apiserver_refusals.py)."""
    path = write(tmp_path / "p.yaml", gpu_pod_with(resources))
    (pod,) = load_workloads([path]).pods
    assert pod.rejected == ""


def test_extended_requests_equal_to_limits_and_cpu_requests_alone_load(tmp_path):
    path = write(
        tmp_path / "p.yaml",
        gpu_pod_with(
            {
                "limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1k"},
                "requests": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": 1000, "cpu": "2"},
            }
        ),
    )
    assert len(load_workloads([path]).pods) == 1
