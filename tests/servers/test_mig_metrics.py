"""MIG series under HAMi 2.10's names (PROTOCOL.md §9): the scheduler's
``hami_node_gpu_mig_instance_info`` and the monitor's ``hami_mig_device_info``, one per
realised instance (the device plugin filled the runtime triple), only where the pod's own
device list names that GPU at that position (a forged entry makes no series)."""

from __future__ import annotations

import json

from hami_core.monitor import NodeMonitor
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.metrics import SchedulerMetrics
from hami_core.servers.monitor import create_monitor_app
from tests.backends.nvidia.test_mig_fit import mig_node, submit
from tests.builders import cluster, manager
from tests.monitor.support import Served, scrape
from tests.servers.test_scheduler_metrics import samples

KEY = "hami.io/vgpu-mig-allocations"


def realise(c, name: str, mig_uuid: str, gi: int, ci: int) -> None:
    """What the device plugin writes after creating the instance."""
    ann = c.get_pod("default", name)["metadata"]["annotations"]
    (entry,) = json.loads(ann[KEY])
    entry.update(migUUID=mig_uuid, gpuInstanceID=gi, computeInstanceID=ci)
    c.patch_pod_metadata("default", name, annotations={KEY: json.dumps([entry])})


def two_mig_pods():
    c = cluster(mig_node(gpus=2))
    sched = Scheduler(c, manager())
    submit(sched, c, "a", 30000)
    submit(sched, c, "b", 5000)
    realise(c, "a", "MIG-aaaa", 2, 0)  # b stays unrealised (not allocated yet)
    return c, sched


def test_the_scheduler_exports_each_realised_instance_with_its_placement():
    c, sched = two_mig_pods()
    m = samples(SchedulerMetrics(sched))
    (a,) = json.loads(c.get_pod("default", "a")["metadata"]["annotations"][KEY])
    series = m["hami_node_gpu_mig_instance_info"]
    assert series == [
        (
            {
                "node": "node-m",
                "device_uuid": a["gpuUUID"],
                "device_index": a["gpuUUID"][-1],
                "mig_uuid": "MIG-aaaa",
                "profile": "3g.40gb",
                "gpu_instance_id": "2",
                "compute_instance_id": "0",
                "placement_start": str(a["placement"]["start"]),
                "placement_size": "4",
            },
            1.0,
        )
    ]


def test_a_forged_instance_makes_no_series():
    c, sched = two_mig_pods()
    ann = c.get_pod("default", "a")["metadata"]["annotations"]
    (entry,) = json.loads(ann[KEY])
    other = "GPU-m1" if entry["gpuUUID"] == "GPU-m0" else "GPU-m0"
    entry["gpuUUID"] = other  # not the GPU its device list names
    c.patch_pod_metadata("default", "a", annotations={KEY: json.dumps([entry])})
    assert "hami_node_gpu_mig_instance_info" not in samples(SchedulerMetrics(sched))


def test_the_monitor_exports_each_realised_mig_device_of_a_container(tmp_path):
    c, _ = two_mig_pods()
    pods = c.list_pods()
    root = tmp_path / "containers"
    root.mkdir()
    monitor = NodeMonitor(manager(), root=str(root), node_name="node-m", pods=lambda: pods)
    served = Served(create_monitor_app(monitor))
    try:
        m = scrape(served.url)
    finally:
        served.close()
    (a,) = json.loads(c.get_pod("default", "a")["metadata"]["annotations"][KEY])
    assert m["hami_mig_device_info"] == [
        (
            {
                "namespace": "default",
                "pod": "a",
                "container": "main",
                "vdevice_index": "0",
                "device_uuid": a["gpuUUID"],
                "mig_uuid": "MIG-aaaa",
                "profile": "3g.40gb",
                "gpu_instance_id": "2",
                "compute_instance_id": "0",
            },
            1.0,
        )
    ]
