"""Slice-aware preemption on the real 1.20 control plane (issue 27 item 6): kube-apiserver,
kube-scheduler with ``hami scheduler`` as its extender, kube-controller-manager (the
Deployment and ReplicaSet controllers) and fake nodes whose "kubelet" is this test: a pod
evicted from a fake node stays Terminating until ``finalize`` confirms it gone.

- a high-priority pod on a cluster full of low-priority slices evicts exactly the minimum
  set (one pod) and binds where it made room;
- the evicted Deployment's replacement waits (no room, no lower pod to evict);
- a lower-priority pod created while the victim terminates does not take the room;
- a tenant cannot evict with forged priority annotations, and cannot state its own
  ``spec.priority`` (the API server's Priority admission refuses it);
- the leader killed after its eviction: the replica taking the lease evicts nothing
  more, holds the room and binds the pod there.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.builders import container, gpu, pod
from tests.e2e.hami_stack import MANAGED, HamiStack
from tests.e2e.test_scheduler import add_gpu_node, unique

NS = "default"
LOW, HIGH = "hami-e2e-low", "hami-e2e-high"


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    control_plane.reset()
    control_plane.start_controller_manager(controllers=("deployment", "replicaset"))
    stack = HamiStack(control_plane, tmp_path_factory.mktemp("hami")).start()  # a leads, b follows
    control_plane.start_scheduler(
        extender_url=stack.proxy.url, managed_resources=MANAGED, preempt_verb="preempt"
    )
    api = control_plane.api_client()
    sched = client.SchedulingV1Api(api)
    for name, value in ((LOW, 100), (HIGH, 1000)):
        sched.create_priority_class(
            {"metadata": {"name": name}, "value": value, "description": "hami e2e"}
        )
    yield client.CoreV1Api(api), client.AppsV1Api(api), stack
    client.AppsV1Api(api).delete_collection_namespaced_deployment(NS)
    client.AppsV1Api(api).delete_collection_namespaced_replica_set(NS)
    control_plane.stop_process("kube-controller-manager")
    for name in (LOW, HIGH):
        sched.delete_priority_class(name)
    stack.stop()
    control_plane.reset()


def _raw(core, name):
    return json.loads(core.read_namespaced_pod(name, NS, _preload_content=False).data)


def _pods(core, selector=""):
    data = core.list_namespaced_pod(NS, label_selector=selector, _preload_content=False).data
    return json.loads(data)["items"]


def _finalize(core):
    """What kubelet would do: confirm every terminating pod gone."""
    for p in _pods(core):
        if p["metadata"].get("deletionTimestamp"):
            core.delete_namespaced_pod(p["metadata"]["name"], NS, grace_period_seconds=0)


def _events(core, name, reason):
    return [
        e.message
        for e in core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
        if e.reason == reason
    ]


def _gpu_pod(name, mib, priority_class=None, **meta):
    p = pod(name, container(gpu=1, gpumem=mib))
    p["spec"]["schedulerName"] = "hami-scheduler"
    p["spec"]["containers"][0]["command"] = ["sleep", "3600"]
    if priority_class:
        p["spec"]["priorityClassName"] = priority_class
    p["metadata"].update(meta)
    return p


def _full_cluster(control_plane, core, apps):
    """2 nodes x 2 GPUs of 16000 MiB, each GPU held by a priority-100 pod of a Deployment
    of 4; then ``big`` (priority 1000, 12000 MiB) is created. Returns the nodes, the
    fillers' names, the node ``big`` is nominated to and its one victim (terminating)."""
    nodes = [unique("pre") for _ in range(2)]
    for n in nodes:
        add_gpu_node(
            control_plane,
            n,
            [
                gpu(f"GPU-{n}-0", index=0, memory_mib=16000),
                gpu(f"GPU-{n}-1", index=1, memory_mib=16000),
            ],
        )
    template = _gpu_pod("x", 16000, LOW)
    apps.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": "filler"},
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "filler"}},
                "template": {"metadata": {"labels": {"app": "filler"}}, "spec": template["spec"]},
            },
        },
    )
    fillers = control_plane.wait_for(
        lambda: (
            (ps := _pods(core, "app=filler"))
            and len([p for p in ps if p["spec"].get("nodeName")]) == 4
            and ps
        ),
        timeout=90,
        message="the 4 filler pods bound",
    )
    assert all(p["spec"]["priority"] == 100 for p in fillers)
    before = {p["metadata"]["name"] for p in fillers}

    core.create_namespaced_pod(NS, _gpu_pod("big", 12000, HIGH))
    big = control_plane.wait_for(
        lambda: (
            (p := _raw(core, "big"))["status"].get("nominatedNodeName") in nodes
            and [q for q in _pods(core, "app=filler") if q["metadata"].get("deletionTimestamp")]
            and p
        ),
        timeout=60,
        message="big nominated and its victim terminating",
    )
    room = big["status"]["nominatedNodeName"]
    terminating = [q for q in _pods(core, "app=filler") if q["metadata"].get("deletionTimestamp")]
    assert len(terminating) == 1 and terminating[0]["spec"]["nodeName"] == room  # the fewest
    return nodes, before, room, terminating[0]["metadata"]["name"]


