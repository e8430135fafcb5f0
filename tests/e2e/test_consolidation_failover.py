"""Continuous consolidation across a failover, on the real 1.20 control plane: two
``hami scheduler --consolidation`` replicas (the e2e stack's own election), kube-scheduler,
kube-controller-manager's Deployment, ReplicaSet and disruption controllers, and a fake
node whose "kubelet" is this test.

One node of two 16000 MiB GPUs, each holding a replica of Deployment ``fill-a`` (6000
MiB, 30 %) and one of ``fill-b`` (2000 MiB, 20 %), each Deployment under a
PodDisruptionBudget allowing one disruption; a pod asking a whole GPU needs both pods of
one GPU moved beside the other two: a plan of two evictions, the larger pod first.

The leader is stopped between them by the API server itself: ``fill-b``'s budget is
changed while the disruption controller is down, so the Eviction API answers 429 ("still
being processed") while the status the planner reads allows one. The leader evicts the
``fill-a`` pod, is refused the ``fill-b`` one and waits on it; it is killed then. The
other replica takes over and reads the plan in progress from the ledger (without it, the
pending pod's nomination would read as preemption's and be left alone); once the budget
is processed it makes the one move left: two evictions in all, by two leaders, for one
plan; the pending pod binds on the GPU freed; the replacements come back beside the
others and nobody else is evicted. The first move's replacement is created while the
new leader takes over, before its move: it must not settle in the room half freed
(spread prefers that GPU); the filter holds it, as the ledger lists the pod still to
move (docs/consolidation.md, *Carrying a plan out*).
"""

from __future__ import annotations

import contextlib
import time

import pytest
from kubernetes import client

from hami_core.defrag.apply import DEFRAGMENTED
from hami_core.defrag.continuous import PERIOD_S
from tests.builders import gpu
from tests.e2e.hami_stack import HamiStack
from tests.e2e.test_consolidation import (
    MIB,
    NS,
    PDBS,
    _allowed,
    _events,
    _finalize,
    _gpu_spec,
    _gpus,
    _ledger,
    _pods,
    _raw,
    _ready,
)
from tests.e2e.test_scheduler import add_gpu_node, unique

LEDGER = f"{NS}/{unique('failover-ledger')}"  # this module's record alone
CONTROLLERS = ("deployment", "replicaset", "disruption")


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    control_plane.reset()
    control_plane.start_controller_manager(controllers=CONTROLLERS)
    stack = HamiStack(control_plane, tmp_path_factory.mktemp("hami"))
    for name in ("hami-a", "hami-b"):
        stack.extra_args[name] = (
            "--consolidation",
            "--consolidation-after",
            "2",
            "--consolidation-ledger",
            LEDGER,
        )
    stack.start(replicas=("hami-a", "hami-b"))  # hami-a leads
    api = control_plane.api_client()
    yield client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api), stack
    # what a failed test left: its Deployments would be recreated by the next module's
    # controller manager, filling that module's cluster
    for app in ("fill-a", "fill-b"):
        with contextlib.suppress(client.ApiException):
            client.CustomObjectsApi(api).delete_namespaced_custom_object(*PDBS, app)
        with contextlib.suppress(client.ApiException):
            client.AppsV1Api(api).delete_namespaced_deployment(app, NS)
    with contextlib.suppress(client.ApiException):
        client.AppsV1Api(api).delete_collection_namespaced_replica_set(NS)
        client.CoreV1Api(api).delete_collection_namespaced_pod(NS, grace_period_seconds=0)
    control_plane.stop_process("kube-controller-manager")
    stack.stop()
    control_plane.reset()


def _fill(control_plane, core, apps, node, name, *, mib, cores, bound):
    """Deployment ``name``: 2 replicas pinned to ``node``, each on its own GPU (spread);
    returns once ``bound`` pods of tier filler hold GPUs."""
    template = _gpu_spec(mib, cores)
    template["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    apps.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {
                        "labels": {"app": name, "tier": "filler"},
                        "annotations": {"hami.io/gpu-scheduler-policy": "spread"},
                    },
                    "spec": template["spec"],
                },
            },
        },
    )
    return control_plane.wait_for(
        lambda: len(ps := [p for p in _pods(core, "tier=filler") if _gpus(p)]) == bound and ps,
        timeout=90,
        message=f"{bound} fillers bound",
    )


def _budget(app, max_unavailable):
    return {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app},
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": {"app": app}}},
    }


def _moved(core, fillers):
    return sorted(
        e.involved_object.name
        for e in _events(core, DEFRAGMENTED)
        if e.involved_object.name in fillers and f"Moved for {NS}/big" in e.message
    )


