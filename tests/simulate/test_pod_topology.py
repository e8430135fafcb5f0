"""kube-scheduler's inter-pod (anti-)affinity, topology spread and host ports in the
what-if (issue 24 item 6): three replicas with required anti-affinity were put on one
node of a snapshot without a word. What is modelled decides; what is not is said per
pod."""

import copy

import pytest

from hami_core.simulate.loader import WorkloadPod, Workloads, load_cluster
from hami_core.simulate.report import build_report, render_text
from hami_core.simulate.runner import simulate

from .helpers import EXAMPLES, gpu_pod, manager, run

MGR = manager()
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
A10 = {"model": "NVIDIA A10", "memoryMiB": 24000, "splitCount": 10}


def replicas(n, *, labels, affinity=None, spread=None, gpumem=1000, name="web", ns="default"):
    """``n`` pods as a Deployment's ReplicaSet creates them (same labels and spec)."""
    out = []
    for i in range(n):
        pod = gpu_pod(f"{name}-{i}", ns, gpu=1, gpumem=gpumem)
        pod["metadata"]["labels"] = dict(labels)
        if affinity is not None:
            pod["spec"]["affinity"] = copy.deepcopy(affinity)
        if spread is not None:
            pod["spec"]["topologySpreadConstraints"] = copy.deepcopy(spread)
        out.append(pod)
    return out


def anti(labels, key=HOST, **term):
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **term}
            ]
        }
    }


def cluster(*nodes):
    """``cluster(("a", {ZONE: "z1"}), ...)``: nodes with one A10 each and labels."""
    return {
        "nodes": [
            {"name": n, "labels": labels, "gpus": [dict(A10, count=count)]}
            for n, labels, count in (x if len(x) == 3 else (*x, 1) for x in nodes)
        ]
    }


def placed(sim):
    return {r.key.split("/")[1]: r.outcome.node for r in sim.runs}


def test_required_anti_affinity_replicas_go_to_three_nodes_of_a_snapshot():
    """The issue's case: binpack put all three on gpu-a100-01 (most used)."""
    snapshot = load_cluster(EXAMPLES / "snapshot.yaml", MGR)
    pods = replicas(3, labels={"app": "web"}, affinity=anti({"app": "web"}))
    sim = simulate(
        snapshot, Workloads(pods=tuple(WorkloadPod(pod=p, source="t") for p in pods)), MGR
    )
    nodes = [r.outcome.node for r in sim.runs]
    assert None not in nodes
    assert len(set(nodes)) == 3, nodes


def test_a_fourth_anti_affinity_replica_is_unschedulable_with_kube_schedulers_reason():
    sim = run(
        cluster(("a", {}, 2), ("b", {}, 2)),
        replicas(3, labels={"app": "web"}, affinity=anti({"app": "web"})),
        mgr=MGR,
    )
    assert sorted(n for n in placed(sim).values() if n) == ["a", "b"]
    report = build_report(sim)
    last = report["pods"][2]
    assert last["status"] == "unschedulable"
    reasons = {e["node"]: e["reason"] for e in last["explanation"]}
    # InterPodAffinity's two reasons (kube-scheduler filtering.go); the pod's own
    # anti-affinity is checked before the placed replicas' (1.20's order, as the real
    # kube-scheduler says in tests/e2e/test_pod_topology_real.py)
    assert reasons == {
        n: "node(s) didn't match pod affinity/anti-affinity, "
        "node(s) didn't match pod anti-affinity rules"
        for n in ("a", "b")
    }


def test_the_incoming_pods_own_anti_affinity_refuses_with_its_reason():
    plain = replicas(1, labels={"app": "web"}, name="plain")
    picky = replicas(1, labels={"app": "picky"}, affinity=anti({"app": "web"}), name="picky")
    sim = run(cluster(("a", {}, 2)), [*plain, *picky], mgr=MGR)
    assert build_report(sim)["pods"][1]["explanation"][0]["reason"] == (
        "node(s) didn't match pod affinity/anti-affinity, "
        "node(s) didn't match pod anti-affinity rules"
    )


