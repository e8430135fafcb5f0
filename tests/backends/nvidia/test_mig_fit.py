"""MIG placement on the scheduler side (issue #17 items 1, 2, 6): profile choice (least
memory, then fewest slices), HAMi's placement order, ``CardMigTopologyInfeasible``,
fragmentation, no overlapping instances through binds and deletions (a hypothesis
property over the real scheduler), modes never mixed on one GPU, and the tenant who
forges the MIG annotation."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from attrs import evolve as attrs_evolve
from hami_nvidia import fit as nvfit
from hami_nvidia import mig
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.model import (
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    MigPlacement,
    MigProfile,
    MigSlot,
    NodeInfo,
    ReasonCode,
)
from hami_core.protocol import encode_inventory
from hami_core.protocol.inventory import decode_inventory
from hami_core.protocol.migallocations import decode_mig_allocations
from hami_core.scheduling.scheduler import Scheduler
from hami_core.webhook import Admission
from tests.builders import cluster, container, manager, pipeline, pod


def places(*pairs: tuple[int, int]) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(start=s, size=n) for s, n in pairs)


#: An A100-SXM4-80GB's profiles (NVIDIA's MIG user guide), as dynamic MIG offers them.
A100 = (
    MigProfile(name="1g.10gb", memory_mib=9856, cores_pct=15, slice_count=1,
               placements=places(*((i, 1) for i in range(7)))),
    MigProfile(name="1g.20gb", memory_mib=19968, cores_pct=15, slice_count=1,
               placements=places((0, 2), (2, 2), (4, 2), (6, 2))),
    MigProfile(name="2g.20gb", memory_mib=19968, cores_pct=29, slice_count=2,
               placements=places((0, 2), (2, 2), (4, 2))),
    MigProfile(name="3g.40gb", memory_mib=40192, cores_pct=43, slice_count=3,
               placements=places((0, 4), (4, 4))),
    MigProfile(name="4g.40gb", memory_mib=40192, cores_pct=58, slice_count=4,
               placements=places((0, 4))),
    MigProfile(name="7g.80gb", memory_mib=81152, cores_pct=100, slice_count=7,
               placements=places((0, 8))),
)  # fmt: skip


def mig_gpu(
    uuid: str = "GPU-m", *, index: int = 0, profiles: tuple[MigProfile, ...] = A100
) -> DeviceInfo:
    return DeviceInfo(
        uuid=uuid, vendor="NVIDIA", model="NVIDIA A100-SXM4-80GB", index=index, split_count=7,
        memory_mib=81920, cores_pct=100, mode="mig", mig_profiles=profiles,
    )  # fmt: skip


def held(*slots: tuple[str, int, int]) -> tuple[MigSlot, ...]:
    return tuple(MigSlot(profile=p, placement=MigPlacement(start=s, size=n)) for p, s, n in slots)


def fit(memory_mib: int, usage: DeviceUsage, **kw: Any):
    request = DeviceRequest(vendor="NVIDIA", count=1, memory_mib=memory_mib, **kw)
    node = NodeInfo(name="n", devices=(usage.device,))
    return nvfit.fit(request, node, [usage], {}, DevicePolicy.BINPACK)


@pytest.mark.parametrize(
    "memory, profile, placement",
    [
        (5000, "1g.10gb", (6, 1)),  # 1g from the top down (HAMi's order)
        (9856, "1g.10gb", (6, 1)),
        (12000, "1g.20gb", (6, 2)),  # 1g.20gb and 2g.20gb hold the same: fewer slices wins
        (30000, "3g.40gb", (4, 4)),  # 3g from the top down too
        (50000, "7g.80gb", (0, 8)),
    ],
)
def test_the_least_memory_then_the_fewest_slices_on_the_first_free_placement(
    memory, profile, placement
):
    result = fit(memory, DeviceUsage(device=mig_gpu()))
    (d,) = result.devices
    chosen = next(p for p in A100 if p.name == profile)
    assert d.mig == MigSlot(
        profile=profile, placement=MigPlacement(start=placement[0], size=placement[1])
    )
    # the slice books the instance's memory and cores, as HAMi's AddResourceUsage does
    assert (d.memory_mib, d.cores_pct) == (chosen.memory_mib, chosen.cores_pct)


def test_no_profile_with_a_free_placement_is_card_mig_topology_infeasible():
    usage = DeviceUsage(
        device=mig_gpu(), used_count=1, used_memory_mib=40192, mig_in_use=held(("3g.40gb", 4, 4))
    )
    assert fit(30000, usage).devices[0].mig.placement == MigPlacement(start=0, size=4)
    full = DeviceUsage(
        device=mig_gpu(),
        used_count=2,
        used_memory_mib=80384,
        mig_in_use=held(("3g.40gb", 4, 4), ("3g.40gb", 0, 4)),
    )
    result = fit(1000, full)
    assert not result.fits
    assert result.device_reasons == {"GPU-m": ReasonCode.CARD_MIG_TOPOLOGY_INFEASIBLE}
    assert result.summary(1) == "1/1 CardMigTopologyInfeasible"


def test_fragmentation_two_small_instances_can_block_every_large_one():
    # 1g instances at slices 0 and 4 leave 6 of 8 slices free but no 4g/7g placement and
    # no 3g placement: memory is there, the topology is not.
    usage = DeviceUsage(
        device=mig_gpu(),
        used_count=2,
        used_memory_mib=2 * 9856,
        mig_in_use=held(("1g.10gb", 0, 1), ("1g.10gb", 4, 1)),
    )
    assert usage.free_memory_mib > 40192
    result = fit(30000, usage)
    assert result.device_reasons == {"GPU-m": ReasonCode.CARD_MIG_TOPOLOGY_INFEASIBLE}
    # HAMi's top-down order for 1g keeps the low half whole: the same two pods placed by
    # the scheduler land at 6 and 5, and a 3g still fits at 0.
    first = fit(5000, DeviceUsage(device=mig_gpu())).devices[0]
    after_one = DeviceUsage(device=mig_gpu(), used_count=1, mig_in_use=(first.mig,))
    second = fit(5000, after_one).devices[0]
    assert [first.mig.placement.start, second.mig.placement.start] == [6, 5]
    after_two = DeviceUsage(device=mig_gpu(), used_count=2, mig_in_use=(first.mig, second.mig))
    assert fit(30000, after_two).devices[0].mig.placement == MigPlacement(start=0, size=4)


def test_a_named_profile_takes_exactly_that_profile_and_only_on_mig_gpus():
    request = {"custom": ((mig.PROFILE_KEY, "2g.20gb"),)}
    (d,) = fit(1, DeviceUsage(device=mig_gpu()), **request).devices
    assert d.mig.profile == "2g.20gb" and d.mig.placement.start == 0
    shim_gpu = DeviceInfo(
        uuid="GPU-s", vendor="NVIDIA", split_count=10, memory_mib=81920, cores_pct=100
    )
    result = fit(1, DeviceUsage(device=shim_gpu), **request)
    assert result.device_reasons == {"GPU-s": ReasonCode.CARD_TYPE_MISMATCH}


def test_modes_never_mix_on_one_gpu():
    # A shim request on a hami-core GPU gets a plain slice, never an instance.
    shim_gpu = DeviceInfo(
        uuid="GPU-s", vendor="NVIDIA", split_count=10, memory_mib=16384, cores_pct=100
    )
    (d,) = fit(4000, DeviceUsage(device=shim_gpu)).devices
    assert d.mig is None and d.memory_mib == 4000
    # A MIG GPU still holding a share without an instance (placed before its mode
    # changed) takes no one until that share ends.
    stale = DeviceUsage(device=mig_gpu(), used_count=1, used_memory_mib=4000)
    assert fit(4000, stale).device_reasons == {"GPU-m": ReasonCode.CARD_MIG_TOPOLOGY_INFEASIBLE}


def test_the_inventory_carries_hamis_mig_profiles_both_ways():
    encoded = encode_inventory([mig_gpu()])
    item = json.loads(encoded)[0]
    assert item["mode"] == "mig"
    assert item["migProfiles"][3] == {
        "name": "3g.40gb",
        "memoryMB": 40192,
        "core": 43,
        "sliceCount": 3,
        "placements": [{"start": 0, "size": 4}, {"start": 4, "size": 4}],
    }
    (back,) = decode_inventory(encoded, node="n", vendor="NVIDIA")
    assert back.mig_profiles == A100
    with pytest.raises(Exception, match="migProfiles\\[0\\]"):
        decode_inventory(
            '[{"id":"GPU-m","mode":"mig","migProfiles":[{"name":"1g.10gb","placements":[{"start":0,"size":0}]}]}]',
            node="n",
            vendor="NVIDIA",
        )


@pytest.mark.parametrize(
    "value, message",
    [
        (
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-m","profile":"1g.10gb"}]',
            "no placement",
        ),
        (
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-m","profile":"1g.10gb",'
            '"placement":{"start":0,"size":1},"migUUID":"MIG-x"}]',
            "partial runtime identity",
        ),
        (
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-m","profile":"1g.10gb","placement":{"start":0,"size":1}},'
            '{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-m","profile":"1g.10gb","placement":{"start":1,"size":1}}]',
            "duplicate MIG allocation for container 0 device 0",
        ),
        ("{}", "not a JSON array"),
    ],
)
def test_the_mig_annotation_follows_hamis_rules(value, message):
    with pytest.raises(Exception, match=message):
        decode_mig_allocations(value)


# -- through the real scheduler ----------------------------------------------------------


def mig_node(name: str = "node-m", gpus: int = 1) -> dict[str, Any]:
    devices = [mig_gpu(f"GPU-m{i}", index=i) for i in range(gpus)]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {"hami.io/node-nvidia-register": encode_inventory(devices)}},
        "status": {"allocatable": {"nvidia.com/gpu": str(7 * gpus)}},
    }  # fmt: skip


def submit(sched: Scheduler, c, name: str, memory: int, *, node: str = "node-m"):
    p = pod(name, container(gpu=1, gpumem=memory), scheduler_name="hami-scheduler")
    created = c.add_pod(p)
    meta = created["metadata"]
    try:
        sched.bind(meta["namespace"], meta["name"], uid=meta["uid"], node=node)
    except Exception as exc:  # no longer fits: the scheduler refuses the bind
        c.delete_pod(meta["namespace"], meta["name"])
        return str(exc)
    lock = c.get_node(node)["metadata"]["annotations"]["hami.io/mutex.lock"]
    c.remove_node_annotation(node, "hami.io/mutex.lock", value=lock)  # as the device plugin does
    return c.get_pod(meta["namespace"], meta["name"])


def instances(c) -> list[tuple[str, int, int, str]]:
    out = []
    for p in c.list_pods():
        ann = p["metadata"].get("annotations") or {}
        for a in decode_mig_allocations(ann.get("hami.io/vgpu-mig-allocations", "")):
            out.append((a.gpu_uuid, a.slot.placement.start, a.slot.placement.size, a.slot.profile))
    return out


def test_bind_writes_hamis_mig_allocations_and_the_profiles_memory():
    c = cluster(mig_node())
    sched = Scheduler(c, manager())
    bound = submit(sched, c, "a", 19000)
    ann = bound["metadata"]["annotations"]
    assert json.loads(ann["hami.io/vgpu-mig-allocations"]) == [
        {
            "containerIndex": 0,
            "deviceIndex": 0,
            "gpuUUID": "GPU-m0",
            "profile": "1g.20gb",
            "placement": {"start": 6, "size": 2},
        }
    ]
    assert ann["hami.io/vgpu-devices-allocated"] == "GPU-m0,NVIDIA,19968,15:;"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.just("add"), st.sampled_from([3000, 9856, 15000, 19968, 30000, 40192, 70000])
            ),
            st.tuples(st.just("del"), st.integers(min_value=0, max_value=20)),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_two_pods_never_get_overlapping_placements(steps):
    c = cluster(mig_node(gpus=2))
    sched = Scheduler(c, manager())
    n = 0
    for op, arg in steps:
        if op == "add":
            submit(sched, c, f"p{n}", arg)
            n += 1
        else:
            live = sorted(p["metadata"]["name"] for p in c.list_pods())
            if live:
                c.delete_pod("default", live[arg % len(live)])
        held_now = instances(c)
        for gpu in {h[0] for h in held_now}:
            mine = sorted((s, size) for g, s, size, _ in held_now if g == gpu)
            for (s1, n1), (s2, _n2) in itertools.pairwise(mine):
                assert s1 + n1 <= s2, f"overlap on {gpu}: {mine}"
        for _, start, size, profile in held_now:
            offered = next(p for p in A100 if p.name == profile)
            assert MigPlacement(start=start, size=size) in offered.placements


def test_a_live_pod_without_readable_instances_holds_its_mig_gpu_whole():
    c = cluster(mig_node())
    sched = Scheduler(c, manager())
    bound = submit(sched, c, "a", 5000)
    # The annotation is lost or unreadable (only the scheduler and device plugin may
    # write it; the webhook denies the tenant): fail closed, the GPU takes no one.
    c.patch_pod_metadata("default", "a", annotations={"hami.io/vgpu-mig-allocations": "not json"})
    assert bound is not None
    out = submit(sched, c, "b", 5000)
    assert isinstance(out, str) and "no longer fits" in out


def test_a_forged_instance_for_another_gpu_counts_nothing():
    c = cluster(mig_node(gpus=2))
    sched = Scheduler(c, manager())
    submit(sched, c, "a", 70000)  # 7g on one GPU
    ann = c.get_pod("default", "a")["metadata"]["annotations"]
    (a,) = decode_mig_allocations(ann["hami.io/vgpu-mig-allocations"])
    other = "GPU-m1" if a.gpu_uuid == "GPU-m0" else "GPU-m0"
    forged = ann["hami.io/vgpu-mig-allocations"].replace(a.gpu_uuid, other)
    c.patch_pod_metadata("default", "a", annotations={"hami.io/vgpu-mig-allocations": forged})
    # The device list names the first GPU: it is held whole; the other stays free.
    out = submit(sched, c, "b", 70000)
    assert not isinstance(out, str)
    assert (
        decode_mig_allocations(out["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])[
            0
        ].gpu_uuid
        == other
    )
    assert isinstance(submit(sched, c, "c", 5000), str)


SCHED = "system:serviceaccount:kube-system:hami-scheduler"
PLUGIN = "system:serviceaccount:kube-system:hami-device-plugin"


def test_a_tenant_may_not_write_the_mig_annotation_nor_pick_a_mig_uuid():
    adm = Admission(manager(), trusted_users=frozenset({SCHED, PLUGIN}))
    value = '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-m0","profile":"7g.80gb","placement":{"start":0,"size":8}}]'
    forged = pod(
        "evil", container(gpu=1, gpumem=5000), annotations={"hami.io/vgpu-mig-allocations": value}
    )
    out = adm.review(forged, user="alice")
    assert not out.allowed and out.reason == "SchedulerOwnedAnnotation"
    assert "hami.io/vgpu-mig-allocations" in out.message
    assert adm.review(forged, user=SCHED).allowed
    # the device plugin fills the runtime triple on UPDATE; a tenant may not
    old = pod(
        "p", container(gpu=1, gpumem=5000), annotations={"hami.io/vgpu-mig-allocations": value}
    )
    new = json.loads(json.dumps(old))
    new["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"] = value.replace(
        "7g.80gb", "1g.10gb"
    )
    assert not adm.review_update(old, new, user="alice").allowed
    assert adm.review_update(old, new, user=PLUGIN).allowed
    # nor name another tenant's MIG instance as its device
    c = container(gpu=1, gpumem=5000)
    c["env"] = [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "MIG-5a5a0000-0001-0000-0000-000000000001"}
    ]
    out = adm.review(pod("q", c), user="alice")
    assert not out.allowed and out.reason == "ProtectedEnv"


def test_seven_small_pods_fill_the_seven_1g_placements_and_the_eighth_is_refused():
    c = cluster(mig_node())
    sched = Scheduler(c, manager())
    for i in range(7):
        assert not isinstance(submit(sched, c, f"p{i}", 5000), str)
    assert sorted(s for _, s, _, _ in instances(c)) == [0, 1, 2, 3, 4, 5, 6]
    out = submit(sched, c, "p7", 5000)
    assert isinstance(out, str) and "CardTimeSlicingExhausted" in out  # count 7 = 7 instances
    c.delete_pod("default", "p3")
    again = submit(sched, c, "p8", 5000)
    (a,) = decode_mig_allocations(again["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"])
    assert a.slot.placement.start == 3  # the freed slice is reused


def test_mig_profiles_keys_are_read_case_insensitively_as_go_does():
    value = (
        '[{"id":"GPU-m","mode":"mig","MIGProfiles":[{"Name":"1g.10gb","MemoryMB":9856,'
        '"Core":15,"SliceCount":1,"Placements":[{"Start":2,"Size":1}]}]}]'
    )
    (d,) = decode_inventory(value, node="n", vendor="NVIDIA")
    assert d.mig_profiles == (
        MigProfile(
            name="1g.10gb",
            memory_mib=9856,
            cores_pct=15,
            slice_count=1,
            placements=(MigPlacement(start=2, size=1),),
        ),
    )


# -- the NVIDIA device plugin's mixed-strategy names (nvidia.com/mig-<profile>) ----------


def mixed(name: str, *resources: tuple[str, str], env: list[dict[str, str]] | None = None):
    c: dict[str, Any] = {"name": "main", "image": "x", "resources": {"limits": dict(resources)}}
    if env:
        c["env"] = env
    return pod(name, c)


def test_a_pod_written_for_the_mixed_strategy_gets_an_instance_of_its_profile():
    p = pipeline(mig_node())
    out = p.submit(mixed("m", ("nvidia.com/mig-2g.20gb", "1")))
    assert out.node == "node-m", out
    (slices,) = out.allocation.devices["NVIDIA"]
    assert [(d.mig.profile, d.memory_mib) for d in slices] == [("2g.20gb", 19968)]
    admitted = p.cluster.get_pod("default", "m")["spec"]["containers"][0]
    # kubelet sees only what this device plugin advertises; the profile lives in the env
    assert admitted["resources"]["limits"] == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0"}
    assert {"name": "HAMI_MIG_PROFILE", "value": "2g.20gb"} in admitted["env"]
    # a profile no GPU offers fits nowhere, with the reason
    none = p.submit(mixed("n", ("nvidia.com/mig-2g.10gb", "1")))
    assert none.node is None
    assert none.filter.failed == {"node-m": "1/1 CardMigTopologyInfeasible"}


@pytest.mark.parametrize(
    "resources, env, message",
    [
        (
            (("nvidia.com/mig-1g.10gb", "1"), ("nvidia.com/mig-3g.40gb", "1")),
            None,
            "several MIG profiles",
        ),
        ((("nvidia.com/mig-1g.10gb", "1"), ("nvidia.com/gpumem", "4000")), None, "not both"),
        (
            (("nvidia.com/mig-1g.10gb", "1"),),
            [{"name": "HAMI_MIG_PROFILE", "value": "7g.80gb"}],
            "contradicts nvidia.com/mig-1g.10gb",
        ),
        (
            (("nvidia.com/gpu", "1"),),
            [{"name": "HAMI_MIG_PROFILE", "value": "all"}],
            "not a MIG profile name",
        ),
    ],
)
def test_bad_mig_profile_requests_are_denied_naming_the_problem(resources, env, message):
    out = Admission(manager()).review(mixed("bad", *resources, env=env))
    assert not out.allowed and message in out.message


@pytest.mark.parametrize(
    "section, message",
    [
        (
            {"migProfileAllowlist": [{"models": ["A100"], "profiles": ["big"]}]},
            "'big' is not a MIG profile name",
        ),
        (
            {"migProfileAllowlist": [{"models": [], "profiles": ["1g.10gb"]}]},
            "migProfileAllowlist[0].models",
        ),
        ({"migProfileAllowlist": {"A100": "1g.10gb"}}, "nvidia.migProfileAllowlist: expected list"),
        ({"migReleaseGraceSeconds": -1}, "nvidia.migReleaseGraceSeconds: must be >= 0"),
    ],
)
def test_a_bad_mig_setting_stops_the_start_naming_the_key(section, message):
    from hami_core.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        manager({"nvidia": section})
    assert message in str(err.value)


def test_a_container_of_several_gpus_never_mixes_modes():
    # A hami-core node with one static MIG GPU beside two shared ones: a 2-GPU request
    # takes the two shared GPUs, never one of each; with only one shared GPU it does not fit.
    shared = [
        DeviceInfo(
            uuid=f"GPU-s{i}",
            vendor="NVIDIA",
            index=i,
            split_count=10,
            memory_mib=81920,
            cores_pct=100,
        )
        for i in range(2)
    ]
    static = attrs_evolve(mig_gpu("GPU-m"), index=2)
    request = DeviceRequest(vendor="NVIDIA", count=2, memory_mib=5000)
    node = NodeInfo(name="n", devices=(*shared, static))
    usage = [DeviceUsage(device=d) for d in (*shared, static)]
    got = nvfit.fit(request, node, usage, {}, DevicePolicy.SPREAD)
    assert sorted(d.uuid for d in got.devices) == ["GPU-s0", "GPU-s1"]
    busy = [DeviceUsage(device=shared[0], used_count=10), *usage[1:]]
    # one shared GPU left: two instances of the MIG GPU instead (HAMi's meaning of a
    # count on MIG GPUs, fit.several_instances), never one of each mode
    two = nvfit.fit(request, node, busy, {}, DevicePolicy.SPREAD)
    assert [d.uuid for d in two.devices] == ["GPU-m", "GPU-m"]
    assert len({d.mig for d in two.devices}) == 2 and all(d.mig for d in two.devices)
    # the MIG GPU's seven instances taken too: neither mode holds two
    full = held(*(("1g.10gb", i, 1) for i in range(7)))
    one_left = [*busy[:2], DeviceUsage(device=static, used_count=7, mig_in_use=full)]
    miss = nvfit.fit(request, node, one_left, {}, DevicePolicy.SPREAD)
    assert not miss.fits and miss.node_reason is ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST
    # the batch hook answers the same
    assert nvfit.fit_nodes(request, [(node, one_left, ())], {}, DevicePolicy.SPREAD) == [miss]


def test_every_allocation_records_the_mode_it_is_served_in():
    # the handbook's hami.io/device-allocated names each slice's mode (and MIG profile),
    # for people reading kubectl describe; the device plugin serves each pod in it
    from tests.builders import gpu, node

    mps = node("node-mps", [attrs_evolve(gpu("GPU-p"), mode="mps")])
    shim = node("node-shim", [gpu("GPU-s")])
    p = pipeline(mig_node(), mps, shim)
    got = {}
    for mode in ("mig", "mps", "hami-core"):
        out = p.submit(
            pod(
                f"p-{mode}",
                container(gpu=1, gpumem=5000),
                annotations={"nvidia.com/vgpu-mode": mode},
            )
        )
        ann = p.cluster.get_pod("default", f"p-{mode}")["metadata"]["annotations"]
        (entry,) = json.loads(ann["hami.io/device-allocated"])
        got[mode] = (out.node, entry["mode"], entry.get("migProfile"), entry["memory"])
    assert got == {
        "mig": ("node-m", "mig", "1g.10gb", 9856),
        "mps": ("node-mps", "mps", None, 5000),
        "hami-core": ("node-shim", "hami-core", None, 5000),
    }
