"""HAMi's ``pkg/scheduler`` tests (``score_test.go``, ``scheduler_test.go``,
``webhook_test.go``) with HAMi's expected placements and reasons (issue #15 item 11).

HAMi's ``calcScore`` cases give each node's devices per container (init containers
first) or the node's failure reason; here the same pods go through admission, the
filter and bind. HAMi's numeric scores are not compared (the scores are ours,
``hami_core/backend/fit.py``), and where HAMi's reverse scan takes the last of equal idle
GPUs we take the lowest index, so such cases assert the shape (same device, distinct
devices) rather than the name."""

from __future__ import annotations

import pytest

from tests.builders import container, gpu, node, pipeline, pod

SCORE = "pkg/scheduler/score_test.go::Test_calcScore"
POLICY = "hami.io/gpu-scheduler-policy"


def _cards(name, count=1, memory_mib=8000):
    return node(
        name,
        [gpu(f"{name}-uuid{i + 1}", index=i, memory_mib=memory_mib) for i in range(count)],
    )


def _hold(p, name, uuid, *, mem, cores):
    """A running pod already using ``mem`` MiB and ``cores`` % of GPU ``uuid``."""
    out = p.submit(
        pod(
            name,
            container(gpu=1, gpumem=mem, gpucores=cores),
            annotations={"nvidia.com/use-gpuuuid": uuid},
        )
    )
    assert out.scheduled, out


def _c(name="c", n=1, mem=1000, cores=30):
    return container(name, gpu=n, gpumem=mem, gpucores=cores)


def _devices(out):
    """Per container (init first) the (uuid, memory, cores) of each device."""
    return [
        [(d.uuid, d.memory_mib, d.cores_pct) for d in c] for c in out.allocation.devices["NVIDIA"]
    ]


def _fits(out, node_name):
    alloc = out.filter.fits[node_name].allocation
    return [[(d.uuid, d.memory_mib, d.cores_pct) for d in c] for c in alloc.devices["NVIDIA"]]


def test_one_device_used_before():
    """ "one node one device one pod one container use one device,but this device before
    having use": uuid1 (half used) takes 1000 MiB, 30 %."""
    p = pipeline(_cards("node1"))
    _hold(p, "held", "node1-uuid1", mem=4000, cores=50)
    out = p.submit(pod("test1", _c(), annotations={POLICY: "spread"}))
    assert _devices(out) == [[("node1-uuid1", 1000, 30)]]


def test_spread_takes_the_idle_device():
    """ "one node two device ... but having use 50%" (spread): the idle uuid1."""
    p = pipeline(_cards("node1", 2))
    _hold(p, "held", "node1-uuid2", mem=4000, cores=50)
    out = p.submit(pod("test1", _c(), annotations={POLICY: "spread"}))
    assert _devices(out) == [[("node1-uuid1", 1000, 30)]]


@pytest.mark.parametrize("used", [False, True])
def test_one_container_two_devices(used):
    """ "one node two device one pod one container use two device" (and "...,but this two
    device before having use"): both GPUs, 1000 MiB and 30 % each."""
    p = pipeline(_cards("node1", 2))
    if used:
        _hold(p, "h1", "node1-uuid1", mem=4000, cores=50)
        _hold(p, "h2", "node1-uuid2", mem=4000, cores=50)
    out = p.submit(pod("test1", _c(n=2), annotations={POLICY: "spread"}))
    assert sorted(_devices(out)[0]) == [("node1-uuid1", 1000, 30), ("node1-uuid2", 1000, 30)]


@pytest.mark.parametrize("half_used", [False, True])
def test_two_nodes_both_fit(half_used):
    """ "two node per node having one device ..." (and "..., one device having use 50%"):
    both nodes fit, each with its own GPU."""
    p = pipeline(_cards("node1"), _cards("node2"))
    if half_used:
        _hold(p, "held", "node1-uuid1", mem=4000, cores=50)
    out = p.submit(pod("test1", _c(), annotations={POLICY: "spread"}))
    assert set(out.filter.feasible) == {"node1", "node2"} and not out.filter.failed
    assert _fits(out, "node1") == [[("node1-uuid1", 1000, 30)]]
    assert _fits(out, "node2") == [[("node2-uuid1", 1000, 30)]]