def test_an_existing_pods_anti_affinity_keeps_the_incoming_pod_off_its_zone():
    """An existing pod's required anti-affinity matches the incoming pod: every node of
    its zone is refused (satisfiesExistingPodsAntiAffinity), even though the incoming
    pod has no affinity of its own."""
    guard = gpu_pod("guard", gpu=1, gpumem=1000)
    guard["metadata"]["labels"] = {"app": "guard"}
    guard["spec"]["affinity"] = anti({"team": "noisy"}, key=ZONE)
    guard["spec"]["nodeSelector"] = {HOST: "a1"}
    noisy = replicas(2, labels={"team": "noisy"}, name="noisy")
    sim = run(
        cluster(("a1", {ZONE: "z1"}), ("a2", {ZONE: "z1"}), ("b1", {ZONE: "z2"}, 2)),
        [guard, *noisy],
        mgr=MGR,
    )
    assert placed(sim) == {"guard": "a1", "noisy-0": "b1", "noisy-1": "b1"}
    report = build_report(sim)
    assert report["pods"][1]["status"] == "placed"


def test_existing_anti_affinity_refusal_names_the_reason():
    guard = gpu_pod("guard", gpu=1, gpumem=1000)
    guard["spec"]["affinity"] = anti({"team": "noisy"}, key=ZONE)
    noisy = replicas(1, labels={"team": "noisy"}, name="noisy")
    sim = run(cluster(("a1", {ZONE: "z1"})), [guard, *noisy], mgr=MGR)
    report = build_report(sim)
    assert report["pods"][1]["explanation"][0]["reason"] == (
        "node(s) didn't match pod affinity/anti-affinity, "
        "node(s) didn't satisfy existing pods anti-affinity rules"
    )


def test_anti_affinity_is_namespaced_unless_the_term_says_otherwise():
    """A term without namespaces looks at the pod's own namespace only
    (GetNamespacesFromPodAffinityTerm); ``namespaces`` widens it; an empty
    ``namespaceSelector`` means every namespace."""
    other = replicas(1, labels={"app": "web"}, name="other", ns="team-b")
    mine = replicas(2, labels={"app": "web"}, affinity=anti({"app": "web"}), ns="team-a")
    sim = run(cluster(("a", {}, 3), ("b", {}, 3)), [*other, *mine], mgr=MGR)
    assert set(placed(sim).values()) == {"a", "b"}  # team-b's pod does not count
    across = anti({"app": "web"}, namespaces=["team-b"])
    sim = run(
        cluster(("a", {}, 3), ("b", {}, 3)),
        [*other, *replicas(1, labels={"app": "x"}, affinity=across, ns="team-a")],
        mgr=MGR,
    )
    assert placed(sim)["other-0"] != placed(sim)["web-0"]
    every = anti({"app": "web"}, namespaceSelector={})
    sim = run(
        cluster(("a", {}, 3)),
        [*other, *replicas(1, labels={"app": "x"}, affinity=every, ns="team-a")],
        mgr=MGR,
    )
    assert placed(sim)["web-0"] is None


