"""The cases of the engine issue, each with the value it must give.

Unless said otherwise: one node, one GPU ``GPU-A`` of 16384 MiB, split count 10,
default policies (node binpack, GPU spread).
"""

import pytest

from tests.builders import container, gpu, node, pipeline, pod

ONE_GPU = node("node-1", [gpu("GPU-A")])


def usage_of(p, uuid="GPU-A", node_name="node-1"):
    sched = p.scheduler
    info = sched.node_info(p.cluster.get_node(node_name))
    return sched.node_usage(info)[uuid]


def test_1_three_pods_share_one_gpu():
    p = pipeline(ONE_GPU)
    for i in range(3):
        out = p.submit(pod(f"p{i}", container(gpu=1, gpumem=4000)))
        assert out.node == "node-1"
        assert out.allocation.devices["NVIDIA"] == ((_slice("GPU-A", 4000, 0),),)
    assert usage_of(p).used_memory_mib == 12000


def _slice(uuid, mem, cores):
    from hami_core.model import ContainerDevice

    return ContainerDevice(uuid=uuid, vendor="NVIDIA", memory_mib=mem, cores_pct=cores)


def test_2_exclusive_then_shared_is_compute_exhausted():
    p = pipeline(ONE_GPU)
    assert p.submit(pod("a", container(gpu=1, gpumem=1000, gpucores=100))).scheduled
    b = p.submit(pod("b", container(gpu=1, gpumem=1000)))
    assert not b.scheduled
    assert b.filter.failed == {"node-1": "1/1 CardComputeUnitsExhausted"}


def test_2_shared_then_exclusive_is_a_conflict():
    p = pipeline(ONE_GPU)
    assert p.submit(pod("b", container(gpu=1, gpumem=1000))).scheduled
    a = p.submit(pod("a", container(gpu=1, gpumem=1000, gpucores=100)))
    assert not a.scheduled
    assert a.filter.failed == {"node-1": "1/1 ExclusiveDeviceAllocateConflict"}


def test_3_two_gpus_on_a_one_gpu_node():
    p = pipeline(ONE_GPU)
    out = p.submit(pod("p", container(gpu=2)))
    assert not out.scheduled
    assert out.filter.failed["node-1"].startswith("NodeInsufficientDevice")


def test_4_init_container_charge_is_the_max_not_the_sum():
    p = pipeline(ONE_GPU)
    out = p.submit(
        pod(
            "p",
            container("a", gpu=1, gpumem=4000),
            container("b", gpu=1, gpumem=4000),
            init=[container("init", gpu=1, gpumem=10000)],
        )
    )
    assert out.scheduled
    assert usage_of(p).used_memory_mib == 10000
    assert not p.submit(pod("q7000", container(gpu=1, gpumem=7000))).scheduled
    assert p.submit(pod("q6000", container(gpu=1, gpumem=6000))).scheduled


def test_5_cores_run_out():
    p = pipeline(ONE_GPU)
    assert p.submit(pod("p0", container(gpu=1, gpumem=1000, gpucores=50))).scheduled
    assert p.submit(pod("p1", container(gpu=1, gpumem=1000, gpucores=50))).scheduled
    third = p.submit(pod("p2", container(gpu=1, gpumem=1000, gpucores=50)))
    assert third.filter.failed == {"node-1": "1/1 CardInsufficientCore"}


def test_6_memory_percentage_resolves_per_device():
    p = pipeline(node("node-1", [gpu("GPU-A100", memory_mib=81920, model="NVIDIA A100-SXM4-80GB")]))
    out = p.submit(pod("p", container(gpu=1, gpumem_percentage=50)))
    assert out.allocation.devices["NVIDIA"][0][0].memory_mib == 40960
    annotations = p.cluster.get_pod("default", "p")["metadata"]["annotations"]
    assert annotations["hami.io/vgpu-devices-allocated"] == "GPU-A100,NVIDIA,40960,0:;"


def test_7_type_filter_a10_does_not_select_a100():
    p = pipeline(
        node(
            "node-1",
            [
                gpu("GPU-A10", index=0, model="NVIDIA A10", memory_mib=23028),
                gpu("GPU-A100", index=1, model="NVIDIA A100-SXM4-80GB", memory_mib=81920),
            ],
        )
    )
    ann = {"nvidia.com/use-gputype": "A10"}
    first = p.submit(pod("p0", container(gpu=1, gpumem=20000), annotations=ann))
    assert first.allocation.devices["NVIDIA"][0][0].uuid == "GPU-A10"
    second = p.submit(pod("p1", container(gpu=1, gpumem=20000), annotations=ann))
    assert not second.scheduled
    assert second.filter.failed["node-1"] == "1/2 CardInsufficientMemory, 1/2 CardTypeMismatch"
    assert (
        second.filter.fits["node-1"].miss.result.device_reasons["GPU-A100"].value
        == "CardTypeMismatch"
    )


def test_8_split_count_two():
    p = pipeline(node("node-1", [gpu("GPU-A", split=2)]))
    assert p.submit(pod("p0", container(gpu=1, gpumem=100))).scheduled
    assert p.submit(pod("p1", container(gpu=1, gpumem=100))).scheduled
    third = p.submit(pod("p2", container(gpu=1, gpumem=100)))
    assert third.filter.failed == {"node-1": "1/1 CardTimeSlicingExhausted"}


