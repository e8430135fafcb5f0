"""Binds without the node lock, Allocates told apart by kubelet's PodResources
(PROTOCOL.md §4), as a property: for any interleaving of binds and kubelet admissions
on one node, every container gets exactly the slice its pod was charged, the records
(the pod's progress, the region path of the answer) name the pod that really has it,
and a bind writes the Binding and nothing else. On a node in HAMi's lock mode the same
interleavings still serialize: one pod in flight at a time, under its lock.

The stand-in kubelet is kubelet 1.20's admission as it matters here: pods one at a
time, each added to its pod manager before its containers' ``Allocate`` calls (one per
container, in spec order), a container's device IDs recorded once its call answered;
it picks the IDs itself (not always where the device plugin would prefer), and its
``List`` is served to the device plugin over real gRPC (the stand-in PodResources
server) for one of the runs.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.cluster import MemoryCluster
from hami_core.deviceplugin import Allocator
from hami_core.deviceplugin.podresources import KubeletContainer, KubeletPod
from hami_core.errors import ConflictError
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.handshake import podresources_key
from hami_core.scheduling.scheduler import Scheduler
from hami_core.servers.podresources import KubeletPodResources
from tests.deviceplugin.conftest import ctr, gpu_node, gpu_pod, gpu_uuid, nvidia_manager
from tests.deviceplugin.fakepodresources import serve

NODE = "node-a"
RESOURCE = "nvidia.com/gpu"
UUIDS = [gpu_uuid(0), gpu_uuid(1)]
ALL_IDS = frozenset(f"{u}-{i}" for u in UUIDS for i in range(10))
ANSWER = "Reported_2026-12-02 02:00:00"
HOOK = Path(tempfile.mkdtemp(prefix="hami-lockfree-"))
MANAGER = nvidia_manager(HOOK)
WRITES = ("patch_node_annotations", "remove_node_annotation", "patch_pod_metadata", "bind_pod")


class Kubelet:
    """Kubelet's pod manager and device records (``PodResourcesSource``)."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
        self.used: set[str] = set()

    def list(self) -> Sequence[KubeletPod]:
        return [
            KubeletPod(
                namespace=ns,
                name=name,
                containers=tuple(
                    KubeletContainer(name=c, devices={RESOURCE: ids} if ids else {})
                    for c, ids in containers.items()
                ),
            )
            for (ns, name), containers in self.pods.items()
        ]


