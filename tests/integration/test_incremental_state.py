"""The scheduler's incremental state (``ClusterState``) against recomputation from
scratch, and the pre-filter against the full fit (hypothesis).

After any sequence of pod additions, updates (phase, annotations, binding, init
containers finishing: the charge drops to the app containers') and
deletions, node inventory changes and quota changes, every node's usage and every
namespace's quota usage kept from the store's events equal what the from-scratch
functions compute over the store's current pods.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.facts.quota import namespace_usage
from hami_core.facts.usage import node_usage
from hami_core.model import ContainerDevice
from hami_core.protocol.devicelist import encode_pod_devices
from hami_core.scheduling.scheduler import Scheduler
from tests.builders import cluster, container, gpu, manager, node, pod

NODES = ("n0", "n1", "n2")
NAMES = tuple(f"p{i}" for i in range(6))
NAMESPACES = ("default", "team")
SCHEDULER = "hami-scheduler"


def inventory(name: str, variant: int) -> dict[str, Any]:
    gpus = [
        gpu(f"GPU-{name}-{j}", index=j, memory_mib=16384 * (1 + variant % 2), split=3, numa=j % 2)
        for j in range(2 + variant % 2)
    ]
    ann = {"hami.io/device-cordon": f"GPU-{name}-0"} if variant == 2 else None
    return node(name, gpus, annotations=ann)


def allocated_pod(
    name: str,
    namespace: str,
    node_name: str,
    slices: list[list[tuple[int, int, int]]],
    *,
    inits: int,
    phase: str,
    broken: bool,
    bound: bool,
) -> dict[str, Any]:
    """A pod with an allocation on ``node_name``: per container, (device, MiB, cores)."""
    containers = [container(f"c{i}", gpu=max(1, len(s))) for i, s in enumerate(slices)]
    obj = pod(name, *containers[inits:], namespace=namespace)
    obj["spec"]["initContainers"] = containers[:inits]
    obj["spec"]["schedulerName"] = SCHEDULER
    devices = tuple(
        tuple(
            ContainerDevice(uuid=f"GPU-{node_name}-{d}", vendor="NVIDIA", memory_mib=m, cores_pct=c)
            for d, m, c in s
        )
        for s in slices
    )
    value = "GPU-x,NVIDIA,lots,0:;" if broken else encode_pod_devices(devices)
    obj["metadata"]["annotations"] = {
        "hami.io/vgpu-node": node_name,
        "hami.io/vgpu-devices-allocated": value,
    }
    if bound:
        obj["spec"]["nodeName"] = node_name
    obj["status"] = {"phase": phase}
    return obj


slice_ = st.tuples(st.integers(0, 2), st.integers(0, 9000), st.integers(0, 60))
pods = st.builds(
    lambda name, ns, n, slices, inits, phase, broken, bound: allocated_pod(
        name, ns, n, slices, inits=min(inits, len(slices)), phase=phase, broken=broken, bound=bound
    ),
    st.sampled_from([f"p{i}" for i in range(6)]),
    st.sampled_from(NAMESPACES),
    st.sampled_from(NODES),
    st.lists(st.lists(slice_, max_size=2), min_size=1, max_size=3),
    st.integers(0, 2),
    st.sampled_from(["Pending", "Running", "Running", "Succeeded", "Failed"]),
    st.sampled_from([False, False, False, True]),
    st.booleans(),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), pods),
        st.tuples(
            st.just("delete"),
            st.sampled_from(NAMESPACES),
            st.sampled_from([f"p{i}" for i in range(6)]),
        ),
        st.tuples(
            st.just("phase"),
            st.sampled_from(NAMESPACES),
            st.sampled_from([f"p{i}" for i in range(6)]),
            st.sampled_from(["Running", "Succeeded", "Failed"]),
        ),
        st.tuples(st.just("node"), st.sampled_from(NODES), st.integers(0, 2)),
        st.tuples(
            st.just("inits-done"),
            st.sampled_from(NAMESPACES),
            st.sampled_from(NAMES),
            st.sampled_from([0, 0, 1]),
        ),
        st.tuples(
            st.just("bind"),
            st.sampled_from(NAMESPACES),
            st.sampled_from([f"p{i}" for i in range(6)]),
            st.sampled_from(NODES),
        ),
        # the device plugin's progress write (what no fit reads)
        st.tuples(st.just("progress"), st.sampled_from(NAMESPACES), st.sampled_from(NAMES)),
        # a user's annotation that fits do read: the holder's device policy
        st.tuples(
            st.just("policy"),
            st.sampled_from(NAMESPACES),
            st.sampled_from(NAMES),
            st.sampled_from(["mutex", "binpack", None]),
        ),
    ),
    max_size=30,
)


def apply(c: Any, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "put":
        c.add_pod(op[1])
    elif kind == "delete":
        if (op[1], op[2]) in c._pods:
            c.delete_pod(op[1], op[2])
    elif kind == "phase":
        if (op[1], op[2]) in c._pods:
            c.set_pod_phase(op[1], op[2], op[3])
    elif kind == "inits-done":  # kubelet reports every init container exited 0
        if (op[1], op[2]) in c._pods:
            inits = c.get_pod(op[1], op[2])["spec"].get("initContainers") or []
            statuses = [
                {"name": i["name"], "state": {"terminated": {"exitCode": op[3]}}} for i in inits
            ]
            c.set_pod_status(op[1], op[2], {"initContainerStatuses": statuses})
    elif kind == "node":
        c.add_node(inventory(op[1], op[2]))
    elif kind == "progress" and (op[1], op[2]) in c._pods:
        c.patch_pod_metadata(
            op[1],
            op[2],
            annotations={
                "hami.io/bind-phase": "success",
                "hami.io/vgpu-devices-to-allocate": ";",
            },
        )
    elif kind == "policy" and (op[1], op[2]) in c._pods:
        c.patch_pod_metadata(op[1], op[2], annotations={"hami.io/gpu-scheduler-policy": op[3]})
    elif kind == "bind" and (op[1], op[2]) in c._pods:
        p = c.get_pod(op[1], op[2])
        if not p["spec"].get("nodeName"):
            c.bind_pod(op[1], op[2], uid=p["metadata"]["uid"], node=op[3])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.booleans(), operations)
def test_incremental_usage_equals_usage_recomputed_from_scratch(subscribe_first, ops):
    c = cluster(*(inventory(n, 0) for n in NODES))
    m = manager()
    types = m.device_types()
    sched = Scheduler(c, m) if subscribe_first else None
    for op in ops:
        apply(c, op)
    if sched is None:  # subscribing late replays the store's objects
        sched = Scheduler(c, m)
    for name in NODES:
        info = sched.node_info(c.get_node(name))
        assert sched.state.node(name) is not None
        assert sched.state.node(name).info == info
        expected = node_usage(info, c.pods_on_node(name), types, scheduler_name=SCHEDULER)
        assert sched.state.node_usage(name) == expected
        for p in c.pods_on_node(name):
            uid = p["metadata"]["uid"]
            assert sched.state.node_usage(name, exclude_uid=uid) == node_usage(
                info, c.pods_on_node(name), types, scheduler_name=SCHEDULER, exclude_uid=uid
            )
    for ns in NAMESPACES:
        assert sched.state.namespace_usage(ns) == namespace_usage(
            c.list_pods(namespace=ns), types, scheduler_name=SCHEDULER
        )


requests = st.fixed_dictionaries(
    {"gpu": st.integers(1, 3)},
    optional={"gpumem": st.integers(1, 40000), "gpucores": st.sampled_from([0, 10, 50, 100])},
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.lists(requests, min_size=1, max_size=6))
def test_the_prefilter_never_changes_which_nodes_fit(ops, asks):
    c = cluster(*(inventory(n, 0) for n in NODES))
    m = manager()
    for op in ops:
        apply(c, op)
    fast, full = Scheduler(c, m), Scheduler(c, m, prefilter=False)
    # Asks right at each device's free memory test the pre-filter's boundary.
    for name in NODES:
        for u in full.state.node_usage(name).values():
            if u.free_memory_mib:
                asks.append({"gpu": 1, "gpumem": u.free_memory_mib})
    for i, ask in enumerate(asks):
        p = c.add_pod(pod(f"ask{i}", container(**ask)))
        a, b = fast.filter(p, list(NODES)), full.filter(p, list(NODES))
        assert a.feasible == b.feasible
        assert {n: f.allocation for n, f in a.fits.items()} == {
            n: f.allocation for n, f in b.fits.items()
        }
        assert a.scores == b.scores
        # The memo answers a second pod of the same shape exactly as a fresh fit does.
        again = c.add_pod(pod(f"again{i}", container(**ask)))
        assert fast.filter(again, list(NODES)).feasible == a.feasible


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.lists(requests, min_size=1, max_size=3))
def test_fits_kept_across_pod_updates_answer_as_a_fresh_scheduler(ops, asks):
    """A node keeps its fits across the pod updates that charge nothing new (kubelet's
    status, the device plugin's progress write: ``ClusterState._charges_as_before``);
    after every operation the long-lived scheduler, its memos warm, answers every
    probe exactly as a scheduler started now does (a user's device-policy annotation,
    which fits read, is no such update)."""
    c = cluster(*(inventory(n, 0) for n in NODES))
    m = manager()
    warm = Scheduler(c, m)
    probes = [c.add_pod(pod(f"probe{i}", container(**ask))) for i, ask in enumerate(asks)]
    for op in ops:
        apply(c, op)
        fresh = Scheduler(c, m)
        for p in probes:
            a, b = warm.filter(p, list(NODES)), fresh.filter(p, list(NODES))
            assert {n: (f.allocation, f.reason) for n, f in a.fits.items()} == {
                n: (f.allocation, f.reason) for n, f in b.fits.items()
            }, op


def test_a_progress_write_keeps_the_nodes_fits_and_a_policy_change_does_not() -> None:
    store = cluster(inventory("n0", 0))
    sched = Scheduler(store, manager())
    held = allocated_pod(
        "p", "default", "n0", [[(0, 4000, 30)]], inits=0, phase="Running", broken=False, bound=True
    )
    store.add_pod(held)
    generation = sched.state.node("n0").generation
    store.patch_pod_metadata(
        "default",
        "p",
        annotations={"hami.io/bind-phase": "success", "hami.io/vgpu-devices-to-allocate": ";"},
    )
    store.set_pod_phase("default", "p", "Running")
    assert sched.state.node("n0").generation == generation
    store.patch_pod_metadata("default", "p", annotations={"hami.io/gpu-scheduler-policy": "mutex"})
    assert sched.state.node("n0").generation != generation
    probe = store.add_pod(pod("q", container(gpu=1, gpumem=1000)))
    fit = sched.filter(probe, ["n0"]).fits["n0"].allocation
    assert fit is not None  # the other GPU is free
    assert [d.uuid for d in fit.all_devices()] == ["GPU-n0-1"]  # GPU-n0-0 is the mutex pod's


def test_a_binding_remembered_at_the_cached_version_is_charged_at_once() -> None:
    # KubeCluster.bind_pod puts the bound, annotated pod into its cache at the unbound
    # pod's resourceVersion (the Binding answers a Status, not the pod), so that the next
    # refit on the node counts it before the watch brings the new version. The state took
    # it for an echo of the version it had and skipped it: without a node lock, binds to
    # one node one after the other over-committed it (bench_pipeline --trust all: 81 pods
    # on a node of 80 slices).
    store = cluster(inventory("n0", 0))
    sched = Scheduler(store, manager())
    unbound = pod("p", container("c0", gpu=1))
    unbound["spec"]["schedulerName"] = SCHEDULER
    unbound["metadata"].update(uid="u-p", resourceVersion="7")
    sched.state.on_event("Pod", None, unbound)
    assert all(u.used_memory_mib == 0 for u in sched.state.node_usage("n0").values())
    bound = allocated_pod(
        "p", "default", "n0", [[(0, 4000, 30)]], inits=0, phase="Pending", broken=False, bound=True
    )
    bound["metadata"].update(uid="u-p", resourceVersion="7")
    sched.state.on_event("Pod", unbound, bound)
    assert sched.state.node_usage("n0")["GPU-n0-0"].used_memory_mib == 4000
    # the watch's event of the same version and content afterwards changes nothing
    sched.state.on_event("Pod", bound, dict(bound))
    assert sched.state.node_usage("n0")["GPU-n0-0"].used_memory_mib == 4000


def test_a_quota_added_after_the_pods_counts_them() -> None:
    """A namespace's charges are read from its first ResourceQuota on (a namespace
    without one costs no charge reading per pod event): pods placed before the quota
    count against it at once, and those after it too."""
    store = cluster(inventory("n0", 0))
    sched = Scheduler(store, manager())
    for name, mib in (("a", 4000), ("b", 3000)):
        store.add_pod(
            allocated_pod(
                name,
                "team",
                "n0",
                [[(0, mib, 10)]],
                inits=0,
                phase="Running",
                broken=False,
                bound=True,
            )
        )
    assert sched.state.quota_view("team").limits == ()  # no quota yet: nothing summed
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "10000"}},
        }
    )
    view = sched.state.quota_view("team")
    assert view.used == namespace_usage(
        store.list_pods(namespace="team"), manager().device_types(), scheduler_name=SCHEDULER
    )
    assert view.used.by_vendor["NVIDIA"].memory_mib == 7000
    store.add_pod(
        allocated_pod(
            "c",
            "team",
            "n0",
            [[(1, 2000, 10)]],
            inits=0,
            phase="Running",
            broken=False,
            bound=True,
        )
    )
    assert sched.state.quota_view("team").used.by_vendor["NVIDIA"].memory_mib == 9000
    over = store.add_pod(pod("d", container(gpu=1, gpumem=2000), namespace="team"))
    fit = sched.filter(over, ["n0"]).fits["n0"]
    assert fit.allocation is None and "ResourceQuotaNotFit" in fit.reason