@pytest.mark.parametrize(
    ("case", "names", "asking"),
    [
        ("one node two device one pod two container use two device", ["a", "b"], 0),
        (
            "one node one device one pod two container, the second container use device",
            ["a", "b"],
            1,
        ),
        (
            "one node one device one pod with three containers, middle container uses one device.",
            ["a", "b", "c"],
            1,
        ),
    ],
)
def test_containers_without_devices_keep_their_slot(case, names, asking):
    """The container asking gets uuid1; the others get an empty slot, in container order
    (HAMi's device list has one entry per container)."""
    p = pipeline(_cards("node1"))
    cs = [_c(n) if i == asking else container(n) for i, n in enumerate(names)]
    out = p.submit(pod("test1", *cs))
    want = [[] for _ in names]
    want[asking] = [("node1-uuid1", 1000, 30)]
    assert _devices(out) == want, case


def test_spread_two_containers_not_on_the_same_device():
    """ "one node two device one pod two containers use two device with spread, should not
    in same device": 8000 MiB (a whole card) and 1000 MiB land on different GPUs."""
    p = pipeline(_cards("node1", 2))
    out = p.submit(
        pod("test1", _c("a", mem=8000), _c("b", mem=1000), annotations={POLICY: "spread"})
    )
    (first,), (second,) = _devices(out)
    assert (first[1], second[1]) == (8000, 1000) and first[0] != second[0]


@pytest.mark.parametrize("nodes", [1, 2])
def test_not_enough_memory_fails_the_node(nodes):
    """ "... not enough resource,node should be failed" and "race condition test for
    failedNodes map with two nodes failing": a 50 MiB GPU, 1000 MiB asked:
    ``1/1 CardInsufficientMemory`` for every node."""
    p = pipeline(*[_cards(f"node{i + 1}", memory_mib=50) for i in range(nodes)])
    out = p.submit(pod("test1", _c()))
    assert not out.scheduled
    assert out.filter.failed == {f"node{i + 1}": "1/1 CardInsufficientMemory" for i in range(nodes)}


def test_init_container_larger_than_any_free_memory_fails_the_node():
    """ "init container requests more memory than any single device has (should filter
    node)": 500 MiB free on each GPU, the init container asks 4000: ``2/2
    CardInsufficientMemory``."""
    p = pipeline(_cards("node1", 2))
    _hold(p, "h1", "node1-uuid1", mem=7500, cores=0)
    _hold(p, "h2", "node1-uuid2", mem=7500, cores=0)
    out = p.submit(pod("t", _c("app-small", mem=100), init=[_c("init-large", mem=4000)]))
    assert out.filter.failed == {"node1": "2/2 CardInsufficientMemory"}


def test_init_container_with_more_cores_than_any_free_fails_the_node():
    """ "init container requests more cores than any single device has": 20 % free on each
    GPU, the init container asks 30: ``2/2 CardInsufficientCore``."""
    p = pipeline(_cards("node1", 2))
    _hold(p, "h1", "node1-uuid1", mem=100, cores=80)
    _hold(p, "h2", "node1-uuid2", mem=100, cores=80)
    out = p.submit(pod("t", _c("app-light", cores=10), init=[_c("init-core-heavy", cores=30)]))
    assert out.filter.failed == {"node1": "2/2 CardInsufficientCore"}


def test_init_slot_alignment_issue_1667():
    """ "two init containers, first has no device request, second does - tests slot
    alignment (issue #1667)": the first init container has an empty slot; the second and
    the app container both get uuid1 (init containers end before the app starts)."""
    p = pipeline(_cards("node1"))
    out = p.submit(
        pod(
            "t",
            _c("app-gpu-burn"),
            init=[container("init-no-device"), _c("init-gpu-check")],
        )
    )
    assert _devices(out) == [[], [("node1-uuid1", 1000, 30)], [("node1-uuid1", 1000, 30)]]


def test_init_and_app_container_share_a_device():
    """ "one node two devices, pod has one init container ... and one regular container
    ... - tests InitContainer capacity reset" (binpack): both on one GPU (HAMi's is
    uuid2, its reverse scan; ours the lowest index)."""
    p = pipeline(_cards("node1", 2))
    out = p.submit(pod("t", _c("app"), init=[_c("init")], annotations={POLICY: "binpack"}))
    (init,), (app,) = _devices(out)
    assert init == app and init[1:] == (1000, 30)