def test_required_pod_affinity_follows_its_target_and_the_first_of_a_series_may_start():
    db = replicas(1, labels={"app": "db"}, name="db")
    db[0]["spec"]["nodeSelector"] = {HOST: "b"}
    near = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": HOST}
            ]
        }
    }
    app = replicas(2, labels={"app": "api"}, affinity=near, name="api")
    sim = run(cluster(("a", {}, 3), ("b", {}, 3), ("c", {}, 3)), [*db, *app], mgr=MGR)
    assert placed(sim) == {"db-0": "b", "api-0": "b", "api-1": "b"}
    # no db at all: the pods are refused, they do not match their own term
    sim = run(cluster(("a", {}, 3)), app, mgr=MGR)
    assert placed(sim) == {"api-0": None, "api-1": None}
    assert build_report(sim)["pods"][0]["explanation"][0]["reason"] == (
        "node(s) didn't match pod affinity/anti-affinity, node(s) didn't match pod affinity rules"
    )
    # a pod whose term matches itself starts the series (kube-scheduler's exception)
    self_near = replicas(2, labels={"app": "db"}, affinity=near, name="cache")
    sim = run(cluster(("a", {}, 3), ("b", {}, 3)), self_near, mgr=MGR)
    first, second = placed(sim).values()
    assert first is not None and first == second


def test_topology_spread_do_not_schedule_keeps_max_skew_across_zones():
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    sim = run(
        cluster(("a1", {ZONE: "z1"}, 4), ("a2", {ZONE: "z1"}, 4), ("b1", {ZONE: "z2"}, 1)),
        replicas(4, labels={"app": "web"}, spread=spread),
        mgr=MGR,
    )
    zones = {"a1": "z1", "a2": "z1", "b1": "z2", None: None}
    got = [zones[n] for n in placed(sim).values()]
    # binpack alone would fill z1 first; the spread keeps the zones at most 1 apart
    assert sorted(got, key=str) == ["z1", "z1", "z2", "z2"], got


def test_topology_spread_refuses_with_kube_schedulers_reasons():
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    first = replicas(1, labels={"app": "web"}, name="first")
    first[0]["spec"]["nodeSelector"] = {HOST: "a1"}
    later = replicas(1, labels={"app": "web"}, spread=spread, name="later", gpumem=2000)
    # z2's GPU is too small for the later pod, but z2 is still a domain of the spread
    # (kube-scheduler counts every node passing the pod's node affinity, whatever else
    # refuses it), so z1 would be 2 against 0
    nodes = cluster(("a1", {ZONE: "z1"}, 2), ("b1", {ZONE: "z2"}), ("nolabel", {}))
    nodes["nodes"][1]["gpus"][0]["memoryMiB"] = 1000
    sim = run(nodes, [*first, *later], mgr=MGR)
    assert placed(sim)["later-0"] is None
    reasons = {e["node"]: e["reason"] for e in build_report(sim)["pods"][1]["explanation"]}
    assert reasons["a1"] == "node(s) didn't match pod topology spread constraints"
    assert "CardInsufficientMemory" in reasons["b1"], reasons
    assert reasons["nolabel"] == (
        "node(s) didn't match pod topology spread constraints (missing required label)"
    )
    # with a node selector naming a1, only z1 is a domain: the skew is 0 and it fits
    later[0]["spec"]["nodeSelector"] = {HOST: "a1"}
    sim = run(nodes, [*first, *later], mgr=MGR)
    assert placed(sim)["later-0"] == "a1"


def test_host_port_conflicts_refuse_the_node():
    def with_port(name):
        pod = gpu_pod(name, gpu=1, gpumem=1000)
        pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
        return pod

    sim = run(cluster(("a", {}, 2)), [with_port("one"), with_port("two")], mgr=MGR)
    assert placed(sim) == {"one": "a", "two": None}
    assert build_report(sim)["pods"][1]["explanation"][0]["reason"] == (
        "node(s) didn't have free ports for the requested pod ports"
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            {
                "affinity": {
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 100,
                                "podAffinityTerm": {
                                    "labelSelector": {"matchLabels": {"app": "web"}},
                                    "topologyKey": HOST,
                                },
                            }
                        ]
                    }
                }
            },
            "preferred pod anti-affinity",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": {"app": "web"}},
                    }
                ]
            },
            "topology spread with whenUnsatisfiable: ScheduleAnyway",
        ),
        (
            {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
            "PersistentVolumeClaim data",
        ),
    ],
)
def test_what_is_not_modelled_is_said_for_that_pod(spec, says):
    pod = gpu_pod("soft", gpu=1, gpumem=1000)
    pod["metadata"]["labels"] = {"app": "web"}
    pod["spec"].update(spec)
    plain = gpu_pod("plain", gpu=1, gpumem=1000)
    sim = run(cluster(("a", {})), [pod, plain], mgr=MGR)
    report = build_report(sim)
    soft, other = report["pods"]
    assert any(says in w and "not modelled" in w for w in soft["notModelled"]), soft
    assert other["notModelled"] == []
    text = render_text(report)
    assert f"default/soft: {soft['notModelled'][0]}" in text


