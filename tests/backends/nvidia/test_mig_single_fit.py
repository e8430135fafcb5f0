"""The ``single`` MIG strategy on the scheduler side (issue #17 item 1): a node whose
device plugin runs ``migstrategy: single`` publishes each MIG instance as a device
(``migdevices.instance_devices``), so ``nvidia.com/gpu: N`` takes N distinct instances,
from one GPU or several; never two pods on one instance (through binds and deletions, a
hypothesis property over the real scheduler); more than the free instances is the count
reason; the tenant who names an instance or forges the MIG annotation gains nothing."""

from __future__ import annotations

import json
from typing import Any

import attrs
from hami_nvidia.migdevices import instance_devices
from hami_nvidia.nvml_mig import NvmlMigInstance, NvmlMigProfile
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.model import DeviceInfo
from hami_core.protocol import encode_inventory
from hami_core.protocol.migallocations import decode_mig_allocations
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, manager, pipeline, pod

ONE_G = NvmlMigProfile(
    profile_id=0, name="1g.10gb", slice_count=1, instance_count=7, memory_mib=9856,
    multiprocessors=14, placements=tuple((i, 1) for i in range(7)),
)  # fmt: skip


@attrs.define
class StaticNvml:
    """What NVML reports of GPUs an administrator cut into 1g.10gb instances."""

    starts: dict[int, list[int]]

    def mig_profiles(self, index: int) -> list[NvmlMigProfile]:
        return [ONE_G]

    def mig_instances(self, index: int) -> list[NvmlMigInstance]:
        return [
            NvmlMigInstance(
                gpu_instance_id=s + 1, profile_id=0, start=s, size=1, compute_instance_id=0,
                mig_uuid=f"MIG-{index:04d}-{s:04d}",
            )
            for s in self.starts[index]
        ]  # fmt: skip


def single_node(name: str = "node-s", starts: dict[int, list[int]] | None = None) -> dict[str, Any]:
    """A node whose device plugin publishes its instances under the single strategy."""
    starts = starts or {0: [0, 1, 2], 1: [0, 1, 2]}
    nvml = StaticNvml(starts)
    devices = [
        d
        for i in sorted(starts)
        for d in instance_devices(
            DeviceInfo(
                uuid=f"GPU-{i}", vendor="NVIDIA", model="NVIDIA A100-SXM4-80GB", index=i,
                split_count=10, memory_mib=81920, cores_pct=100, mode="mig",
            ),
            nvml,  # type: ignore[arg-type]
        )
    ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-nvidia-register": encode_inventory(devices)},
        },
        "status": {"allocatable": {"nvidia.com/gpu": str(len(devices))}},
    }


def submit(sched: Scheduler, c, name: str, n: int, **annotations: str):
    p = pod(name, container(gpu=n), scheduler_name="hami-scheduler", annotations=annotations)
    meta = c.add_pod(p)["metadata"]
    try:
        sched.bind(meta["namespace"], meta["name"], uid=meta["uid"], node="node-s")
    except Exception as exc:
        c.delete_pod(meta["namespace"], meta["name"])
        return str(exc)
    lock = c.get_node("node-s")["metadata"]["annotations"]["hami.io/mutex.lock"]
    c.remove_node_annotation("node-s", "hami.io/mutex.lock", value=lock)
    return c.get_pod(meta["namespace"], meta["name"])


def held(p: dict[str, Any]) -> list[str]:
    value = p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    return [d.split(",")[0] for d in value.rstrip(";").split(":") if d]


def test_a_count_only_pod_gets_n_instances_booked_at_their_memory():
    p = pipeline(single_node())
    out = p.submit(pod("a", container(gpu=2)))
    assert out.node == "node-s", out
    (slices,) = out.allocation.devices["NVIDIA"]
    assert len({d.uuid for d in slices}) == 2 and all(d.uuid.startswith("MIG-") for d in slices)
    assert [(d.memory_mib, d.cores_pct, d.mig.profile) for d in slices] == [
        (9856, 100, "1g.10gb")
    ] * 2
    # the container is told its instances' UUIDs and nothing of the shim
    alloc = out.allocations["main"]
    assert alloc.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(d.uuid for d in slices)}
    assert alloc.mounts == ()
    # memory it cannot have on an instance: the memory reason, on every instance
    big = p.submit(pod("big", container(gpu=1, gpumem=20000)))
    assert big.node is None
    assert big.filter.failed == {
        "node-s": "4/6 CardInsufficientMemory, 2/6 CardTimeSlicingExhausted"
    }