def test_init_container_asking_more_devices_than_the_app():
    """ "init container requests MORE than app container - needsInitClone=true path": the
    init container gets both GPUs, the app one of them."""
    p = pipeline(_cards("node1", 2))
    out = p.submit(
        pod("t", _c("app-light"), init=[_c("init-heavy", n=2)], annotations={POLICY: "binpack"})
    )
    init, (app,) = _devices(out)
    assert sorted(u for u, _, _ in init) == ["node1-uuid1", "node1-uuid2"]
    assert app[0] in {u for u, _, _ in init}


def test_two_nodes_two_containers_share_each_nodes_device():
    """ "two node per node having one device one pod two container use one device": on
    each node both containers share its one GPU (30 % and 40 %)."""
    p = pipeline(_cards("node1"), _cards("node2"))
    out = p.submit(pod("test1", _c("a"), _c("b", cores=40), annotations={POLICY: "spread"}))
    for name in ("node1", "node2"):
        uuid = f"{name}-uuid1"
        assert _fits(out, name) == [[(uuid, 1000, 30)], [(uuid, 1000, 40)]]


# -- score_test.go::Test_fitInCertainDevice -------------------------------------------


def _reasons(summary):
    """HAMi's ``convertReasonToMap``: ``"3/10 A, 1/10 B"`` -> ``{"A": 3, "B": 1}``."""
    out = {}
    for part in summary.split(", "):
        count, _, code = part.partition(" ")
        out[code] = int(count.split("/")[0])
    return out


def test_fit_in_certain_device_reasons():
    """``score_test.go::Test_fitInCertainDevice`` "test device kind of not fit reason": ten
    NVIDIA GPUs (the Hygon and MetaX ones of HAMi's list never reach the NVIDIA fit), a
    request of 2 x 1024 MiB and 20 % naming a UUID list: ``CardUuidMismatch`` 3,
    ``CardTimeSlicingExhausted`` 4, ``CardInsufficientMemory`` 2, ``CardInsufficientCore``
    1. Its other cases are ``TestDevices_Fit``'s (``test_devices_fit_reasons``)."""
    from hami_core.backend import DeviceFilters
    from tests.compat.test_hami_go_tests import _fit, _req, _usage

    def dev(uuid, used, count, usedmem, usedcores):
        return _usage(
            uuid,
            used=used,
            count=count,
            usedmem=usedmem,
            totalmem=8192,
            usedcores=usedcores,
            numa=1,
        )

    devices = [
        *(dev(u, 1, 4, 2048, 1) for u in "bqi"),
        *(dev(u, 4, 4, 2048, 1) for u in "cjul"),
        *(dev(u, 1, 4, 8048, 1) for u in "dm"),
        dev("e", 1, 4, 2048, 90),
    ]
    result = _fit(
        devices,
        _req(nums=2, mem=1024, cores=20),
        DeviceFilters(use_uuid=frozenset("afcdeghjlum")),
    )
    assert not result.fits
    assert _reasons(result.summary(len(devices))) == {
        "CardUuidMismatch": 3,
        "CardTimeSlicingExhausted": 4,
        "CardInsufficientMemory": 2,
        "CardInsufficientCore": 1,
    }


def test_fit_in_certain_device_numa_not_fit():
    """``Test_fitInCertainDevice`` "numa not fit": two GPUs on different NUMA nodes, two
    asked with ``nvidia.com/numa-bind: "true"``: the node fails with ``NumaNotFit``
    (HAMi counts it per device with ``AllocatedCardsInsufficientRequest``; here it is
    the node's reason, as no NUMA node holds both)."""
    p = pipeline(node("node-1", [gpu("test-0", index=0, numa=0), gpu("test-1", index=1, numa=1)]))
    out = p.submit(
        pod("t", _c(n=2, mem=1024, cores=1), annotations={"nvidia.com/numa-bind": "true"})
    )
    assert not out.scheduled
    assert out.filter.failed == {"node-1": "NumaNotFit"}


# -- score_test.go::Test_Nvidia_GPU_Topology, Test_fitInDevices_MultiTypePartition ------


def _topology_node(scores, numa):
    from hami_core.protocol.topology import encode_link_scores

    cards = [gpu(u, index=i, numa=numa[i], memory_mib=8192) for i, u in enumerate("abcdef")]
    return node(
        "node-1", cards, annotations={"hami.io/node-nvidia-score": encode_link_scores(scores)}
    )


