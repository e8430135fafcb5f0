"""HAMi 2.10 ``pkg/device/cambricon/device_test.go`` ``Test_setNodeLock``,
``Test_LockNode``, ``Test_ReleaseNodeLock``: what the ``cambricon.com/dsmlu.lock`` node
annotation is for, and how it is met here.

HAMi's Cambricon device stamps ``cambricon.com/dsmlu.lock`` (RFC 3339 time) on the node at
bind and refuses another bind there for 2 minutes; Cambricon's dynamic-sMLU device plugin
(Cambricon/cambricon-k8s-device-plugin, ``releaseNodeLock``) deletes the stamp after it
allocated, and tolerates its absence. The plugin finds the pod to allocate as the one
pending pod of the node with ``CAMBRICON_DSMLU_ASSIGNED: "false"`` and fails the
allocation when there are two (``getDynamicSmluCandidatePod``). That serialisation is
what the stamp buys; here the node lock ``hami.io/mutex.lock`` gives it (PROTOCOL.md §4:
held while its bound owner waits for allocation), so the stamp is not written."""

from __future__ import annotations

import datetime as dt

import pytest

from hami_core.cluster import MemoryCluster
from hami_core.errors import ConflictError
from hami_core.plugin import BackendManager
from hami_core.scheduling.scheduler import Scheduler

T0 = dt.datetime(2026, 11, 29, 9, 0, 0, tzinfo=dt.UTC)
VCORE, VMEM, COUNT = (
    "cambricon.com/mlu.smlu.vcore",
    "cambricon.com/mlu.smlu.vmemory",
    "cambricon.com/vmlu",
)


def _pod(c, name):
    limits = {COUNT: "1", VMEM: "20", VCORE: "25"}
    return c.add_pod(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "schedulerName": "hami-scheduler",
                "containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}],
            },
        }
    )


@pytest.fixture
def env():
    c = MemoryCluster()
    # a node run by Cambricon's own (dynamic-sMLU) device plugin: MLUs from capacity
    capacity = {VCORE: "200", VMEM: "192", COUNT: "200"}
    c.add_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "mlu", "annotations": {}},
            "status": {"capacity": capacity, "allocatable": capacity},
        }
    )
    clock = {"now": T0}
    sched = Scheduler(c, BackendManager.from_entry_points(disabled=[]), clock=lambda: clock["now"])
    return c, sched, clock


def test_one_pending_dsmlu_pod_per_node_at_a_time(env):
    """``Test_LockNode`` "node is already locked within 2 minutes": a second sMLU pod is
    not bound to the node while the first one waits for its allocation, so the device
    plugin never sees two candidate pods; the first carries ``CAMBRICON_DSMLU_ASSIGNED:
    "false"`` for the plugin (``Test_PatchAnnotations``)."""
    c, sched, _ = env
    first = _pod(c, "first")
    assert sched.bind("default", "first", uid=first["metadata"]["uid"], node="mlu") is not None
    ann = c.get_pod("default", "first")["metadata"]["annotations"]
    assert ann["CAMBRICON_DSMLU_ASSIGNED"] == "false"
    second = _pod(c, "second")
    with pytest.raises(ConflictError, match="node mlu is locked by default/first"):
        sched.bind("default", "second", uid=second["metadata"]["uid"], node="mlu")
    assert "nodeName" not in c.get_pod("default", "second")["spec"]
    node_ann = c.get_node("mlu")["metadata"]["annotations"]
    assert "cambricon.com/dsmlu.lock" not in node_ann


def test_the_next_pod_binds_once_the_first_is_allocated(env):
    """``Test_ReleaseNodeLock`` "lock present - successfully released" / ``Test_LockNode``
    "node is not locked": once the first pod's allocation is done (the lock released) the
    next sMLU pod binds."""
    c, sched, _ = env
    first = _pod(c, "first")
    sched.bind("default", "first", uid=first["metadata"]["uid"], node="mlu")
    c.patch_node_annotations("mlu", {"hami.io/mutex.lock": None})  # the device plugin's release
    second = _pod(c, "second")
    assert sched.bind("default", "second", uid=second["metadata"]["uid"], node="mlu") is not None
    assert c.get_pod("default", "second")["spec"]["nodeName"] == "mlu"


def test_the_next_pod_binds_once_the_first_runs(env):
    """Cambricon's plugin releases only its own stamp, never ``hami.io/mutex.lock``: once
    kubelet reports the first pod Running (its allocation done) the next sMLU pod binds,
    without waiting for the lock's expiry."""
    c, sched, _ = env
    first = _pod(c, "first")
    sched.bind("default", "first", uid=first["metadata"]["uid"], node="mlu")
    c.set_pod_phase("default", "first", "Running")
    second = _pod(c, "second")
    assert sched.bind("default", "second", uid=second["metadata"]["uid"], node="mlu") is not None


def test_an_expired_lock_is_taken_over(env):
    """``Test_LockNode`` "lock time expired": a lock past its expiry (300 s here, HAMi's
    dsmlu stamp 2 minutes) no longer holds the node."""
    c, sched, clock = env
    first = _pod(c, "first")
    sched.bind("default", "first", uid=first["metadata"]["uid"], node="mlu")
    clock["now"] = T0 + dt.timedelta(seconds=301)
    second = _pod(c, "second")
    assert sched.bind("default", "second", uid=second["metadata"]["uid"], node="mlu") is not None
    assert c.get_pod("default", "second")["spec"]["nodeName"] == "mlu"
    lock = c.get_node("mlu")["metadata"]["annotations"]["hami.io/mutex.lock"]
    assert lock.endswith(",default,second")  # taken over by the second pod


def test_a_tenant_pod_cannot_write_the_lock_away(env):
    """Tenant abuse: a pod carrying a forged ``CAMBRICON_DSMLU_ASSIGNED: "true"`` or a
    ``hami.io/mutex.lock`` annotation of its own does not get past the node lock (the lock
    is the node's annotation, which pods cannot write)."""
    c, sched, _ = env
    first = _pod(c, "first")
    sched.bind("default", "first", uid=first["metadata"]["uid"], node="mlu")
    second = _pod(c, "second")
    c.patch_pod_metadata(
        "default",
        "second",
        annotations={"CAMBRICON_DSMLU_ASSIGNED": "true", "hami.io/mutex.lock": ""},
    )
    with pytest.raises(ConflictError, match="locked by default/first"):
        sched.bind("default", "second", uid=second["metadata"]["uid"], node="mlu")