def test_a_plan_in_progress_survives_a_failover_without_a_second_eviction(control_plane, cluster):
    core, apps, pdbs, stack = cluster
    node = unique("failover")
    add_gpu_node(
        control_plane, node, [gpu(f"GPU-{node}-{i}", index=i, memory_mib=MIB) for i in range(2)]
    )
    _fill(control_plane, core, apps, node, "fill-a", mib=6000, cores=30, bound=2)
    fillers = {
        p["metadata"]["name"]: p
        for p in _fill(control_plane, core, apps, node, "fill-b", mib=2000, cores=20, bound=4)
    }
    by_gpu = {}
    for p in fillers.values():
        (g,) = _gpus(p)
        by_gpu.setdefault(g, []).append(p["metadata"]["labels"]["app"])
    assert sorted(map(sorted, by_gpu.values())) == [["fill-a", "fill-b"]] * 2, by_gpu
    for name in fillers:
        _ready(core, name)
    for app in ("fill-a", "fill-b"):
        pdbs.create_namespaced_custom_object(*PDBS, _budget(app, 1))
    control_plane.wait_for(
        lambda: _allowed(pdbs, "fill-a") == _allowed(pdbs, "fill-b") == 1,
        message="each budget allows one disruption",
    )
    # fill-b's budget changed while the disruption controller is down: its status still
    # allows one, but the Eviction API refuses until the change is processed
    control_plane.stop_process("kube-controller-manager")
    pdbs.patch_namespaced_custom_object(
        *PDBS,
        "fill-b",
        {"spec": {"maxUnavailable": "50%"}},
        _content_type="application/merge-patch+json",
    )
    stale = pdbs.get_namespaced_custom_object(*PDBS, "fill-b")
    assert stale["status"]["observedGeneration"] < stale["metadata"]["generation"]

    core.create_namespaced_pod(NS, {**_gpu_spec(MIB, 100), "metadata": {"name": "big"}})
    big_uid = _raw(core, "big")["metadata"]["uid"]
    first = control_plane.wait_for(
        lambda: _moved(core, fillers), timeout=60, message="the leader's first eviction"
    )
    stack.kill("hami-a")  # refused fill-b's eviction, it was waiting: the plan is half done
    assert len(first) == 1 and fillers[first[0]]["metadata"]["labels"]["app"] == "fill-a"
    assert _raw(core, first[0])["metadata"].get("deletionTimestamp")  # evicted, not deleted
    assert not [
        n for n in fillers if n != first[0] and _raw(core, n)["metadata"].get("deletionTimestamp")
    ]
    assert _raw(core, "big")["status"].get("nominatedNodeName") == node  # its room held
    record = _ledger(core, LEDGER).plans[big_uid]  # the plan in progress, for the next leader
    assert record.node == node and [s.pod for s in record.steps] == [f"{NS}/{first[0]}"]
    (beside,) = [  # the pod still to move: fill-b's on the GPU being emptied
        p for n, p in fillers.items() if n != first[0] and _gpus(p) == _gpus(fillers[first[0]])
    ]
    assert record.to_move == [beside["metadata"]["uid"]]

    # hami-b's worker reads the ledger every period, leading or not: its filter holds
    # the room the plan freed so far (the pod still to move counts as leaving)
    time.sleep(PERIOD_S + 1)
    # the controllers back: fill-b's budget processed, the evicted pod's replacement
    # created at once, filtered by hami-b before it leads or moves anything
    control_plane.start_controller_manager(controllers=CONTROLLERS)
    control_plane.wait_for(
        lambda: (
            _allowed(pdbs, "fill-b") == 1
            and (b := pdbs.get_namespaced_custom_object(*PDBS, "fill-b"))["status"][
                "observedGeneration"
            ]
            == b["metadata"]["generation"]
        ),
        message="fill-b's budget processed",
    )
    stack.wait_leader("hami-b")
    _finalize(core)  # the evicted pod goes: kube-scheduler tries big again, now with hami-b
    moved = control_plane.wait_for(
        lambda: len(m := _moved(core, fillers)) == 2 and m,
        timeout=90,
        message="the new leader's move",
    )
    (second,) = set(moved) - set(first)
    assert fillers[second]["metadata"]["labels"]["app"] == "fill-b"
    ledger = _ledger(core, LEDGER)
    assert len(ledger.evictions) == 2  # the hour's count: one by each leader
    steps = [s.pod for s in ledger.plans[big_uid].steps]
    assert steps == [f"{NS}/{first[0]}", f"{NS}/{second}"]  # one plan, resumed

    def bound():
        _finalize(core)  # what kubelet does with the pod evicted
        big = _raw(core, "big")
        return big["spec"].get("nodeName") and _gpus(big) and big

    big = control_plane.wait_for(bound, timeout=60, message="big bound after the failover")
    # the room freed: the GPU both moved pods held
    assert big["spec"]["nodeName"] == node
    assert _gpus(big) == _gpus(fillers[first[0]]) == _gpus(fillers[second])
    back = control_plane.wait_for(
        lambda: (
            len(ps := [p for p in _pods(core, "tier=filler") if _gpus(p)]) == 4
            and not [p for p in ps if p["metadata"].get("deletionTimestamp")]
            and ps
        ),
        timeout=60,
        message="the two replacements bound beside the others",
    )
    assert not set(fillers) - set(moved) - {p["metadata"]["name"] for p in back}
    assert all(_gpus(p) != _gpus(big) for p in back)
    # nothing else was evicted, the replacements least of all
    # (this test's pods: the namespace keeps the events of the modules before it)
    ours = {
        e.involved_object.name
        for e in _events(core, DEFRAGMENTED)
        if e.involved_object.name.startswith(("fill-a-", "fill-b-"))
    }
    assert ours == set(moved)
    assert len(_ledger(core, LEDGER).evictions) == 2
    for app in ("fill-a", "fill-b"):
        pdbs.delete_namespaced_custom_object(*PDBS, app)
        apps.delete_namespaced_deployment(app, NS)
    apps.delete_collection_namespaced_replica_set(NS)
    core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
    control_plane.wait_for(lambda: not _pods(core), message="no pod left")
    control_plane.delete_node(node)