def _all_ones(hub=None, hub_score=100, rest=1):
    out = {u: {v: rest for v in "abcdef" if v != u} for u in "abcdef"}
    for a, b in hub or ():
        out[a][b] = out[b][a] = hub_score
    return out


def test_nvidia_gpu_topology_takes_the_best_linked_set():
    """``Test_Nvidia_GPU_Topology`` "test nvidia gpu topology-aware": six GPUs, a-f and c-f
    linked at 100, all else 1; three asked: f, c and a."""
    scores = _all_ones(hub=[("a", "f"), ("c", "f")])
    p = pipeline(_topology_node(scores, numa=[0, 0, 1, 1, 1, 1]))
    out = p.submit(pod("t", _c(n=3, mem=1024, cores=20), annotations={POLICY: "topology-aware"}))
    assert sorted(u for u, _, _ in _devices(out)[0]) == ["a", "c", "f"]


def test_nvidia_gpu_topology_single_card_keeps_the_well_linked_ones():
    """``Test_Nvidia_GPU_Topology`` "test Single Card Topology": a-e all linked at 100, f
    at 1 to each; one asked: f (the pairs stay free for multi-GPU pods)."""
    scores = {u: {v: 100 for v in "abcde" if v != u} for u in "abcde"}
    for u in "abcde":
        scores[u]["f"] = 1
    scores["f"] = dict.fromkeys("abcde", 1)
    p = pipeline(_topology_node(scores, numa=[0, 0, 1, 1, 1, 1]))
    out = p.submit(pod("t", _c(n=1, mem=1024, cores=20), annotations={POLICY: "topology-aware"}))
    assert _devices(out) == [[("f", 1024, 20)]]


# -- pkg/device/nvidia/device_test.go::TestFit_TopologyNegativeScores (issue 24 item 2) --

#: HAMi's pair scores, written as the node annotation (each side listed).
NEGATIVE = {
    "dev-0": {"dev-1": -5, "dev-2": -3},
    "dev-1": {"dev-0": -5, "dev-2": -1},
    "dev-2": {"dev-0": -3, "dev-1": -1},
}


def _negative_node():
    from hami_core.protocol.topology import encode_link_scores

    cards = [gpu(u, index=i, memory_mib=8192) for i, u in enumerate(NEGATIVE)]
    return node(
        "node-1", cards, annotations={"hami.io/node-nvidia-score": encode_link_scores(NEGATIVE)}
    )


@pytest.mark.parametrize(("n", "expected"), [(1, ["dev-0"]), (2, ["dev-1", "dev-2"])])
def test_nvidia_topology_negative_scores(n, expected):
    """Negative scores are scores (HAMi's writer may rank links below 0): the node is
    registered and topology-aware placement compares their sums as HAMi does. One GPU:
    the lowest sum to the others (dev-0, -8); two: the pair of highest score (-1). Before
    issue 24 the node was ``NodeUnregistered``."""
    p = pipeline(_negative_node())
    out = p.submit(pod("t", _c(n=n, mem=100, cores=10), annotations={POLICY: "topology-aware"}))
    assert out.scheduled, out
    assert sorted(u for u, _, _ in _devices(out)[0]) == expected


def test_multi_type_partition_keeps_each_vendors_devices_apart():
    """``Test_fitInDevices_MultiTypePartition``: one container asking two vendors' devices
    gets one entry per vendor, each holding only that vendor's device (HAMi's bug leaked
    the first vendor's device into the second's list)."""
    from tests.backends.hygon.test_pipeline import HAMI_LEGACY

    n = node("node-1", [gpu("uuid-a")], annotations={"hami.io/node-dcu-register": HAMI_LEGACY})
    p = pipeline(n)
    both = _c(mem=1024, cores=1)
    both["resources"]["limits"].update(
        {"hygon.com/dcunum": "1", "hygon.com/dcumem": "1024", "hygon.com/dcucores": "1"}
    )
    out = p.submit(pod("t", both))
    assert out.scheduled, out
    devices = out.allocation.devices
    assert [[d.uuid for d in c] for c in devices["NVIDIA"]] == [["uuid-a"]]
    assert [[d.vendor for d in c] for c in devices["DCU"]] == [["DCU"]]


