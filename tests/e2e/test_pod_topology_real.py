"""Inter-pod anti-affinity and topology spread: the real kube-scheduler 1.20 with our
extender, against ``hami simulate``'s model of them (``hami_core/simulate/podtopology``,
issue 24 item 6): the same pods are placed or refused, for kube-scheduler's reasons."""

from __future__ import annotations

import copy

import pytest
from kubernetes import client

from hami_core.simulate.podtopology import (
    AFFINITY_NOT_MATCH,
    AFFINITY_RULES,
    ANTI_AFFINITY_RULES,
    EXISTING_ANTI_AFFINITY,
    SPREAD_NOT_MATCH,
)
from tests.builders import container, gpu, pipeline, pod
from tests.builders import node as node_obj
from tests.e2e.hami_stack import HamiStack
from tests.e2e.test_scheduler import add_gpu_node, create, events, raw_pod, unique, wait_bound


@pytest.fixture(scope="module")
def stack(control_plane, tmp_path_factory):
    s = HamiStack(control_plane, tmp_path_factory.mktemp("hami")).start()
    yield s
    s.stop()


@pytest.fixture
def core(control_plane, stack):
    control_plane.reset()
    yield client.CoreV1Api(control_plane.api_client())
    control_plane.reset()


HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def labelled_node(name, gpus, labels):
    """The Node as ``add_fake_node`` creates it, for the simulation."""
    obj = node_obj(name, gpus)
    obj["metadata"]["labels"] = {HOST: name, **labels}
    return obj


def place(cp, core, sim, pods):
    """Each pod to the simulation and to the real cluster, in order; returns
    ``{name: (simulated node, real node, real FailedScheduling messages)}``."""
    out = {}
    for p in pods:
        name = p["metadata"]["name"]
        simulated = sim.submit(copy.deepcopy(p))
        create(core, p)
        if simulated.node is not None:
            wait_bound(cp, core, [name])
        else:
            cp.wait_for(
                lambda name=name: any(r == "FailedScheduling" for r, _ in events(core, name)),
                message=f"{name} unschedulable",
            )
        messages = [m for r, m in events(core, name) if r == "FailedScheduling"]
        out[name] = (simulated, raw_pod(core, name)["spec"].get("nodeName"), messages)
    return out


def test_anti_affinity_replicas_as_kube_scheduler_places_them(control_plane, core):
    app = unique("web")
    names = [unique("n"), unique("n")]
    gpus = {n: [gpu(f"GPU-{n}")] for n in names}
    for n in names:
        add_gpu_node(control_plane, n, gpus[n])
    sim = pipeline(*(labelled_node(n, gpus[n], {}) for n in names))
    pods = []
    for i in range(3):
        p = pod(f"{app}-{i}", container(gpu=1, gpumem=1000))
        p["metadata"]["labels"] = {"app": app}
        p["spec"]["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOST}
                ]
            }
        }
        pods.append(p)
    got = place(control_plane, core, sim, pods)
    first, second, third = (got[p["metadata"]["name"]] for p in pods)
    assert {first[1], second[1]} == set(names) == {first[0].node, second[0].node}
    assert third[0].node is None and third[1] is None
    assert any(f"2 {AFFINITY_NOT_MATCH}, 2 {ANTI_AFFINITY_RULES}." in m for m in third[2]), third[2]
    assert set(third[0].filter.failed.values()) == {f"{AFFINITY_NOT_MATCH}, {ANTI_AFFINITY_RULES}"}


def test_topology_spread_refuses_as_kube_scheduler_does(control_plane, core):
    app = unique("spread")
    a1, a2, b1 = unique("a1"), unique("a2"), unique("b1")
    zones = {a1: "z1", a2: "z1", b1: "z2"}
    gpus = {n: [gpu(f"GPU-{n}")] for n in zones}
    # b1's GPU is too small for the pods: the extender refuses it, but it is still a
    # domain of the spread (kube-scheduler counts every node its filters pass)
    gpus[b1] = [gpu(f"GPU-{b1}", memory_mib=500)]
    for n, z in zones.items():
        add_gpu_node(control_plane, n, gpus[n])
        control_plane_label(control_plane, n, {ZONE: z})
    sim = pipeline(*(labelled_node(n, gpus[n], {ZONE: z}) for n, z in zones.items()))
    first = pod(f"{app}-0", container(gpu=1, gpumem=1000))
    first["metadata"]["labels"] = {"app": app}
    first["spec"]["nodeSelector"] = {HOST: a1}
    later = pod(f"{app}-1", container(gpu=1, gpumem=1000))
    later["metadata"]["labels"] = {"app": app}
    later["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
        }
    ]
    got = place(control_plane, core, sim, [first, later])
    simulated, real, messages = got[later["metadata"]["name"]]
    # z1 holds one: a1 and a2 would make it 2 against z2's 0; b1's GPU is too small
    assert simulated.node is None and real is None, (simulated, real, messages)
    assert any(SPREAD_NOT_MATCH in m for m in messages), messages
    assert simulated.filter.failed[a1] == simulated.filter.failed[a2] == SPREAD_NOT_MATCH


def control_plane_label(cp, name, labels):
    client.CoreV1Api(cp.api_client()).patch_node(name, {"metadata": {"labels": labels}})


def test_existing_anti_affinity_and_required_affinity_refuse_as_kube_scheduler(control_plane, core):
    """An existing pod's anti-affinity keeps a matching pod (with no terms of its own)
    off its zone; a pod whose required affinity matches no pod (nor itself) is refused."""
    app = unique("guard")
    a1, a2 = unique("a1"), unique("a2")
    gpus = {n: [gpu(f"GPU-{n}")] for n in (a1, a2)}
    for n in (a1, a2):
        add_gpu_node(control_plane, n, gpus[n])
        control_plane_label(control_plane, n, {ZONE: "z1"})
    sim = pipeline(*(labelled_node(n, gpus[n], {ZONE: "z1"}) for n in (a1, a2)))
    guard = pod(f"{app}-guard", container(gpu=1, gpumem=1000))
    guard["spec"]["nodeSelector"] = {HOST: a1}
    guard["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"team": app}}, "topologyKey": ZONE}
            ]
        }
    }
    noisy = pod(f"{app}-noisy", container(gpu=1, gpumem=1000))
    noisy["metadata"]["labels"] = {"team": app}
    lonely = pod(f"{app}-lonely", container(gpu=1, gpumem=1000))
    lonely["spec"]["affinity"] = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"db": app}}, "topologyKey": HOST}
            ]
        }
    }
    got = place(control_plane, core, sim, [guard, noisy, lonely])
    assert got[guard["metadata"]["name"]][1] == a1
    for p, reason in ((noisy, EXISTING_ANTI_AFFINITY), (lonely, AFFINITY_RULES)):
        simulated, real, messages = got[p["metadata"]["name"]]
        assert simulated.node is None and real is None, (p["metadata"]["name"], messages)
        assert any(f"2 {reason}" in m for m in messages), messages
        assert set(simulated.filter.failed.values()) == {f"{AFFINITY_NOT_MATCH}, {reason}"}
