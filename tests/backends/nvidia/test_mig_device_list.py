"""The device list of a container with several MIG instances of one GPU, as HAMi 2.10
writes and reads it (issue: MIG leftovers, item 1).

HAMi's ``Fit`` takes a GPU in ``mig`` mode again for the same container until it holds no
further instance (``pkg/device/nvidia/device.go``: ``if dev.Mode == "mig" { i++ }``), so
``EncodePodSingleDevice`` names that GPU once per instance, the entries of one GPU next to
each other, each ``<GPU UUID>,NVIDIA,<profile memoryMB>,<profile core>:``;
``EncodeMigAllocations`` numbers them ``deviceIndex`` 0, 1, ... Its device plugin needs
as many entries as kubelet's device IDs (``Allocate``: "device number not matched") and
matches reservation ``deviceIndex`` i to entry i's GPU (``GetContainerDeviceStrArray``);
its scheduler takes a GPU's reservations in array order (``getNodesUsage``). So the GPU
must be named once per instance, and we write exactly HAMi's string; and HAMi's own
string, read by our scheduler, device plugin and monitor, gives the right instances."""

from __future__ import annotations

import json
from typing import Any

from hami_core.monitor import NodeMonitor
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.monitor import create_monitor_app
from tests.backends.nvidia.test_mig_mixed_fit import node
from tests.builders import cluster, manager, pod
from tests.monitor.support import Served, scrape

MIG = "hami.io/vgpu-mig-allocations"
ALLOCATED = "hami.io/vgpu-devices-allocated"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"

#: What HAMi 2.10 writes for three 1g.10gb instances of GPU-m0 in one container (an
#: A100-80GB's 1g.10gb: memoryMB 9856, core 15; 1g placements from the top down).
HAMI_LIST = "GPU-m0,NVIDIA,9856,15:GPU-m0,NVIDIA,9856,15:GPU-m0,NVIDIA,9856,15:;"
HAMI_MIG = (
    '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-m0","profile":"1g.10gb",'
    '"placement":{"start":6,"size":1}},'
    '{"containerIndex":0,"deviceIndex":1,"gpuUUID":"GPU-m0","profile":"1g.10gb",'
    '"placement":{"start":5,"size":1}},'
    '{"containerIndex":0,"deviceIndex":2,"gpuUUID":"GPU-m0","profile":"1g.10gb",'
    '"placement":{"start":4,"size":1}}]'
)


def profile_pod(name: str, n: int, profile: str = "1g.10gb") -> dict[str, Any]:
    """``nvidia.com/mig-<profile>: n`` as the webhook leaves it (PROTOCOL.md §1)."""
    c = {
        "name": "main",
        "image": "x",
        "resources": {"limits": {"nvidia.com/gpu": str(n), "nvidia.com/gpucores": "0"}},
        "env": [{"name": "HAMI_MIG_PROFILE", "value": profile}],
    }
    return pod(name, c, scheduler_name="hami-scheduler")


def bind(c, sched: Scheduler, p: dict[str, Any]) -> dict[str, Any] | str:
    created = c.add_pod(p)
    meta = created["metadata"]
    try:
        sched.bind("default", meta["name"], uid=meta["uid"], node="node-m")
    except Exception as exc:  # no longer fits: the scheduler refuses the bind
        c.delete_pod("default", meta["name"])
        return str(exc)
    lock = c.get_node("node-m")["metadata"]["annotations"]["hami.io/mutex.lock"]
    c.remove_node_annotation("node-m", "hami.io/mutex.lock", value=lock)
    return c.get_pod("default", meta["name"])


def test_three_instances_of_one_gpu_are_written_exactly_as_hami_writes_them():
    c = cluster(node(gpus=1))
    got = bind(c, Scheduler(c, manager()), profile_pod("three", 3))
    assert isinstance(got, dict), got
    ann = got["metadata"]["annotations"]
    assert ann[TO_ALLOCATE] == HAMI_LIST
    assert ann[ALLOCATED] == HAMI_LIST
    assert ann[MIG] == HAMI_MIG


def test_instances_over_two_gpus_keep_each_gpus_entries_together():
    # Spread puts the second instance on the other GPU; the list still names each GPU's
    # instances side by side, deviceIndex in list order, as HAMi's encoder does.
    c = cluster(node(gpus=2))
    got = bind(c, Scheduler(c, manager()), profile_pod("three", 3))
    assert isinstance(got, dict), got
    ann = got["metadata"]["annotations"]
    (entry,) = decode_pod_devices(ann[ALLOCATED])
    uuids = [d.uuid for d in entry]
    assert sorted(uuids) == ["GPU-m0", "GPU-m0", "GPU-m1"]
    assert uuids in (["GPU-m0", "GPU-m0", "GPU-m1"], ["GPU-m1", "GPU-m0", "GPU-m0"])
    reservations = json.loads(ann[MIG])
    assert [(r["deviceIndex"], r["gpuUUID"]) for r in reservations] == list(enumerate(uuids))
    per_gpu = {
        u: [r["placement"]["start"] for r in reservations if r["gpuUUID"] == u] for u in uuids
    }
    assert per_gpu["GPU-m0"] == [6, 5] and per_gpu["GPU-m1"] == [6]