# -- webhook_test.go ----------------------------------------------------------------


def test_handle_admits_a_gpu_pod():
    """``webhook_test.go::TestHandle``: a pod asking ``nvidia.com/gpu: 1`` through the
    webhook's handler is allowed (and sent to HAMi's scheduler)."""
    from tests.unit.test_admission import review

    out = review(pod("test-pod", container("container1", gpu=1)))
    assert out.allowed and out.mutated
    assert {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"} in out.patch


@pytest.mark.parametrize(
    ("case", "namespace", "limits", "fits"),
    [
        ("mlu memory within quota", "mlu-mem", {"vmemory": 50}, True),
        ("mlu memory over quota", "mlu-mem", {"vmemory": 200}, False),
        ("mlu cores over quota", "mlu-core", {"vmemory": 1, "vcore": 60}, False),
        ("mlu in a namespace with no quota", "unquotaed", {"vmemory": 10000}, True),
    ],
)
def test_fit_resource_quota_non_nvidia_mlu(case, namespace, limits, fits):
    """``webhook_test.go::TestFitResourceQuotaNonNvidia``, the MLU cases: the quota of
    ``cambricon.com/mlu.smlu.vmemory`` counts the resource's own units (100 units = 25600
    MiB, not 100 MiB); ``mlu-core`` allows 50 % and 20 are in use (a running pod)."""
    from tests.backends.cambricon import helpers as mluh
    from tests.unit.test_admission import review

    cards = [mluh.mlu(f"MLU-{i}", index=i) for i in range(2)]
    p = pipeline(mluh.node("mlu-1", cards))
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "mlu-mem"},
            "spec": {"hard": {"limits.cambricon.com/mlu.smlu.vmemory": "100"}},
        }
    )
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "mlu-core"},
            "spec": {"hard": {"limits.cambricon.com/mlu.smlu.vcore": "50"}},
        }
    )
    held = mluh.pod("held", mluh.container(vmlu=1, vmemory=1, vcore=20), namespace="mlu-core")
    assert p.submit(held).scheduled
    candidate = mluh.pod("mlu-pod", mluh.container(vmlu=1, **limits), namespace=namespace)
    out = review(candidate, store=p.cluster)
    assert out.allowed is fits, (case, out.message)
    if not fits:
        assert "cambricon.com/mlu.smlu" in out.message


@pytest.mark.parametrize(
    ("case", "dcumem", "fits"),
    [
        ("dcu memory within quota once the factor is applied", 800, True),
        ("dcu memory over quota", 1200, False),
    ],
)
def test_fit_resource_quota_non_nvidia_dcu(case, dcumem, fits):
    """``TestFitResourceQuotaNonNvidia``, the DCU cases: with Hygon's ``memoryFactor`` 2 a
    pod's ``hygon.com/dcumem`` books twice that in MiB, and ``limits.hygon.com/dcumem:
    1000`` is compared with the memory as the pod writes it (800 fits, 1200 does not),
    at admission and at fit. Was: the booked 1600 MiB against 1000, every such pod
    denied."""
    from tests.backends.hygon.test_pipeline import HAMI_LEGACY, dcu_node, dcu_pod
    from tests.unit.test_admission import review

    config = {"hygon": {"memoryFactor": 2}}
    p = pipeline(dcu_node("dcu-1", HAMI_LEGACY), config=config)
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "dcu-mem"},
            "spec": {"hard": {"limits.hygon.com/dcumem": "1000"}},
        }
    )
    candidate = dcu_pod("dcu-pod", count=1, mem=dcumem)
    candidate["metadata"]["namespace"] = "dcu-mem"
    out = review(candidate, store=p.cluster, config=config)
    assert out.allowed is fits, (case, out.message)
    placed = p.submit(candidate)
    assert placed.scheduled is fits, placed
    if fits:
        (dev,) = placed.allocation.devices["DCU"][0]
        assert dev.memory_mib == 2 * dcumem
        # a second such pod would pass 1000 units: the quota holds with the first running
        second = dcu_pod("dcu-pod-2", count=1, mem=dcumem)
        second["metadata"]["namespace"] = "dcu-mem"
        assert not review(second, store=p.cluster, config=config).allowed


# -- scheduler_test.go --------------------------------------------------------------


