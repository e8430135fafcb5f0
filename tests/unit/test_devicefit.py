"""The extension points of ``hami_core.backend.fit`` (``FitRules``, filter options) on their
own; the vendors' use of them is tested in tests/backends."""

from hami_core.backend.fit import (
    GENERIC,
    DeviceFilters,
    FitRules,
    fit_devices,
    free_cores,
    load,
    node_score,
)
from hami_core.model import (
    ContainerDevice,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
    NodePolicy,
    ReasonCode,
)


def dev(i, *, cores=100, model="Acme X1", numa=0):
    return DeviceInfo(
        uuid=f"D-{i}",
        vendor="ACME",
        model=model,
        index=i,
        split_count=4,
        memory_mib=1000,
        cores_pct=cores,
        numa=numa,
    )


def use(d, count=0, memory=0, cores=0):
    return DeviceUsage(device=d, used_count=count, used_memory_mib=memory, used_cores_pct=cores)


NO_FILTERS = DeviceFilters()


def fit(request, usages, rules=GENERIC, filters=NO_FILTERS, policy=DevicePolicy.SPREAD):
    node = NodeInfo(name="n", devices=tuple(u.device for u in usages))
    return fit_devices(request, node, usages, filters, policy, rules)


REQ = DeviceRequest(vendor="ACME", count=1, memory_mib=100, cores_pct=50)


def test_cores_capacity_none_skips_the_cores_checks():
    full = use(dev(0, cores=0), count=1, memory=100, cores=80)
    assert fit(REQ, [full]).device_reasons == {"D-0": ReasonCode.CARD_INSUFFICIENT_CORE}
    rules = FitRules(cores_capacity=lambda u: u.device.cores_pct or None)
    result = fit(REQ, [full], rules)
    assert result.fits and result.devices[0].cores_pct == 50
    assert free_cores(full, rules) == 100 and load(full, rules) == load(full)


def test_cores_capacity_rescales_checks_and_load():
    # a device stating 20 (e.g. AI cores) read as the whole device
    rules = FitRules(cores_capacity=lambda u: 100 if u.device.cores_pct == 20 else None)
    half = use(dev(0, cores=20), count=1, memory=100, cores=60)
    assert fit(REQ, [half], rules).device_reasons == {"D-0": ReasonCode.CARD_INSUFFICIENT_CORE}
    assert free_cores(half, rules) == 40
    assert load(half, rules) == round(100 / 1000 + 60 / 100 + 1 / 4, 9)


def test_extra_check_runs_last_and_not_in_the_hints():
    def no_sharing(usage, request):
        return ReasonCode.CARD_TYPE_MISMATCH if usage.used_count else None

    rules = FitRules(extra_check=no_sharing)
    shared = use(dev(0), count=1, memory=100, cores=10)
    result = fit(REQ, [shared], rules)
    assert result.device_reasons == {"D-0": ReasonCode.CARD_TYPE_MISMATCH}
    assert (result.largest_memory_mib, result.largest_cores_pct) == (900, 90)
    # an earlier check still wins
    big = DeviceRequest(vendor="ACME", count=1, memory_mib=950)
    assert fit(big, [shared], rules).device_reasons == {"D-0": ReasonCode.CARD_INSUFFICIENT_MEMORY}