def _clean(control_plane, core, apps, nodes):
    """No garbage collector runs here: the ReplicaSet and its pods go by hand."""
    apps.delete_namespaced_deployment("filler", NS)
    apps.delete_collection_namespaced_replica_set(NS, label_selector="app=filler")
    for selector in ("app=filler", ""):
        core.delete_collection_namespaced_pod(NS, label_selector=selector, grace_period_seconds=0)
    control_plane.wait_for(lambda: not _pods(core), message="no pod left")
    for n in nodes:
        control_plane.delete_node(n)


def test_a_high_priority_pod_evicts_the_fewest_and_its_room_is_held(control_plane, cluster):
    core, apps, stack = cluster
    nodes, before, room, victim = _full_cluster(control_plane, core, apps)
    control_plane.wait_for(
        lambda: any(
            "Preempted by default/big (priority 1000)" in m
            for m in _events(core, victim, "Preempted")
        ),
        message="the Preempted event on the victim",
    )
    # a lower-priority pod arrives while the victim terminates: it must not get the room
    core.create_namespaced_pod(NS, _gpu_pod("thief", 12000, LOW))
    _finalize(core)
    bound = control_plane.wait_for(
        lambda: (p := _raw(core, "big"))["spec"].get("nodeName") and p,
        timeout=60,
        message="big bound",
    )
    assert bound["spec"]["nodeName"] == room
    # the ReplicaSet's replacement and the thief wait: no room, nobody lower to evict
    replacement = control_plane.wait_for(
        lambda: [p for p in _pods(core, "app=filler") if p["metadata"]["name"] not in before],
        message="the filler replacement created",
    )
    control_plane.wait_for(
        lambda: _events(core, "thief", "FilteringFailed"), message="the thief filtered"
    )
    for name in ("thief", replacement[0]["metadata"]["name"]):
        assert not _raw(core, name)["spec"].get("nodeName"), name
    left = [p for p in _pods(core, "app=filler") if p["metadata"]["name"] in before]
    assert len(left) == 3  # exactly one victim
    # kube-scheduler 1.20.2 never called the declared preemptVerb (docs/preemption-and-gangs.md)
    assert "preemptVerb for" not in stack.log("hami-a")
    _clean(control_plane, core, apps, nodes)


def test_a_tenant_cannot_preempt_with_annotations_or_its_own_priority(control_plane, cluster):
    core, _, stack = cluster
    n = unique("ten")
    add_gpu_node(control_plane, n, [gpu(f"GPU-{n}-0", memory_mib=16000)])
    core.create_namespaced_pod(NS, _gpu_pod("held", 16000, LOW))
    control_plane.wait_for(lambda: _raw(core, "held")["spec"].get("nodeName"), message="held bound")
    stated = _gpu_pod("stated", 8000)
    stated["spec"]["priority"] = 1000000
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(NS, stated)
    assert refused.value.status == 403 and "must not be provided in pod spec" in refused.value.body
    forged = _gpu_pod(
        "forged",
        8000,
        annotations={"hami.io/priority": "1000000", "scheduling.k8s.io/priority": "1000000"},
        labels={"priority": "1000000"},
    )
    core.create_namespaced_pod(NS, forged)
    control_plane.wait_for(
        lambda: _events(core, "forged", "FilteringFailed"), message="forged filtered"
    )
    # well past the preemption's settle time: nothing evicted, nothing nominated
    control_plane.wait_for(
        lambda: "no-candidate" in stack.log("hami-a") or _metric(stack, "no-candidate"),
        timeout=20,
        message="the preemption attempt answered no-candidate",
    )
    assert not _raw(core, "held")["metadata"].get("deletionTimestamp")
    assert not _raw(core, "forged")["status"].get("nominatedNodeName")
    for name in ("held", "forged"):
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    control_plane.wait_for(lambda: not _pods(core), message="no pod left")
    control_plane.delete_node(n)  # the next test's pods must not land here


def _metric(stack, result):
    import urllib.request

    port = stack.metrics_ports["hami-a"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        text = r.read().decode()
    return any(
        line.startswith(f'hami_scheduler_preemption_attempts_total{{result="{result}"}}')
        and not line.endswith(" 0.0")
        for line in text.splitlines()
    )


def test_a_new_leader_keeps_the_room_and_evicts_nothing_more(control_plane, cluster):
    # the leader dies once it has nominated big and evicted its victim: the replica that
    # takes the lease evicts nobody else, holds the room against a lower pod arriving
    # meanwhile, and binds big there (last in the module: it kills hami-a)
    core, apps, stack = cluster
    nodes, before, room, victim = _full_cluster(control_plane, core, apps)
    stack.kill("hami-a")
    stack.wait_leader("hami-b")
    core.create_namespaced_pod(NS, _gpu_pod("thief", 12000, LOW))
    _finalize(core)
    bound = control_plane.wait_for(
        lambda: (p := _raw(core, "big"))["spec"].get("nodeName") and p,
        timeout=60,
        message="big bound by the new leader",
    )
    assert bound["spec"]["nodeName"] == room
    control_plane.wait_for(
        lambda: _events(core, "thief", "FilteringFailed"), message="the thief filtered"
    )
    assert not _raw(core, "thief")["spec"].get("nodeName")  # neither bound nor evicted
    left = [p for p in _pods(core, "app=filler") if p["metadata"]["name"] in before]
    assert victim not in {p["metadata"]["name"] for p in left} and len(left) == 3
    assert not [p for p in _pods(core) if p["metadata"].get("deletionTimestamp")]
    _clean(control_plane, core, apps, nodes)
