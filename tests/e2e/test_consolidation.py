"""Consolidation on the real 1.20 control plane (issue 28 items 3-4): kube-apiserver,
kube-scheduler with ``hami scheduler`` as its extender, kube-controller-manager (the
Deployment, ReplicaSet and disruption controllers) and fake nodes whose "kubelet" is
this test (an evicted pod stays Terminating until ``_finalize``).

Each node has two 16000 MiB GPUs, each half used by one replica of a Deployment pinned
to the node; a pod asking a whole GPU fits nowhere until one replica moves beside
another:

- ``hami defrag --apply`` moves one replica through the Eviction API: the pending pod is
  nominated first and binds on the freed GPU; the replica's replacement binds elsewhere;
  a ``Defragmented`` event on the moved pod names the pending pod;
- a PodDisruptionBudget at its limit stops the plan: nothing is evicted;
- a budget that reaches its limit between the plan and the eviction (a drain beside
  takes the disruption it allowed) answers the eviction 429: it is asked again for the
  wait, never forced; refused throughout, the plan stops, the pending pod's nomination
  is withdrawn and the ledger marks the plan blocked; allowed again within the wait,
  the eviction goes through and the blocked pod gets its room;
- with ``--consolidation`` on the leader (after the other replica dies), the same
  happens without the CLI.
"""

from __future__ import annotations

import json
import re
import threading

import pytest
from click.testing import CliRunner
from kubernetes import client

from hami_core.cli import cli
from hami_core.defrag.apply import BLOCKED, ApplyLimits
from hami_core.defrag.ledger import DATA_KEY, LedgerState
from hami_core.defrag.live import api_applier
from hami_core.simulate.runner import make_manager
from tests.builders import container, gpu, pod
from tests.e2e.hami_stack import HamiStack
from tests.e2e.test_scheduler import add_gpu_node, unique

NS = "default"
LEDGER = f"{NS}/hami-defrag-ledger"
MIB = 16000


@pytest.fixture(scope="module")
def cluster(control_plane, tmp_path_factory):
    control_plane.reset()
    control_plane.start_controller_manager(controllers=("deployment", "replicaset", "disruption"))
    stack = HamiStack(control_plane, tmp_path_factory.mktemp("hami"))
    stack.extra_args["hami-b"] = (
        "--consolidation",
        "--consolidation-after",
        "2",
        "--consolidation-ledger",
        LEDGER,
    )
    stack.start(replicas=("hami-a", "hami-b"))
    api = control_plane.api_client()
    yield client.CoreV1Api(api), client.AppsV1Api(api), stack
    control_plane.stop_process("kube-controller-manager")
    stack.stop()
    control_plane.reset()


def _pods(core, selector=""):
    data = core.list_namespaced_pod(NS, label_selector=selector, _preload_content=False).data
    return json.loads(data)["items"]


def _raw(core, name):
    return json.loads(core.read_namespaced_pod(name, NS, _preload_content=False).data)


def _gpus(p) -> set[str]:
    value = (p["metadata"].get("annotations") or {}).get("hami.io/vgpu-devices-to-allocate", "")
    return set(re.findall(r"GPU-[^,;:]+", value))


def _finalize(core):
    """What kubelet would do: confirm every terminating pod gone."""
    for p in _pods(core):
        if p["metadata"].get("deletionTimestamp"):
            core.delete_namespaced_pod(p["metadata"]["name"], NS, grace_period_seconds=0)


def _events(core, reason):
    return [e for e in core.list_namespaced_event(NS).items if e.reason == reason]


def _gpu_spec(mib, cores):
    p = pod("x", container(gpu=1, gpumem=mib, gpucores=cores))
    p["spec"]["schedulerName"] = "hami-scheduler"
    p["spec"]["containers"][0]["command"] = ["sleep", "3600"]
    return p