def test_link_group_keeps_several_devices_in_one_group():
    usages = [use(dev(i)) for i in range(4)]
    usages[1] = use(dev(1), count=1, memory=500)
    two = DeviceRequest(vendor="ACME", count=2, memory_mib=100)
    rules = FitRules(link_group=lambda u: u.device.index // 2)
    assert [d.uuid for d in fit(two, usages).devices] == ["D-0", "D-2"]  # spread alone
    assert [d.uuid for d in fit(two, usages, rules).devices] == ["D-2", "D-3"]
    binpack = fit(two, usages, rules, policy=DevicePolicy.BINPACK)
    assert [d.uuid for d in binpack.devices] == ["D-0", "D-1"]


def test_choose_may_pick_refuse_or_defer():
    usages = [use(dev(i)) for i in range(3)]
    two = DeviceRequest(vendor="ACME", count=2, memory_mib=100)
    last = FitRules(choose=lambda feasible, count, policy: list(feasible)[-count:])
    assert [d.uuid for d in fit(two, usages, last).devices] == ["D-1", "D-2"]
    refuse = FitRules(choose=lambda feasible, count, policy: ReasonCode.NUMA_NOT_FIT)
    result = fit(two, usages, refuse)
    assert not result.fits and result.node_reason is ReasonCode.NUMA_NOT_FIT
    defer = FitRules(choose=lambda feasible, count, policy: None)
    assert fit(two, usages, defer) == fit(two, usages)


def test_vendor_tokens_and_required_types():
    usages = [use(dev(0, model="Acme X1")), use(dev(1, model="Acme Y2"))]
    filters = DeviceFilters.from_annotations(
        {"t": "acme"}, use_type=("t",), vendor_tokens=("ACME",)
    )
    assert fit(REQ, usages, filters=filters).fits
    required = DeviceFilters.from_annotations({}, require_type=("Y2",))
    assert [d.uuid for d in fit(REQ, usages, filters=required).devices] == ["D-1"]
    assert fit(REQ, usages[:1], filters=required).device_reasons == {
        "D-0": ReasonCode.CARD_TYPE_MISMATCH
    }


def test_topology_aware_without_scores_for_these_devices_is_spread():
    usages = [use(dev(0), count=1, memory=500), use(dev(1))]
    scores = {"GPU-a": {"GPU-b": 100}}  # another vendor's devices
    node = NodeInfo(name="n", devices=tuple(u.device for u in usages), link_scores=scores)
    result = fit_devices(REQ, node, usages, DeviceFilters(), DevicePolicy.TOPOLOGY_AWARE)
    assert [d.uuid for d in result.devices] == ["D-1"]


def test_node_score_counts_the_pods_own_share():
    usages = [use(dev(0)), use(dev(1))]
    taken = (ContainerDevice(uuid="D-0", vendor="ACME", memory_mib=1000, cores_pct=100),)
    packed = node_score(usages, taken, NodePolicy.BINPACK)
    assert 0 < packed < 100
    # spread: how empty the node is after the placement, the pod's own share included
    after = [use(dev(0), count=1, memory=1000, cores=100), use(dev(1))]
    empty = 100 - 100 * sum(load(u) / 3 for u in after) / 2
    assert abs(node_score(usages, taken, NodePolicy.SPREAD) - empty) < 1e-9
    assert node_score((), taken, NodePolicy.BINPACK) == 0.0


def test_binpack_prefers_sharing_a_device_in_use_to_opening_one_beside_a_full_device():
    small = (ContainerDevice(uuid="D-1", vendor="ACME", memory_mib=100, cores_pct=10),)
    # Node A: device 0 held whole by an exclusive pod, device 1 empty (the pod opens it).
    node_a = [use(dev(0), count=1, memory=1000, cores=100), use(dev(1))]
    # Node B: device 1 half used (the pod shares it), device 0 empty.
    node_b = [use(dev(0)), use(dev(1), count=1, memory=500, cores=50)]
    a = node_score(node_a, small, NodePolicy.BINPACK)
    b = node_score(node_b, small, NodePolicy.BINPACK)
    assert b > a  # the full exclusive GPU is no reason to open another one beside it


def test_binpack_ranks_devices_in_use_first_and_does_not_strand_memory():
    # Device 0: cores nearly all taken, memory mostly free; device 1: balanced.
    usages = [
        use(dev(0), count=1, memory=200, cores=90),
        use(dev(1), count=1, memory=500, cores=50),
    ]
    req = DeviceRequest(vendor="ACME", count=1, memory_mib=100, cores_pct=10)
    chosen = fit(req, usages, policy=DevicePolicy.BINPACK).devices[0].uuid
    # On device 0 the request would take the last cores and leave 700 MiB nobody can use.
    assert chosen == "D-1"
    in_use = [use(dev(0)), use(dev(1), count=1, memory=900, cores=10)]
    assert fit(req, in_use, policy=DevicePolicy.BINPACK).devices[0].uuid == "D-1"
