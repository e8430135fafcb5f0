"""A node whose inventory names one device twice (a device plugin's bug, or a hand
edit): usage, allocations and kubelet's device IDs are all keyed by the device's ID,
so the second entry would be counted as the first and a pod of two devices could be
given one GPU twice. The vendor is marked unregistered on that node, with the ID
named; the scheduler keeps serving every other node (PROTOCOL.md §2)."""

from __future__ import annotations

import datetime as dt

from hami_core.facts.nodes import read_node
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node, pod

REGISTER = "hami.io/node-nvidia-register"
NOW = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)


def twice(name: str) -> dict:
    """Node ``name``: two GPUs, the second listed under the first one's ID."""
    return node(name, [gpu(f"GPU-{name}-0"), gpu(f"GPU-{name}-0", index=1)])


def test_a_device_listed_twice_marks_the_vendor_on_that_node():
    info = read_node(twice("node-a"), manager().device_types(), now=NOW)
    assert info.devices == ()
    assert info.unregistered == {"NVIDIA": f"{REGISTER}: device GPU-node-a-0 is listed twice"}


def test_the_scheduler_refuses_that_node_and_serves_the_others():
    healthy = node("node-b", [gpu("GPU-node-b-0"), gpu("GPU-node-b-1", index=1)])
    c = cluster(twice("node-a"), healthy)
    p = c.add_pod(pod("p", container(gpu=2, gpumem=1000)))
    result = Scheduler(c, manager()).filter(p)
    assert result.best() == "node-b"
    assert result.fits["node-a"].allocation is None
    assert "listed twice" in result.fits["node-a"].reason
    allocation = result.fits["node-b"].allocation
    assert allocation is not None
    assert sorted(d.uuid for d in allocation.all_devices()) == ["GPU-node-b-0", "GPU-node-b-1"]