class Counting(MemoryCluster):
    """A cluster that counts API writes and remembers every node-lock value written."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.locks_written = 0

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name in WRITES:

            def counted(*args: Any, **kw: Any) -> Any:
                self.writes += 1
                values = args[1] if name == "patch_node_annotations" else {}
                if keys.NODE_LOCK in (values or {}) and values[keys.NODE_LOCK]:
                    self.locks_written += 1
                return attr(*args, **kw)

            return counted
        return attr


shapes = st.lists(  # per pod, per container: (devices, MiB each, cores each)
    st.lists(
        st.tuples(
            st.sampled_from([1, 2]),
            st.sampled_from([1000, 2500, 4000]),
            st.sampled_from([0, 10, 30]),
        ),
        min_size=1,
        max_size=2,
    ),
    min_size=2,
    max_size=5,
)
steps = st.lists(st.tuples(st.sampled_from(["bind", "admit"]), st.integers(0, 10)), max_size=24)


@contextlib.contextmanager
def source(kubelet: Kubelet, over_grpc: bool) -> Iterator[Any]:
    if not over_grpc:
        yield kubelet
        return
    with tempfile.TemporaryDirectory(prefix="hpr", dir="/tmp") as d:
        sock = f"{d}/kubelet.sock"
        with serve(kubelet.list, sock):
            client = KubeletPodResources(sock)
            try:
                yield client
            finally:
                client.close()


def run(mode: str, pods: list[list[tuple[int, int, int]]], ops, data, *, over_grpc: bool = False):
    lock_free = mode == "podresources"
    c = Counting()
    n = gpu_node(NODE, UUIDS)
    n["metadata"]["annotations"]["hami.io/node-handshake"] = ANSWER
    if lock_free:
        n["metadata"]["annotations"][podresources_key("hami.io/node-handshake")] = ANSWER
    c.add_node(n)
    kubelet = Kubelet()
    scheduler = Scheduler(c, MANAGER)
    created = [
        c.add_pod(
            gpu_pod(
                f"p{i}",
                *(
                    ctr(f"c{j}", gpu=g, gpumem=mem, **({"gpucores": cores} if cores else {}))
                    for j, (g, mem, cores) in enumerate(containers)
                ),
            )
        )
        for i, containers in enumerate(pods)
    ]
    unbound = list(range(len(created)))
    in_flight: list[int] = []  # bound, not yet admitted by kubelet
    binds = bind_writes = 0
    with source(kubelet, over_grpc) as pod_resources:
        allocator = Allocator(
            c,
            MANAGER,
            vendor="NVIDIA",
            node=NODE,
            known_ids=lambda: ALL_IDS,
            make_dir=lambda p: None,
            write_file=lambda p, s: None,
            make_file=lambda p, s: None,
            pod_resources=pod_resources,
            # sign's verifier in production; every pod here is the scheduler's own
            trusted=(lambda pod: True) if lock_free else None,
        )
        for kind, k in ops:
            if kind == "bind" and unbound:
                i = unbound[k % len(unbound)]
                meta = created[i]["metadata"]
                before = c.writes
                try:
                    scheduler.bind("default", meta["name"], uid=meta["uid"], node=NODE)
                except ConflictError as exc:
                    # only HAMi's lock refuses, and only while another pod is in flight
                    assert not lock_free or "no longer fits" in str(exc), exc
                    if "no longer fits" in str(exc):
                        unbound.remove(i)
                    else:
                        assert in_flight, exc
                    continue
                unbound.remove(i)
                binds += 1
                bind_writes += c.writes - before
                in_flight.append(i)
                # HAMi's lock mode: one pod in flight per node, always
                assert lock_free or len(in_flight) == 1
            elif kind == "admit" and in_flight:
                i = in_flight.pop(k % len(in_flight))
                admit(c, kubelet, allocator, created[i], data)
    if lock_free:
        assert c.locks_written == 0
        assert bind_writes == binds  # the Binding, nothing else
    else:
        assert bind_writes == 3 * binds  # HAMi's: the lock, the Binding, the label
    for i in in_flight:  # bound, never admitted: still waiting for its devices
        ann = c.get_pod("default", f"p{i}")["metadata"]["annotations"]
        assert ann[keys.BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
        assert all(decode_pod_devices(ann["hami.io/vgpu-devices-to-allocate"]))


def admit(c: MemoryCluster, kubelet: Kubelet, allocator: Allocator, created, data) -> None:
    """Kubelet admits the pod: into its pod manager first, then one Allocate per
    container, each on IDs kubelet picks among those no container holds."""
    meta = created["metadata"]
    stored = c.get_pod("default", meta["name"])
    charged = decode_pod_devices(
        stored["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    )
    record = kubelet.pods.setdefault(("default", meta["name"]), {})
    for spec in created["spec"]["containers"]:
        record[spec["name"]] = ()
    for position, spec in enumerate(created["spec"]["containers"]):
        count = int(spec["resources"]["limits"][RESOURCE])
        free = sorted(ALL_IDS - kubelet.used)
        if data.draw(st.booleans(), label="kubelet takes the preferred IDs"):
            from hami_core.deviceplugin import PreferredRequest

            ids = allocator.preferred([PreferredRequest(available=tuple(free), size=count)])[0]
        else:
            ids = data.draw(
                st.lists(st.sampled_from(free), min_size=count, max_size=count, unique=True)
            )
        (answer,) = allocator.allocate([ids])
        kubelet.used.update(ids)
        record[spec["name"]] = tuple(ids)
        mine = charged[position]
        # exactly the slice this pod's container was charged
        assert set(answer.envs["NVIDIA_VISIBLE_DEVICES"].split(",")) == {d.uuid for d in mine}
        for j, d in enumerate(mine):
            assert answer.envs[f"CUDA_DEVICE_MEMORY_LIMIT_{j}"] == f"{d.memory_mib}m"
        if mine[0].cores_pct:
            assert answer.envs["CUDA_DEVICE_SM_LIMIT"] == str(mine[0].cores_pct)
        # and the region is this pod's container's
        regions = {m.host_path for m in answer.mounts if not m.read_only}
        assert regions and all(f"{meta['uid']}_{spec['name']}" in r for r in regions), regions
    ann = c.get_pod("default", meta["name"])["metadata"]["annotations"]
    assert ann[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert not any(decode_pod_devices(ann["hami.io/vgpu-devices-to-allocate"]))


@pytest.mark.parametrize("mode", ["podresources", "hami-lock"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods=shapes, ops=steps, data=st.data())
def test_any_interleaving_gives_every_container_its_own_slice(mode, pods, ops, data):
    run(mode, pods, ops, data)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods=shapes, ops=steps, data=st.data())
def test_the_same_over_kubelets_grpc_wire(pods, ops, data):
    run("podresources", pods, ops, data, over_grpc=True)


def test_two_pods_of_different_slices_bound_at_once_are_admitted_in_either_order():
    """The case a node lock existed for: same device count, different slices, both in
    flight; kubelet admits the later one first."""
    for order in itertools.permutations([0, 1]):

        class Data:  # kubelet takes the preferred IDs
            @staticmethod
            def draw(strategy: Any, label: str = "") -> Any:
                return True

        run(
            "podresources",
            [[(1, 4000, 30)], [(1, 2500, 10)]],
            [("bind", 0), ("bind", 0), ("admit", order[0]), ("admit", 0)],
            Data,
        )


def test_unlocked_binds_to_one_node_never_both_take_the_last_slice():
    """Without the node lock, concurrent binds to one node refit one at a time (in the
    scheduler): 8 pods of 9000 MiB race for 2 GPUs of 16384 MiB, 2 fit."""
    import threading
    import time

    c = MemoryCluster()
    n = gpu_node(NODE, UUIDS)
    n["metadata"]["annotations"]["hami.io/node-handshake"] = ANSWER
    n["metadata"]["annotations"][podresources_key("hami.io/node-handshake")] = ANSWER
    c.add_node(n)
    scheduler = Scheduler(c, MANAGER)
    refit = scheduler.binder.refit

    def slow_refit(pod: Any, node: str) -> Any:
        result = refit(pod, node)
        time.sleep(0.02)  # the window two binds would both fit in
        return result

    scheduler.binder.refit = slow_refit
    pods = [c.add_pod(gpu_pod(f"p{i}", ctr("main", gpu=1, gpumem=9000))) for i in range(8)]
    bound: list[str] = []

    def bind(p: dict[str, Any]) -> None:
        with contextlib.suppress(ConflictError):
            scheduler.bind("default", p["metadata"]["name"], uid=p["metadata"]["uid"], node=NODE)
            bound.append(p["metadata"]["name"])

    threads = [threading.Thread(target=bind, args=(p,)) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(bound) == 2, bound
    used = [
        decode_pod_devices(
            c.get_pod("default", b)["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
        )[0][0].uuid
        for b in bound
    ]
    assert sorted(used) == sorted(UUIDS)
    assert keys.NODE_LOCK not in c.get_node(NODE)["metadata"]["annotations"]
