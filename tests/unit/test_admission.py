"""Admission decisions (PROTOCOL.md §1, §6) without a server."""

import copy

import jsonpatch
import pytest

from hami_core.webhook import Admission
from tests.builders import cluster, container, manager, pod


def review(p, **kw):
    c = kw.pop("store", None)
    return Admission(manager(kw.pop("config", None)), c).review(p, **kw)


def patched(p, result):
    return jsonpatch.apply_patch(copy.deepcopy(p), list(result.patch))


def limits_of(p, i=0, key="containers"):
    return p["spec"][key][i]["resources"]


def test_count_only_request_becomes_exclusive_whole_device():
    p = pod("p", container(gpu=1))
    out = patched(p, review(p))
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    res = limits_of(out)
    assert res["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"}
    assert res["requests"] == res["limits"]


def test_memory_only_request_gets_a_count_and_default_cores():
    p = pod("p", container(gpumem=3000))
    res = limits_of(patched(p, review(p)))
    assert res["limits"] == {
        "nvidia.com/gpumem": "3000",
        "nvidia.com/gpu": "1",
        "nvidia.com/gpucores": "0",
    }


def test_configured_defaults_apply():
    p = pod("p", container(gpucores=20))
    res = limits_of(
        patched(p, review(p, config={"nvidia": {"defaultMemory": 2048, "defaultGPUNum": 2}}))
    )
    assert res["limits"] == {
        "nvidia.com/gpucores": "20",
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem": "2048",
    }


def test_quantities_as_written_are_kept():
    p = pod("p", container(gpu=1, gpumem="5k"))
    res = limits_of(patched(p, review(p)))
    assert (
        res["limits"]["nvidia.com/gpumem"] == "5k" and res["requests"]["nvidia.com/gpumem"] == "5k"
    )


def test_init_containers_are_mutated_too():
    p = pod("p", container("app"), init=[container("init", gpu=1, gpumem=100)])
    out = patched(p, review(p))
    assert limits_of(out, 0, "initContainers")["requests"]["nvidia.com/gpu"] == "1"
    assert out["spec"]["schedulerName"] == "hami-scheduler"


def test_env_for_priority_and_core_policy():
    c = container(gpu=1, gpumem=100, priority=1)
    p = pod("p", c, annotations={"hami.io/core-policy": "force"})
    env = {e["name"]: e["value"] for e in patched(p, review(p))["spec"]["containers"][0]["env"]}
    assert env == {"CUDA_TASK_PRIORITY": "1", "GPU_CORE_UTILIZATION_POLICY": "force"}


def test_mutation_is_idempotent():
    p = pod(
        "p",
        container(gpu=1, gpumem=100, priority=0),
        annotations={"hami.io/core-policy": "disable"},
    )
    once = patched(p, review(p))
    assert patched(once, review(once)) == once


@pytest.mark.parametrize(
    ("build", "reason", "words"),
    [
        (lambda: _privileged(), "PrivilegedContainer", ["'main'", "privileged"]),
        (
            lambda: {
                **pod("p", container(gpu=1)),
                "spec": {**pod("p", container(gpu=1))["spec"], "nodeName": "n1"},
            },
            "NodeNamePreset",
            ["spec.nodeName", "'n1'"],
        ),
        (
            lambda: pod("p", container(gpu=1), annotations={"hami.io/vgpu-devices-allocated": "x"}),
            "SchedulerOwnedAnnotation",
            ["hami.io/vgpu-devices-allocated"],
        ),
        (
            lambda: pod("p", container(gpu=1, gpumem="16Gi")),
            "InvalidRequest",
            ["'main'", "nvidia.com/gpumem", "'16Gi'"],
        ),
        (lambda: pod("p", container(gpu="1500m")), "InvalidRequest", ["nvidia.com/gpu", "'1500m'"]),
        (
            lambda: pod("p", container(gpu=1, gpumem_percentage=101)),
            "InvalidRequest",
            ["nvidia.com/gpumem-percentage", "'101'"],
        ),
        (
            lambda: pod("p", container(gpu=1, gpucores=-1)),
            "InvalidRequest",
            ["nvidia.com/gpucores", "negative"],
        ),
        (
            lambda: pod("p", container(gpu=1, gpumem=10, gpumem_percentage=10)),
            "InvalidRequest",
            ["either"],
        ),
        (lambda: pod("p", container(gpu=0, gpumem=10)), "InvalidRequest", ["nvidia.com/gpu is 0"]),
        (
            lambda: pod(
                "p", container(gpu=1), annotations={"hami.io/gpu-scheduler-policy": "pack"}
            ),
            "InvalidRequest",
            ["hami.io/gpu-scheduler-policy", "'pack'"],
        ),
        (
            lambda: pod(
                "p", container(gpu=1), annotations={"hami.io/node-scheduler-policy": "fill"}
            ),
            "InvalidRequest",
            ["hami.io/node-scheduler-policy"],
        ),
        (
            lambda: pod("p", container(gpu=1), annotations={"hami.io/core-policy": "always"}),
            "InvalidRequest",
            ["hami.io/core-policy", "'always'"],
        ),
    ],
)
def test_denials_name_the_cause(build, reason, words):
    result = review(build())
    assert not result.allowed and result.reason == reason and not result.patch
    for w in words:
        assert w in result.message, result.message