def _usage_of(p, node_name):
    sched = p.scheduler
    usage = sched.node_usage(sched.node_info(p.cluster.get_node(node_name)))
    return {
        uuid: (u.used_count, u.used_memory_mib, u.used_cores_pct, u.device.healthy)
        for uuid, u in usage.items()
    }


def test_get_nodes_usage_sums_the_pods_on_a_device():
    """``scheduler_test.go::Test_getNodesUsage``: two pods of 100 MiB and 10 % on GPU0:
    GPU0 has 2 sharers, 200 MiB, 20 %; GPU1 nothing."""
    p = pipeline(
        node("node1", [gpu("GPU0", memory_mib=1024, numa=1), gpu("GPU1", index=1, numa=1)])
    )
    for name in ("test1", "test2"):
        _hold(p, name, "GPU0", mem=100, cores=10)
    usage = _usage_of(p, "node1")
    assert usage["GPU0"] == (2, 200, 20, True)
    assert usage["GPU1"][:3] == (0, 0, 0)


def test_get_nodes_usage_node_missing_from_the_cache_fails():
    """``Test_getNodesUsage_NodeMissingFromSnapshotIsNotCachedAsNil``: a node name
    kube-scheduler sends that the cache has no Node for fails the filter (with a reason),
    it is not answered as an empty node."""
    p = pipeline(_cards("node1"))
    result = p.scheduler.filter(pod("q", _c()), ["node1", "node-gone"])
    assert result.feasible == ("node1",)
    assert result.failed == {"node-gone": "NodeUnregistered (node not in the scheduler's cache)"}


@pytest.mark.parametrize(
    ("case", "stale", "valid"),
    [("StaleOnly", True, False), ("ValidOnly", False, True), ("MixedStaleAndValid", True, True)],
)
def test_get_nodes_usage_stale_pod_device_allocation(case, stale, valid):
    """``Test_getNodesUsage_StalePodDeviceAllocation``: a running pod whose device list
    names GPU-A, no longer on the node (only GPU-B is), counts nothing and marks no
    device unhealthy; a valid pod of 200 MiB and 20 % on GPU-B still counts."""
    from hami_core.protocol import encode_inventory

    p = pipeline(node("node1", [gpu("GPU-A", numa=1), gpu("GPU-B", index=1, numa=1)]))
    if stale:
        _hold(p, "stale-pod", "GPU-A", mem=100, cores=10)
    if valid:
        _hold(p, "valid-pod", "GPU-B", mem=200, cores=20)
    only_b = encode_inventory([gpu("GPU-B", index=1, numa=1)])
    p.cluster.patch_node_annotations("node1", {"hami.io/node-nvidia-register": only_b})
    usage = _usage_of(p, "node1")
    assert set(usage) == {"GPU-B"}, case
    assert usage["GPU-B"] == ((1, 200, 20, True) if valid else (0, 0, 0, True)), case


def test_get_nodes_usage_a_ghost_uuid_poisons_no_device():
    """``Test_getNodesUsage_StalePodDeviceAllocation`` "MultipleDevices": a pod naming
    GPU-GHOST on a node with GPU-A and GPU-B: both stay healthy with nothing counted."""
    from hami_core.protocol import encode_inventory

    p = pipeline(node("node1", [gpu("GPU-GHOST", memory_mib=1024)]))
    _hold(p, "ghost-pod", "GPU-GHOST", mem=512, cores=50)
    two = encode_inventory([gpu("GPU-A"), gpu("GPU-B", index=1)])
    p.cluster.patch_node_annotations("node1", {"hami.io/node-nvidia-register": two})
    assert _usage_of(p, "node1") == {"GPU-A": (0, 0, 0, True), "GPU-B": (0, 0, 0, True)}


def _filter_cluster():
    """``Test_Filter``'s cluster: node1 (device1, device2), node2 (device3, device4); a
    finished-binding pod holds 2000 MiB / 25 % of device1, another 6000 MiB / 75 % of
    device4, and a pod without devices runs on node2."""
    p = pipeline(
        node("node1", [gpu("device1", memory_mib=8000), gpu("device2", index=1, memory_mib=8000)]),
        node("node2", [gpu("device3", memory_mib=8000), gpu("device4", index=1, memory_mib=8000)]),
    )
    _hold(p, "pod1", "device1", mem=2000, cores=25)
    _hold(p, "pod2", "device4", mem=6000, cores=75)
    return p