def test_a_tenant_cannot_make_the_check_explode_or_lie():
    """Untrusted input (PROTOCOL.md §6-7): an unknown operator, a nil selector, a huge
    selector and a negative maxSkew neither break the run nor place a pod where
    kube-scheduler would not."""
    bad_op = anti({"app": "web"})
    term = bad_op["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    term["labelSelector"] = {"matchExpressions": [{"key": "app", "operator": "Sideways"}]}
    nil_selector = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": HOST}]
        }
    }
    huge = anti({f"k{i}": "v" for i in range(5000)})
    pods = [
        *replicas(1, labels={"app": "web"}, affinity=bad_op, name="badop"),
        *replicas(2, labels={"app": "web"}, affinity=nil_selector, name="nil"),
        *replicas(1, labels={"app": "web"}, affinity=huge, name="huge"),
        *replicas(
            1,
            labels={"app": "web"},
            spread=[{"maxSkew": -1, "topologyKey": HOST, "whenUnsatisfiable": "DoNotSchedule"}],
            name="neg",
        ),
    ]
    sim = run(cluster(("a", {}, 3)), pods, mgr=MGR)
    report = build_report(sim)
    status = {p["name"]: p["status"] for p in report["pods"]}
    assert "error" not in status.values(), report["pods"]
    # what kube-apiserver or kube-scheduler refuses is never placed
    assert status["badop-0"] != "placed" and status["neg-0"] != "placed"
    assert status["huge-0"] == "placed"
    # a nil labelSelector matches no pod (LabelSelectorAsSelector(nil) = Nothing): both fit
    assert status["nil-0"] == status["nil-1"] == "placed"


def test_namespace_selector_reads_the_snapshots_namespace_labels():
    """``namespaceSelector`` matches namespaces by their labels: the snapshot's
    Namespace objects give them; without any, the report says what was assumed."""
    from hami_core.simulate.loader import parse_cluster, read_documents

    docs = read_documents(EXAMPLES / "snapshot.yaml")
    prod = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}
    prod["metadata"]["labels"] = {"tier": "prod"}
    selector = {"matchLabels": {"tier": "prod"}}
    other = replicas(1, labels={"app": "web"}, name="other", ns="shop")
    other[0]["spec"]["nodeSelector"] = {HOST: "gpu-a100-01"}
    picky = replicas(
        1, labels={"app": "x"}, affinity=anti({"app": "web"}, namespaceSelector=selector)
    )
    picky[0]["spec"]["nodeSelector"] = {HOST: "gpu-a100-01"}
    pods = tuple(WorkloadPod(pod=p, source="t") for p in (*other, *picky))

    with_ns = parse_cluster([*docs, prod], source="s", manager=MGR)
    sim = simulate(with_ns, Workloads(pods=pods), MGR)
    assert placed(sim) == {"other-0": "gpu-a100-01", "web-0": None}
    assert build_report(sim)["pods"][1]["notModelled"] == []

    without = parse_cluster(docs, source="s", manager=MGR)
    sim = simulate(without, Workloads(pods=pods), MGR)
    assert placed(sim)["web-0"] == "gpu-a100-01"  # no labels known: no match
    (line,) = build_report(sim)["pods"][1]["notModelled"]
    assert "namespaceSelector" in line and "no Namespace objects" in line