@pytest.mark.parametrize("with_init", [False, True])
def test_9_quota_denies_at_admission(with_init):
    p = pipeline(
        node("node-1", [gpu("GPU-A", memory_mib=81920), gpu("GPU-B", index=1, memory_mib=81920)])
    )
    p.cluster.add_quota(
        {
            "metadata": {"name": "gpu-quota", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "24000"}},
        }
    )
    init = [{"name": "setup", "image": "busybox"}] if with_init else None
    out = p.submit(
        pod(
            "big",
            container("a", gpu=1, gpumem=16000),
            container("b", gpu=1, gpumem=16000),
            init=init,
            namespace="team",
        )
    )
    assert out.denied
    assert "gpu-quota" in out.denied and "limits.nvidia.com/gpumem 24000" in out.denied
    assert "this pod 32000" in out.denied


def test_10_16gi_as_mib_is_denied():
    p = pipeline(ONE_GPU)
    out = p.submit(pod("p", container(gpu=1, gpumem="16Gi")))
    assert out.denied
    assert "nvidia.com/gpumem" in out.denied and "'16Gi'" in out.denied


def test_11_spread_over_two_gpus_keeps_container_positions():
    p = pipeline(
        node("node-1", [gpu("GPU-A", index=0), gpu("GPU-B", index=1)]),
        config={"defaultSchedulerPolicy": {"gpuSchedulerPolicy": "spread"}},
    )
    out = p.submit(
        pod(
            "p",
            container("plain"),
            container("c2", gpu=1, gpumem=2500, gpucores=25),
            container("c3", gpu=1, gpumem=2500, gpucores=25),
        )
    )
    assert out.scheduled
    annotations = p.cluster.get_pod("default", "p")["metadata"]["annotations"]
    assert (
        annotations["hami.io/vgpu-devices-allocated"]
        == ";GPU-A,NVIDIA,2500,25:;GPU-B,NVIDIA,2500,25:;"
    )
    # kubelet's Allocate calls (the device plugin's Allocator) emptied every entry.
    assert annotations["hami.io/vgpu-devices-to-allocate"] == ";;;"
    assert annotations["hami.io/bind-phase"] == "success"


def test_largest_hint_never_suggests_a_request_that_still_fails():
    p = pipeline(ONE_GPU)
    assert p.submit(pod("a", container(gpu=1, gpumem=1000, gpucores=100))).scheduled
    b = p.submit(pod("b", container(gpu=1, gpumem=20000)))
    miss = b.filter.fits["node-1"].miss.result
    assert miss.largest_memory_mib is None  # compute is exhausted: no memory size would fit


def test_largest_hint_is_the_free_memory_of_the_best_device():
    p = pipeline(node("node-1", [gpu("GPU-A", index=0), gpu("GPU-B", index=1)]))
    assert p.submit(pod("a", container(gpu=1, gpumem=10000))).scheduled
    assert p.submit(pod("b", container(gpu=1, gpumem=4000))).scheduled
    big = p.submit(pod("big", container(gpu=1, gpumem=20000)))
    miss = big.filter.fits["node-1"].miss.result
    assert miss.largest_memory_mib == 12384
    two = p.submit(pod("two", container(gpu=2, gpumem=13000)))
    assert two.filter.fits["node-1"].miss.result.largest_memory_mib == 6384  # the 2nd best device
    assert p.submit(pod("exact", container(gpu=1, gpumem=12384))).scheduled
    three = p.submit(pod("three", container(gpu=2, gpumem=13000)))
    assert three.filter.fits["node-1"].miss.result.largest_memory_mib is None  # GPU-B is full


def test_quota_on_percent_memory_is_enforced_at_fit():
    p = pipeline(node("node-1", [gpu("GPU-A100", memory_mib=81920, model="NVIDIA A100-SXM4-80GB")]))
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "30000"}},
        }
    )
    out = p.submit(pod("half", container(gpu=1, gpumem_percentage=50), namespace="team"))
    assert not out.denied  # admission cannot know what 50 % is before a device is chosen
    assert out.filter.failed["node-1"] == (
        "ResourceQuotaNotFit (quota q: limits.nvidia.com/gpumem 30000, used 0, this pod 40960)"
    )
    assert p.submit(
        pod("third", container(gpu=1, gpumem_percentage=30), namespace="team")
    ).scheduled


def test_unknown_node_names_are_reported_not_guessed():
    p = pipeline(ONE_GPU)
    stored = p.cluster.add_pod(pod("p", container(gpu=1, gpumem=100)))
    result = p.scheduler.filter(stored, ["node-1", "node-new"])
    assert result.feasible == ("node-1",)
    assert result.failed == {"node-new": "NodeUnregistered (node not in the scheduler's cache)"}
    plain = p.cluster.add_pod(pod("plain", {"name": "c", "image": "x"}))
    assert p.scheduler.filter(plain, ["node-1", "node-new"]).feasible == ("node-1", "node-new")


def test_an_unreadable_allocation_fails_closed_and_is_logged(caplog):
    """Issue #12 item 2: a bound pod whose allocation was rewritten keeps its device."""
    p = pipeline(ONE_GPU)
    broken = pod("broken", container(gpu=1, gpumem=100), scheduler_name="hami-scheduler")
    broken["spec"]["nodeName"] = "node-1"
    broken["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "node-1",
        "hami.io/vgpu-devices-allocated": "GPU-A,NVIDIA,lots,0:;",
    }
    p.cluster.add_pod(broken)
    out = p.submit(pod("next", container(gpu=1, gpumem=100)))
    assert not out.scheduled
    assert "unreadable allocation, failing closed: pod default/broken" in caplog.text
    assert "holding GPU-A whole" in caplog.text