def _layout(control_plane, core, apps):
    """Two nodes, one half-GPU replica on each of their four GPUs; returns the nodes and
    the replicas bound."""
    nodes = [unique("cons") for _ in range(2)]
    for n in nodes:
        add_gpu_node(
            control_plane,
            n,
            [gpu(f"GPU-{n}-{i}", index=i, memory_mib=MIB) for i in range(2)],
        )
    for n in nodes:
        template = _gpu_spec(MIB // 2, 50)
        template["spec"]["nodeSelector"] = {"kubernetes.io/hostname": n}
        apps.create_namespaced_deployment(
            NS,
            {
                "metadata": {"name": f"fill-{n}"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": f"fill-{n}"}},
                    "template": {
                        "metadata": {
                            "labels": {"app": f"fill-{n}", "tier": "filler"},
                            "annotations": {"hami.io/gpu-scheduler-policy": "spread"},
                        },
                        "spec": template["spec"],
                    },
                },
            },
        )
    fillers = control_plane.wait_for(
        lambda: (
            (ps := _pods(core, "tier=filler"))
            and len([p for p in ps if p["spec"].get("nodeName") and _gpus(p)]) == 4
            and ps
        ),
        timeout=90,
        message="the 4 fillers bound",
    )
    held = [g for p in fillers for g in _gpus(p)]
    assert len(held) == len(set(held)) == 4, held  # one replica per GPU: fragmented
    core.create_namespaced_pod(NS, {**_gpu_spec(MIB, 100), "metadata": {"name": "big"}})
    control_plane.wait_for(
        lambda: [e for e in _events(core, "FilteringFailed") if e.involved_object.name == "big"],
        message="big filtered and found no GPU",
    )
    return nodes, {p["metadata"]["name"]: p for p in fillers}


def _clean(control_plane, core, apps, nodes):
    for n in nodes:
        apps.delete_namespaced_deployment(f"fill-{n}", NS)
    apps.delete_collection_namespaced_replica_set(NS)
    core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
    control_plane.wait_for(lambda: not _pods(core), message="no pod left")
    for n in nodes:
        control_plane.delete_node(n)


def _defrag(control_plane, *args):
    result = CliRunner().invoke(
        cli,
        ["defrag", "--kubeconfig", str(control_plane.kubeconfig_path), "-o", "json", *args],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _moved_and_placed(control_plane, core, fillers, moved):
    """Once ``moved`` is gone: big binds on the GPU it held, its replacement elsewhere."""
    _finalize(core)
    big = control_plane.wait_for(
        lambda: (p := _raw(core, "big"))["spec"].get("nodeName") and _gpus(p) and p,
        timeout=60,
        message="big bound",
    )
    assert _gpus(big) == _gpus(fillers[moved])  # the room freed for it
    back = control_plane.wait_for(
        lambda: [
            p
            for p in _pods(core, "tier=filler")
            if p["metadata"]["name"] not in fillers and p["spec"].get("nodeName") and _gpus(p)
        ],
        timeout=60,
        message="the moved replica's replacement bound",
    )
    assert len(back) == 1 and not _gpus(back[0]) & _gpus(fillers[moved])
    assert len(_pods(core, "tier=filler")) == 4
    return big


def test_apply_gives_the_blocked_pod_its_room_and_the_replica_comes_back(control_plane, cluster):
    core, apps, _ = cluster
    nodes, fillers = _layout(control_plane, core, apps)
    plan = _defrag(control_plane, "--pod", f"{NS}/big")  # the dry run evicts nothing
    assert plan["summary"]["moves"] == 1 and plan["dry_run"] is True
    assert not [p for p in _pods(core) if p["metadata"].get("deletionTimestamp")]
    report = _defrag(
        control_plane,
        "--apply",
        "--pod",
        f"{NS}/big",
        "--ledger",
        LEDGER,
        "--replacement-wait",
        "20",
    )
    assert report["evicted"] == 1, report
    (step,) = report["steps"]
    moved = step["pod"].split("/")[1]
    assert _raw(core, "big")["status"].get("nominatedNodeName") == step["fromNode"]
    assert _raw(core, moved)["metadata"].get("deletionTimestamp")  # evicted, not deleted
    (event,) = [e for e in _events(core, "Defragmented") if e.involved_object.name == moved]
    assert f"Moved for {NS}/big" in event.message
    big = _moved_and_placed(control_plane, core, fillers, moved)
    assert big["spec"]["nodeName"] == step["fromNode"]
    _clean(control_plane, core, apps, nodes)


def test_a_pdb_at_its_limit_stops_the_plan(control_plane, cluster):
    core, apps, _ = cluster
    pdbs = client.CustomObjectsApi(control_plane.api_client())  # policy/v1beta1 on 1.20
    nodes, _ = _layout(control_plane, core, apps)
    where = ("policy", "v1beta1", NS, "poddisruptionbudgets")
    pdbs.create_namespaced_custom_object(
        *where,
        {
            "apiVersion": "policy/v1beta1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "fillers"},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"tier": "filler"}}},
        },
    )
    control_plane.wait_for(
        lambda: (
            "observedGeneration"
            in (pdbs.get_namespaced_custom_object(*where, "fillers").get("status") or {})
        ),
        message="the disruption controller read the budget",
    )
    report = _defrag(control_plane, "--apply", "--pod", f"{NS}/big", "--ledger", LEDGER)
    assert report["evicted"] == 0 and report["steps"] == [], report
    assert "no movable pods" in report["skipped"][f"{NS}/big"]
    assert not [p for p in _pods(core) if p["metadata"].get("deletionTimestamp")]
    assert not _raw(core, "big")["status"].get("nominatedNodeName")
    pdbs.delete_namespaced_custom_object(*where, "fillers")
    _clean(control_plane, core, apps, nodes)


PDBS = ("policy", "v1beta1", NS, "poddisruptionbudgets")  # policy/v1beta1 on 1.20


def _ready(core, name, ready=True):
    """What kubelet reports: the pod running, its containers ready or not (the disruption
    controller counts ready pods as healthy; the Eviction API asks budgets only for
    running pods: a Pending one is evicted whatever they say)."""
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    core.patch_namespaced_pod_status(
        name,
        NS,
        {"status": {"phase": "Running", "conditions": [condition]}},
        _content_type="application/strategic-merge-patch+json",  # merged by type
    )


def _allowed(pdbs, name):
    status = pdbs.get_namespaced_custom_object(*PDBS, name).get("status") or {}
    return status.get("disruptionsAllowed")


def _ledger(core, location=LEDGER):
    """The record of ledger ``location`` as the API server has it (empty before any run
    wrote it)."""
    namespace, _, name = location.partition("/")
    found = core.list_namespaced_config_map(namespace, field_selector=f"metadata.name={name}")
    if not found.items:
        return LedgerState()
    return LedgerState.from_json(found.items[0].data[DATA_KEY], where=location)


class _DrainBeside:
    """The Eviction API as ``hami defrag --apply`` calls it, with a drain running beside:
    right before the first eviction is asked, another pod of the budget goes unready
    (its node drained) and the disruption controller takes the budget to 0; with
    ``back_after_s`` that pod is ready again that long after (the drain's replacement
    came up). Everything else is the real API server's answer."""

    def __init__(self, inner, cp, core, pdbs, fillers, *, back_after_s=None):
        self.inner, self.cp, self.core, self.pdbs = inner, cp, core, pdbs
        self.fillers, self.back_after_s = fillers, back_after_s
        self.asked: list[tuple[str, bool]] = []
        self.other = ""

    def evict(self, namespace, name, *, uid):
        if not self.asked:
            self.other = next(f for f in self.fillers if f != name)
            _ready(self.core, self.other, False)
            self.cp.wait_for(
                lambda: _allowed(self.pdbs, "fillers") == 0,
                message="the disruption controller took the budget to 0",
            )
            if self.back_after_s is not None:
                threading.Timer(self.back_after_s, _ready, (self.core, self.other)).start()
        accepted = self.inner.evict(namespace, name, uid=uid)
        self.asked.append((name, accepted))
        return accepted

    def nominate(self, namespace, name, node):
        self.inner.nominate(namespace, name, node)

    def budgets(self, namespace):
        return self.inner.budgets(namespace)


def _apply_beside_a_drain(cp, core, pdbs, fillers, *, budget_wait_s, back_after_s=None):
    applier = api_applier(
        make_manager(None),
        api_client=cp.api_client(new=True),
        ledger=LEDGER,
        ledger_flag="--ledger",
        limits=ApplyLimits(budget_wait_s=budget_wait_s, budget_retry_s=1, replacement_wait_s=20),
        protected_namespaces=("kube-system",),
        planner_options={},
    )
    drain = _DrainBeside(
        applier.evictions, cp, core, pdbs, list(fillers), back_after_s=back_after_s
    )
    applier.evictions = drain
    return applier.run([f"{NS}/big"]), drain


def test_a_budget_at_its_limit_at_the_eviction_is_waited_on_never_forced(control_plane, cluster):
    core, apps, _ = cluster
    pdbs = client.CustomObjectsApi(control_plane.api_client())
    nodes, fillers = _layout(control_plane, core, apps)
    for name in fillers:
        _ready(core, name)
    pdbs.create_namespaced_custom_object(
        *PDBS,
        {
            "apiVersion": "policy/v1beta1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "fillers"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"tier": "filler"}}},
        },
    )
    control_plane.wait_for(
        lambda: _allowed(pdbs, "fillers") == 1, message="the budget allows one disruption"
    )
    big_uid = _raw(core, "big")["metadata"]["uid"]
    evicted_before = len(_ledger(core).evictions)  # the module's earlier runs

    # refused for the whole wait: asked again, never forced; the plan stops
    report, drain = _apply_beside_a_drain(control_plane, core, pdbs, fillers, budget_wait_s=3)
    assert report.evicted == 0 and [s.result for s in report.steps] == ["blocked-by-budget"]
    victim = report.steps[0].move.pod.split("/")[1]
    assert len(drain.asked) >= 3 and drain.asked == [(victim, False)] * len(drain.asked)
    assert all(not p["metadata"].get("deletionTimestamp") for p in _pods(core))
    assert len(_pods(core, "tier=filler")) == 4
    assert not _raw(core, "big")["status"].get("nominatedNodeName")  # withdrawn
    (event,) = [e for e in _events(core, BLOCKED) if e.involved_object.name == "big"]
    assert f"refused the eviction of {NS}/{victim}" in event.message
    record = _ledger(core).plans[big_uid]
    assert (record.node, record.steps) == ("", [])
    assert record.blocked == f"a PodDisruptionBudget refused the eviction of {NS}/{victim} for 3 s"
    assert len(_ledger(core).evictions) == evicted_before

    # the drained pod is ready again: a later run's refusal is waited on, then accepted
    _ready(core, drain.other)
    control_plane.wait_for(lambda: _allowed(pdbs, "fillers") == 1, message="the budget back")
    report, drain = _apply_beside_a_drain(
        control_plane, core, pdbs, fillers, budget_wait_s=30, back_after_s=2
    )
    assert report.evicted == 1, report
    (step,) = report.steps
    moved = step.move.pod.split("/")[1]
    assert drain.asked[0] == (moved, False) and drain.asked[-1] == (moved, True)
    assert not any(ok for _, ok in drain.asked[:-1])
    ledger = _ledger(core)
    assert len(ledger.evictions) == evicted_before + 1
    record = ledger.plans[big_uid]
    assert record.blocked == "" and [s.pod for s in record.steps] == [step.move.pod]
    assert record.node == step.move.from_node
    _moved_and_placed(control_plane, core, fillers, moved)
    pdbs.delete_namespaced_custom_object(*PDBS, "fillers")
    _clean(control_plane, core, apps, nodes)


def test_continuous_consolidation_does_it_without_the_cli(control_plane, cluster):
    core, apps, stack = cluster
    stack.kill("hami-a")  # the replica with --consolidation leads from now on
    stack.wait_leader("hami-b")
    nodes, fillers = _layout(control_plane, core, apps)
    moved = control_plane.wait_for(
        lambda: [
            e.involved_object.name
            for e in _events(core, "Defragmented")
            if e.involved_object.name in fillers and f"Moved for {NS}/big" in e.message
        ],
        timeout=60,
        message="the leader's consolidation moved a replica for big",
    )
    assert len(moved) == 1
    assert _raw(core, "big")["status"].get("nominatedNodeName") in nodes
    _moved_and_placed(control_plane, core, fillers, moved[0])
    _clean(control_plane, core, apps, nodes)