def hami_placed_pod(c) -> None:
    """A pod HAMi's scheduler could have bound: its exact annotations, three instances."""
    p = profile_pod("hami", 3)
    p["spec"]["nodeName"] = "node-m"
    p["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "node-m",
        "hami.io/bind-phase": "success",
        TO_ALLOCATE: ";",
        ALLOCATED: HAMI_LIST,
        MIG: HAMI_MIG,
    }
    c.add_pod(p)
    c.set_pod_phase("default", "hami", "Running")


def test_hamis_list_holds_its_three_instances_in_our_scheduler():
    c = cluster(node(gpus=1))
    hami_placed_pod(c)
    sched = Scheduler(c, manager())
    # seven 1g.10gb on the GPU, three held: five more do not fit, four do, on the others
    assert isinstance(bind(c, sched, profile_pod("five", 5)), str)
    four = bind(c, sched, profile_pod("four", 4))
    assert isinstance(four, dict), four
    starts = [r["placement"]["start"] for r in json.loads(four["metadata"]["annotations"][MIG])]
    assert sorted(starts) == [0, 1, 2, 3]
    assert isinstance(bind(c, sched, profile_pod("one", 1)), str)


def test_the_monitor_reads_each_instance_of_hamis_list_at_its_position(tmp_path):
    c = cluster(node(gpus=1))
    hami_placed_pod(c)
    realised = json.loads(HAMI_MIG)
    for n, r in enumerate(realised):  # what the device plugin adds after Allocate
        r.update(migUUID=f"MIG-{n}", gpuInstanceID=10 + n, computeInstanceID=0)
    c.patch_pod_metadata("default", "hami", annotations={MIG: json.dumps(realised)})
    pods = c.list_pods()
    root = tmp_path / "containers"
    root.mkdir()
    monitor = NodeMonitor(manager(), root=str(root), node_name="node-m", pods=lambda: pods)
    served = Served(create_monitor_app(monitor))
    try:
        m = scrape(served.url)
    finally:
        served.close()
    got = sorted(
        (s["vdevice_index"], s["device_uuid"], s["mig_uuid"], s["gpu_instance_id"])
        for s, _ in m["hami_mig_device_info"]
    )
    assert got == [("0", "GPU-m0", "MIG-0", "10"), ("1", "GPU-m0", "MIG-1", "11"),
                   ("2", "GPU-m0", "MIG-2", "12")]  # fmt: skip


def hami_test_node(mode: str, placements: list[int]) -> dict[str, Any]:
    """HAMi's ``singleNvidiaGPUNode`` (``pkg/scheduler/mig_allocation_test.go``): GPU-a,
    count 7, 40960 MiB, in ``mode``; in mig mode one profile ``1g.5gb`` (5120 MiB, core
    14) at the given starts."""
    gpu: dict[str, Any] = {
        "id": "GPU-a", "count": 7, "devmem": 40960, "devcore": 100,
        "type": "NVIDIA A100-PCIE-40GB", "health": True, "mode": mode,
    }  # fmt: skip
    if mode == "mig":
        gpu["migProfiles"] = [
            {"name": "1g.5gb", "memoryMB": 5120, "core": 14, "sliceCount": 1,
             "placements": [{"start": s, "size": 1} for s in placements]}
        ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "node-m",
            "annotations": {"hami.io/node-nvidia-register": json.dumps([gpu])},
        },
        "status": {"allocatable": {"nvidia.com/gpu": "7"}},
    }


def two_gpus_of_4000(mode: str = "mig") -> dict[str, Any]:
    """HAMi's ``twoNvidiaDeviceRequest``: ``nvidia.com/gpu: 2``, ``gpumem: 4000``, with
    ``nvidia.com/vgpu-mode``."""
    c = {
        "name": "workload",
        "image": "x",
        "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4000"}},
    }
    return pod(
        "two-nvidia-devices",
        c,
        scheduler_name="hami-scheduler",
        annotations={"nvidia.com/vgpu-mode": mode},
    )