@pytest.mark.parametrize(
    ("case", "node_policy", "gpu_policy", "want"),
    [
        ("node use binpack gpu use binpack policy", "binpack", "binpack", ("node2", {"device4"})),
        (
            "node use binpack gpu use spread policy",
            "binpack",
            "spread",
            ("node2", {"device3", "device4"}),
        ),
        ("node use spread gpu use binpack policy", "spread", "binpack", ("node1", {"device1"})),
        ("node use spread gpu use spread policy", "spread", "spread", ("node1", {"device2"})),
    ],
)
def test_filter_policy_matrix(case, node_policy, gpu_policy, want):
    """``scheduler_test.go::Test_Filter``, the case named: a 1000 MiB, 20 % pod goes to
    the node and device HAMi's matrix gives (binpack/spread: either GPU of node2, a tie
    in HAMi's test)."""
    p = _filter_cluster()
    annotations = {POLICY: gpu_policy, "hami.io/node-scheduler-policy": node_policy}
    out = p.submit(pod("test", _c(mem=1000, cores=20), annotations=annotations))
    (device,) = _devices(out)[0]
    assert (out.node, device[0] in want[1]) == (want[0], True), (case, out.node, device)


def test_filter_init_containers_use_the_max_resource():
    """``Test_Filter`` "pod with init containers fits correctly using max resource logic
    (Binpack)": an init container of 5000 MiB and an app container of 4000, each 20 %.
    The max-resource logic is HAMi's: the init container's share is released before the
    app container starts, so both fit on device1 (6000 MiB free), which they would not
    if summed. The node differs by design: HAMi's binpack scores whole-node fullness and
    opens device3 on node2 (the fuller node); ours shares device1, in use on node1,
    before opening an empty GPU anywhere (issue #13's binpack, ``fit.node_score``)."""
    p = _filter_cluster()
    annotations = {POLICY: "binpack", "hami.io/node-scheduler-policy": "binpack"}
    out = p.submit(
        pod(
            "test",
            _c("app", mem=4000, cores=20),
            init=[_c("init", mem=5000, cores=20)],
            annotations=annotations,
        )
    )
    assert out.node == "node1"
    assert _devices(out) == [[("device1", 5000, 20)], [("device1", 4000, 20)]]


def test_bind_of_a_missing_pod_or_node_fails_and_leaves_nothing():
    """``Test_Bind_DelPodOnGetPodFailure`` / ``Test_Bind_DelPodOnGetNodeFailure``: a bind
    whose pod or node cannot be read fails with "not found"; nothing is left behind (no
    node lock, no device annotation), so the pod books no device."""
    from hami_core.errors import NotFoundError

    p = pipeline(_cards("node1"))
    with pytest.raises(NotFoundError, match="not found"):
        p.scheduler.bind("default", "gone", uid="u-1", node="node1")
    waiting = p.cluster.add_pod(pod("p", _c(), scheduler_name="hami-scheduler"))
    with pytest.raises(NotFoundError, match="not found"):
        p.scheduler.bind("default", "p", uid=waiting["metadata"]["uid"], node="node-gone")
    ann = p.cluster.get_pod("default", "p")["metadata"].get("annotations") or {}
    assert not any(k.startswith("hami.io/vgpu-devices") for k in ann)
    assert "hami.io/mutex.lock" not in p.cluster.get_node("node1")["metadata"]["annotations"]
    assert _usage_of(p, "node1")["node1-uuid1"][:3] == (0, 0, 0)


def test_filter_forgets_a_pod_that_is_gone():
    """``Test_Filter_EvictsStaleEntry``: a pod holding 500 MiB that no longer exists in
    the API server counts nothing at the next filter (HAMi evicts its cache entry; usage
    here is the live pods')."""
    p = pipeline(_cards("node1"))
    _hold(p, "stale", "node1-uuid1", mem=500, cores=10)
    assert _usage_of(p, "node1")["node1-uuid1"][:3] == (1, 500, 10)
    p.cluster.delete_pod("default", "stale")
    assert _usage_of(p, "node1")["node1-uuid1"][:3] == (0, 0, 0)
    out = p.submit(pod("next", _c(mem=8000, cores=100)))
    assert _devices(out) == [[("node1-uuid1", 8000, 100)]]