def test_n_instances_span_gpus_when_no_gpu_has_n_free_and_holes_are_reused():
    c = cluster(single_node())
    sched = Scheduler(c, manager())
    a = submit(sched, c, "a", 2)
    b = submit(sched, c, "b", 2)
    third = submit(sched, c, "c", 2)
    assert not isinstance(third, str), third
    everything = held(a) + held(b) + held(third)
    assert len(set(everything)) == 6  # never one instance twice
    # 3 instances per GPU, 3 pods of 2: some pod's instances are on both GPUs
    parents = [{u[: len("MIG-0000")] for u in held(x)} for x in (a, b, third)]
    assert {"MIG-0000", "MIG-0001"} in parents
    more = submit(sched, c, "d", 1)
    assert isinstance(more, str) and "CardTimeSlicingExhausted" in more
    c.delete_pod("default", "b")
    again = submit(sched, c, "e", 2)
    assert sorted(held(again)) == sorted(held(b))


def test_more_instances_than_free_is_the_count_reason():
    c = cluster(single_node())
    sched = Scheduler(c, manager())
    submit(sched, c, "a", 5)
    out = submit(sched, c, "b", 2)
    assert isinstance(out, str) and "AllocatedCardsInsufficientRequest" in out
    p = pipeline(single_node())
    many = p.submit(pod("many", container(gpu=7)))
    assert many.node is None and many.filter.failed == {"node-s": "NodeInsufficientDevice"}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(min_value=1, max_value=4)),
            st.tuples(st.just("del"), st.integers(min_value=0, max_value=20)),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_two_pods_never_hold_one_instance(steps):
    c = cluster(single_node())
    sched = Scheduler(c, manager())
    for n, (op, arg) in enumerate(steps):
        if op == "add":
            free = 6 - sum(len(held(p)) for p in c.list_pods())
            out = submit(sched, c, f"p{n}", arg)
            assert isinstance(out, str) == (arg > free), (arg, free, out)
        else:
            live = sorted(p["metadata"]["name"] for p in c.list_pods())
            if live:
                c.delete_pod("default", live[arg % len(live)])
        owned = [u for p in c.list_pods() for u in held(p)]
        assert len(owned) == len(set(owned))
        for p in c.list_pods():  # the MIG annotation names each pod's own instances
            ann = p["metadata"]["annotations"]
            migs = decode_mig_allocations(ann["hami.io/vgpu-mig-allocations"])
            assert [m.gpu_uuid for m in migs] == held(p)


def test_the_tenant_who_names_an_instance_or_forges_the_mig_annotation_gains_nothing():
    c = cluster(single_node())
    sched = Scheduler(c, manager())
    a = submit(sched, c, "a", 1)
    (mine,) = held(a)
    # naming a held instance: the UUID filter only narrows the choice, it frees nothing
    out = submit(sched, c, "b", 1, **{"nvidia.com/use-gpuuuid": mine})
    assert isinstance(out, str) and "CardTimeSlicingExhausted" in out
    # rewriting its own MIG annotation to another instance neither frees its own nor
    # takes the other: what a pod holds is its device list
    other = "MIG-0001-0002"
    ann = a["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"]
    c.patch_pod_metadata(
        "default", "a", annotations={"hami.io/vgpu-mig-allocations": ann.replace(mine, other)}
    )
    again = submit(sched, c, "c", 1, **{"nvidia.com/use-gpuuuid": mine})
    assert isinstance(again, str) and "CardTimeSlicingExhausted" in again
    takes = submit(sched, c, "d", 1, **{"nvidia.com/use-gpuuuid": other})
    assert held(takes) == [other]
    # and the webhook denies a tenant's MIG annotation at CREATE
    from hami_core.webhook import Admission

    forged = pod("e", container(gpu=1), annotations={"hami.io/vgpu-mig-allocations": ann})
    review = Admission(manager()).review(forged, user="alice")
    assert not review.allowed and review.reason == "SchedulerOwnedAnnotation"
    assert json.loads(ann)[0]["gpuUUID"] == mine