def test_a_count_of_two_on_one_mig_gpu_takes_two_placements_as_hami_does():
    # TestFitInDevicesAllowsMultipleMigPlacementsOnSingleGPU: two distinct placements on
    # GPU-a; the device list HAMi writes for them
    c = cluster(hami_test_node("mig", list(range(7))))
    got = bind(c, Scheduler(c, manager()), two_gpus_of_4000())
    assert isinstance(got, dict), got
    ann = got["metadata"]["annotations"]
    assert ann[ALLOCATED] == "GPU-a,NVIDIA,5120,14:GPU-a,NVIDIA,5120,14:;"
    assert json.loads(ann[MIG]) == [
        {"containerIndex": 0, "deviceIndex": 0, "gpuUUID": "GPU-a", "profile": "1g.5gb",
         "placement": {"start": 6, "size": 1}},
        {"containerIndex": 0, "deviceIndex": 1, "gpuUUID": "GPU-a", "profile": "1g.5gb",
         "placement": {"start": 5, "size": 1}},
    ]  # fmt: skip


def test_a_count_of_two_with_one_free_placement_is_card_mig_topology_infeasible():
    # TestFitInDevicesRejectsInsufficientMigPlacementsOnSingleGPU
    from tests.builders import pipeline

    p = pipeline(hami_test_node("mig", [6]))
    out = p.submit(two_gpus_of_4000())
    assert out.node is None
    assert out.filter.failed == {"node-m": "1/1 CardMigTopologyInfeasible"}


def test_a_count_of_two_on_one_shared_gpu_is_still_node_insufficient_device():
    # TestFitInDevicesRetainsPhysicalCountCheckForNonMigGPU; and a pod that accepts only
    # hami-core never gets MIG instances for its count
    from tests.builders import pipeline

    p = pipeline(hami_test_node("hami-core", []))
    out = p.submit(two_gpus_of_4000("hami-core"))
    assert out.node is None and out.filter.failed == {"node-m": "NodeInsufficientDevice"}
    m = pipeline(hami_test_node("mig", list(range(7))))
    refused = m.submit(two_gpus_of_4000("hami-core"))
    assert refused.node is None, refused


def hami_bound(c, reservations: str, listed: str = "GPU-a,NVIDIA,5120,14:;") -> None:
    """HAMi's ``pod-1`` bound to the node with ``reservations`` as its MIG annotation."""
    c_ = {
        "name": "main",
        "image": "x",
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}},
    }
    p = pod("pod-1", c_, scheduler_name="hami-scheduler")
    p["spec"]["nodeName"] = "node-m"
    p["metadata"]["annotations"] = {
        "hami.io/vgpu-node": "node-m",
        ALLOCATED: listed,
        MIG: reservations,
    }
    c.add_pod(p)
    c.set_pod_phase("default", "pod-1", "Running")


def test_a_realised_reservation_is_held_with_its_runtime_identity():
    # TestGetNodesUsageRestoresMigAllocationByProfileAndPlacement: 1g.5gb at 6, MIG-a,
    # GI 7, CI 0 restored; the one placement is then taken
    from hami_core.servers.metrics import SchedulerMetrics
    from tests.servers.test_scheduler_metrics import samples

    c = cluster(hami_test_node("mig", [6]))
    hami_bound(
        c,
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
        '"placement":{"start":6,"size":1},"migUUID":"MIG-a","gpuInstanceID":7,'
        '"computeInstanceID":0}]',
    )
    sched = Scheduler(c, manager())
    (series,) = samples(SchedulerMetrics(sched))["hami_node_gpu_mig_instance_info"]
    labels = series[0]
    assert (labels["mig_uuid"], labels["profile"], labels["gpu_instance_id"]) == (
        "MIG-a",
        "1g.5gb",
        "7",
    )
    assert (labels["compute_instance_id"], labels["placement_start"]) == ("0", "6")
    refused = bind(c, sched, two_gpus_of_4000())
    assert isinstance(refused, str) and "CardMigTopologyInfeasible" in refused


def test_reservations_beyond_the_device_list_are_held_too():
    # TestGetNodesUsageRestoresUnconsumedMigReservations: one list entry, reservations at
    # 6 and 5: both held (fail closed), so a pod of one instance finds no placement
    from tests.builders import pipeline

    p = pipeline(hami_test_node("mig", [5, 6]))
    hami_bound(
        p.cluster,
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
        '"placement":{"start":6,"size":1}},'
        '{"containerIndex":0,"deviceIndex":1,"gpuUUID":"GPU-a","profile":"1g.5gb",'
        '"placement":{"start":5,"size":1}}]',
    )
    c_ = {
        "name": "main",
        "image": "x",
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}},
    }
    out = p.submit(pod("next", c_))
    assert out.node is None
    assert out.filter.failed == {"node-m": "1/1 CardMigTopologyInfeasible"}