def _privileged():
    c = container(gpu=1)
    c["securityContext"] = {"privileged": True}
    return pod("p", c)


def test_pods_left_alone():
    gpu_pod = pod("p", container(gpu=1))
    assert review(pod("plain", container())).patch == ()
    assert not review(pod("plain", container())).mutated
    other = copy.deepcopy(gpu_pod)
    other["spec"]["schedulerName"] = "volcano"
    assert review(other).patch == ()
    plain_ignored = pod("plain", container())
    plain_ignored["metadata"]["labels"] = {"hami.io/webhook": "ignore"}
    assert review(plain_ignored).patch == () and not review(plain_ignored).mutated
    assert review(gpu_pod, namespace_labels={"hami.io/webhook": "ignore"}).patch == ()
    privileged_without_gpu = pod("x", {"name": "c", "securityContext": {"privileged": True}})
    assert review(privileged_without_gpu).allowed


def test_already_ours_is_mutated():
    p = pod("p", container(gpu=1))
    p["spec"]["schedulerName"] = "hami-scheduler"
    assert review(p).mutated and review(p).allowed


def test_quota_counts_existing_allocations():
    store = cluster()
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "10000", "nvidia.com/gpu": "2"}},
        }
    )
    existing = pod("old", container(gpu=1, gpumem=6000), namespace="team")
    existing["metadata"]["annotations"] = {
        "hami.io/vgpu-devices-allocated": "GPU-1,NVIDIA,6000,0:;"
    }
    existing["spec"].update(schedulerName="hami-scheduler", nodeName="n1")  # placed by us
    store.add_pod(existing)
    ok = review(pod("fits", container(gpu=1, gpumem=4000), namespace="team"), store=store)
    assert ok.allowed
    over = review(pod("over", container(gpu=1, gpumem=4001), namespace="team"), store=store)
    assert (
        not over.allowed
        and "limits.nvidia.com/gpumem 10000, used 6000, this pod 4001" in over.message
    )
    count = review(pod("many", container(gpu=2, gpumem=1), namespace="team"), store=store)
    assert not count.allowed and "nvidia.com/gpu 2, used 1, this pod 2" in count.message


def test_quota_init_container_is_maxed_not_added():
    store = cluster()
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "10000"}},
        }
    )
    p = pod(
        "p",
        container("a", gpu=1, gpumem=5000),
        init=[container("i", gpu=1, gpumem=9000)],
        namespace="team",
    )
    assert review(p, store=store).allowed
    p2 = pod(
        "p2",
        container("a", gpu=1, gpumem=5000),
        container("b", gpu=1, gpumem=5001),
        namespace="team",
    )
    assert not review(p2, store=store).allowed


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"containers": {"name": "c"}}, "spec.containers must be a list"),
        ({"containers": ["c"]}, "spec.containers[0] must be a container"),
    ],
)
def test_malformed_pods_are_denied_with_the_field(spec, words):
    result = review({"metadata": {"name": "p", "namespace": "default"}, "spec": spec})
    assert not result.allowed and result.reason == "InvalidRequest" and words in result.message


def test_set_resources_creates_missing_maps_and_escapes_names():
    from hami_core.protocol.patches import set_resources

    pod_obj = {
        "spec": {
            "containers": [
                {"name": "c"},
                {"name": "d", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ]
        }
    }
    ops = set_resources(
        pod_obj["spec"]["containers"][0], "/spec/containers/0", {"nvidia.com/gpu": "1"}
    )
    assert ops[0] == {"op": "add", "path": "/spec/containers/0/resources", "value": {}}
    assert {
        "op": "add",
        "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu",
        "value": "1",
    } in ops
    out = jsonpatch.apply_patch(copy.deepcopy(pod_obj), ops)
    assert out["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"nvidia.com/gpu": "1"},
    }
    ops = set_resources(
        pod_obj["spec"]["containers"][1], "/spec/containers/1", {"nvidia.com/gpu": "1"}
    )
    assert ops == [
        {"op": "add", "path": "/spec/containers/1/resources/requests", "value": {}},
        {
            "op": "add",
            "path": "/spec/containers/1/resources/requests/nvidia.com~1gpu",
            "value": "1",
        },
    ]
