"""Gang groups on the real 1.20 control plane (issue 27 item 6): kube-apiserver,
kube-scheduler with ``hami scheduler`` as its extender, and kube-controller-manager's Job
controller creating the members.

A Job of 4 pods x 2 GPUs (one group, minMember 4) on four 2-GPU nodes, one of them taken
by another pod: room for 3 members, so none binds (each says ``GroupDoesNotFit`` in its
events); once that pod is deleted, all 4 bind, one per node. A tenant of another
namespace naming the same group neither joins it nor holds anything.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.builders import container, gpu, pod
from tests.e2e.hami_stack import HamiStack
from tests.e2e.test_scheduler import add_gpu_node, create, raw_pod, unique

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
MIN_MEMBER = "hami.io/gang-min-member"
LIMITS = {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "16000"}


@pytest.fixture(scope="module")
def stack(control_plane, tmp_path_factory):
    control_plane.reset()
    control_plane.start_controller_manager(controllers=("job",))
    s = HamiStack(control_plane, tmp_path_factory.mktemp("hami")).start(replicas=("hami-a",))
    yield s
    s.stop()
    control_plane.stop_process("kube-controller-manager")
    control_plane.reset()


def job(name: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {GROUP_LABEL: "train"}, "annotations": {MIN_MEMBER: "4"}},
                "spec": {
                    "schedulerName": "hami-scheduler",
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "worker",
                            "image": "busybox",
                            "command": ["sleep", "3600"],
                            "resources": {"limits": LIMITS},
                        }
                    ],
                },
            },
        },
    }


def job_pods(core, name: str) -> list[dict]:
    resp = core.list_namespaced_pod(
        "default", label_selector=f"job-name={name}", _preload_content=False
    )
    return list(json.loads(resp.data)["items"])


def reasons(core, name: str, namespace: str = "default") -> list[tuple[str, str]]:
    return [
        (e.reason, e.message)
        for e in core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}"
        ).items
    ]


def test_a_gang_job_binds_none_then_all_four_once_room_appears(control_plane, stack):
    cp = control_plane
    core = client.CoreV1Api(cp.api_client())
    batch = client.BatchV1Api(cp.api_client())
    nodes = [unique("gang") for _ in range(4)]
    for n in nodes:
        add_gpu_node(cp, n, [gpu(f"GPU-{n}-0", index=0), gpu(f"GPU-{n}-1", index=1)])
    create(core, pod("blocker", container(gpu=2, gpumem=16000)))
    cp.wait_for(lambda: raw_pod(core, "blocker")["spec"].get("nodeName"), message="blocker bound")
    # a tenant of another namespace names the same group (and a minimum of 4)
    try:
        core.create_namespace({"metadata": {"name": "tenant-b"}})
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    intruder = pod("intruder", container(gpu=1, gpumem=1000), namespace="tenant-b")
    intruder["metadata"]["labels"] = {GROUP_LABEL: "train"}
    intruder["metadata"]["annotations"] = {MIN_MEMBER: "4"}
    create(core, intruder)

    name = unique("train")
    batch.create_namespaced_job("default", job(name))
    members = cp.wait_for(
        lambda: (p := job_pods(core, name)) and len(p) == 4 and p,
        timeout=60,
        message="the Job's 4 pods",
    )
    names = [p["metadata"]["name"] for p in members]

    def every_member_waits():
        return all(
            any(r == "GroupWaiting" and "GroupDoesNotFit" in m for r, m in reasons(core, n))
            for n in names
        )

    cp.wait_for(every_member_waits, timeout=90, message="GroupWaiting on every member")
    assert not any(p["spec"].get("nodeName") for p in job_pods(core, name))
    waiting = next(m for r, m in reasons(core, names[0]) if r == "GroupWaiting")
    assert "group default/train: 3 of the 4 members still needed fit together" in waiting

    core.delete_namespaced_pod("blocker", "default", grace_period_seconds=0)
    bound = cp.wait_for(
        lambda: (p := job_pods(core, name)) and all(q["spec"].get("nodeName") for q in p) and p,
        timeout=60,
        message="all 4 members bound",
    )
    assert sorted(p["spec"]["nodeName"] for p in bound) == sorted(nodes)
    # the intruder formed its own group of one in its namespace: still waiting, nothing held
    assert not raw_pod(core, "intruder", "tenant-b")["spec"].get("nodeName")
    said = [m for r, m in reasons(core, "intruder", "tenant-b") if r == "GroupWaiting"]
    assert said and "group tenant-b/train" in said[-1] and "waiting for 3 more" in said[-1]

    batch.delete_namespaced_job(name, "default", propagation_policy="Background")
    core.delete_namespaced_pod("intruder", "tenant-b", grace_period_seconds=0)
