"""Moore Threads: requests, inventory from capacity, fit, bind annotations and the whole
pipeline. Expected values from HAMi 2.10 ``pkg/device/mthreads/device_test.go``
(``Test_MutateAdmission``, ``Test_GetNodeDevices``, ``Test_GenerateResourceRequests``,
``TestDevices_Fit``, ``Test_PatchAnnotations``)."""

import pytest
from hami_mthreads import fit, inventory, requests

from hami_core.errors import AnnotationError, InvalidInputError
from hami_core.model import (
    ContainerDevice,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
    ReasonCode,
)
from hami_core.protocol.config import VendorConfig
from hami_core.protocol.devicelist import decode_pod_devices

from ..support import node, pipeline, pod, quota

CFG = VendorConfig()


def ctr(**limits):
    names = {
        "count": "mthreads.com/vgpu",
        "mem": "mthreads.com/sgpu-memory",
        "cores": "mthreads.com/sgpu-core",
    }
    return {"name": "main", "resources": {"limits": {names[k]: v for k, v in limits.items()}}}


def mt_node(name="mt-1", cores="32", memory="192"):
    return node(
        name, capacity={"mthreads.com/sgpu-core": cores, "mthreads.com/sgpu-memory": memory}
    )


# -- requests (Test_GenerateResourceRequests, Test_MutateAdmission) -----------------


def test_one_gpu_slice_in_512_mib_units():
    req = requests.parse_request(ctr(count="1", mem="4", cores="8"), CFG)
    assert req == DeviceRequest(vendor="Mthreads", count=1, memory_mib=2048, cores_pct=8)


def test_count_only_is_a_whole_gpu():
    # HAMi: Memreq 0, MemPercentagereq 100; the webhook then writes 96 units, 16 cores
    req = requests.parse_request(ctr(count="1"), CFG)
    assert req == DeviceRequest(vendor="Mthreads", count=1, memory_pct=100, cores_pct=16)


def test_several_gpus_are_whole_gpus():
    req = requests.parse_request(ctr(count="2", mem="2", cores="1"), CFG)
    assert req == DeviceRequest(vendor="Mthreads", count=2, memory_pct=100, cores_pct=16)


def test_memory_or_cores_without_count_ask_nothing():
    assert requests.parse_request(ctr(mem="2", cores="1"), CFG) is None


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"count": "0", "mem": "2"}, "mthreads.com/vgpu must be greater than 0"),
        ({"count": "-1", "mem": "2"}, "mthreads.com/vgpu"),
        ({"count": "1", "mem": "3"}, "valid values are 2, 4, 8, 16, 32, 64, 96"),
        ({"count": "1", "mem": "1000"}, "mthreads.com/sgpu-memory 1000 is not a valid"),
        ({"count": "1", "mem": "16Gi"}, "mthreads.com/sgpu-memory"),
        ({"count": "1", "mem": "16.5"}, "mthreads.com/sgpu-memory"),
        ({"count": "1", "mem": "2", "cores": "17"}, "above the 16 sGPU cores"),
        ({"count": "4294967296"}, "mthreads.com/vgpu"),
    ],
)
def test_illegal_values_are_denied_with_the_resource_named(limits, message):
    with pytest.raises(InvalidInputError, match=message):
        requests.parse_request(ctr(**limits), CFG)
    res = requests.mutate({"metadata": {}}, ctr(**limits), "/spec/containers/0", CFG)
    assert res is not None and message.split()[0] in (res.denial or "")


def test_webhook_writes_whole_gpus_and_the_gpu_count_annotation():
    from hami_core.testing import mutated

    p = {"metadata": {}, "spec": {"containers": [ctr(count="2")]}}
    res = requests.mutate(p, p["spec"]["containers"][0], "/spec/containers/0", CFG)
    out = mutated(p, "/spec/containers/0", res)
    limits = out["spec"]["containers"][0]["resources"]["limits"]
    assert limits["mthreads.com/sgpu-memory"] == "192" and limits["mthreads.com/sgpu-core"] == "32"
    assert out["metadata"]["annotations"]["mthreads.com/request-gpu-num"] == "2"
    # a legal slice is left as written
    p2 = {"metadata": {}, "spec": {"containers": [ctr(count="1", mem="8", cores="4")]}}
    res2 = requests.mutate(p2, p2["spec"]["containers"][0], "/spec/containers/0", CFG)
    out2 = mutated(p2, "/spec/containers/0", res2)
    assert out2["spec"]["containers"][0]["resources"]["requests"] == {
        "mthreads.com/vgpu": "1",
        "mthreads.com/sgpu-memory": "8",
        "mthreads.com/sgpu-core": "4",
    }


# -- memoryPerCard (HAMi after 2.10: MTT S5000, 160 units; mixed clusters) -----------

S5000 = VendorConfig(options={"memoryPerCard": [160]})
MIXED = VendorConfig(options={"memoryPerCard": [160, 96]})


def test_the_card_size_sets_the_legal_memory_values():
    assert requests.parse_request(ctr(count="1", mem="128"), S5000) == DeviceRequest(
        vendor="Mthreads", count=1, memory_mib=128 * 512, cores_pct=0
    )
    # the card size itself is the whole GPU, as 96 is by default
    whole = requests.parse_request(ctr(count="1", mem="160", cores="4"), S5000)
    assert whole == DeviceRequest(vendor="Mthreads", count=1, memory_pct=100, cores_pct=4)
    with pytest.raises(InvalidInputError, match="valid values are 2, 4, 8, 16, 32, 64, 128, 160"):
        requests.parse_request(ctr(count="1", mem="96"), S5000)


def test_a_tenant_cannot_state_a_size_the_cluster_has_no_card_of():
    for mem in ("128", "160"):  # S5000 sizes, on the default S4000 cluster
        with pytest.raises(InvalidInputError, match="valid values are 2, 4, 8, 16, 32, 64, 96$"):
            requests.parse_request(ctr(count="1", mem=mem), CFG)


def test_a_mixed_cluster_admits_either_models_values_as_memory():
    # 96 units is 48 GiB there, not "a whole GPU": an S5000 keeps its other 32 GiB
    assert requests.parse_request(ctr(count="1", mem="96"), MIXED) == DeviceRequest(
        vendor="Mthreads", count=1, memory_mib=96 * 512, cores_pct=0
    )
    assert requests.parse_request(ctr(count="1", mem="128"), MIXED).memory_mib == 128 * 512


def test_the_webhook_writes_the_card_size_and_nothing_when_sizes_differ():
    from hami_core.testing import mutated

    def limits(config, **kw):
        p = {"metadata": {}, "spec": {"containers": [ctr(**kw)]}}
        res = requests.mutate(p, p["spec"]["containers"][0], "/spec/containers/0", config)
        return mutated(p, "/spec/containers/0", res)["spec"]["containers"][0]["resources"]["limits"]

    assert limits(S5000, count="2")["mthreads.com/sgpu-memory"] == "320"
    assert limits(S5000, count="1")["mthreads.com/sgpu-memory"] == "160"
    mixed = limits(MIXED, count="2")
    assert "mthreads.com/sgpu-memory" not in mixed and mixed["mthreads.com/sgpu-core"] == "32"


# -- inventory (Test_GetNodeDevices) -------------------------------------------------


def test_inventory_from_capacity_as_hami_test():
    devices = inventory.node_devices(
        node("test", capacity={"mthreads.com/sgpu-memory": "1", "mthreads.com/sgpu-core": "1"}), CFG
    )
    assert devices == [
        DeviceInfo(
            uuid="test-mthreads-0",
            vendor="Mthreads",
            model="Mthreads",
            index=0,
            split_count=100,
            memory_mib=8192,
            cores_pct=16,
        )
    ]


def test_inventory_two_gpus_and_fallback_and_bad_capacity():
    devices = inventory.node_devices(mt_node(cores="32", memory="192"), CFG)
    assert [d.uuid for d in devices] == ["mt-1-mthreads-0", "mt-1-mthreads-1"]
    assert {d.memory_mib for d in devices} == {96 * 512}
    assert inventory.node_devices(node("plain"), CFG) is None  # -> register annotation
    with pytest.raises(AnnotationError, match="mthreads.com/sgpu-core"):
        inventory.node_devices(node("bad", capacity={"mthreads.com/sgpu-core": "lots"}), CFG)


# -- fit (TestDevices_Fit) --------------------------------------------------------------


def dev(uuid="dev-1", memory=8192, cores=16, index=0):
    return DeviceInfo(
        uuid=uuid,
        vendor="Mthreads",
        model="Mthreads",
        index=index,
        split_count=100,
        memory_mib=memory,
        cores_pct=cores,
    )


def run_fit(request, usage, annotations=None):
    n = NodeInfo(name="n", devices=tuple(u.device for u in usage))
    return fit.fit(
        request, n, usage, {"metadata": {"annotations": annotations or {}}}, DevicePolicy.SPREAD
    )


def test_fit_cases_of_hami():
    d = dev()
    ok = run_fit(
        DeviceRequest(vendor="Mthreads", count=1, memory_mib=1024, cores_pct=8),
        [DeviceUsage(device=d)],
    )
    assert [x.uuid for x in ok.devices] == ["dev-1"]
    mem = run_fit(
        DeviceRequest(vendor="Mthreads", count=1, memory_mib=9000, cores_pct=1),
        [DeviceUsage(device=d)],
    )
    assert mem.summary(1) == "1/1 CardInsufficientMemory"
    core = run_fit(
        DeviceRequest(vendor="Mthreads", count=1, memory_mib=1024, cores_pct=10),
        [DeviceUsage(device=d, used_count=1, used_cores_pct=8)],
    )
    assert core.summary(1) == "1/1 CardInsufficientCore"
    uuid = run_fit(
        DeviceRequest(vendor="Mthreads", count=1, memory_mib=1024),
        [DeviceUsage(device=d)],
        {"mthreads.ai/nouse-gpuuuid": "dev-1"},
    )
    assert uuid.device_reasons == {"dev-1": ReasonCode.CARD_UUID_MISMATCH}


def test_bind_annotations_name_gpu_indices_node_and_time():
    n = NodeInfo(name="mt-1", devices=(dev("a", index=0), dev("b", index=1)))
    out = fit.bind_annotations(
        n,
        ((), (ContainerDevice(uuid="b", vendor="Mthreads", memory_mib=1, cores_pct=1),)),
        clock_ns=lambda: 42,
    )
    assert out == {
        "mthreads.com/gpu-index": "1",
        "mthreads.com/predicate-time": "42",
        "mthreads.com/predicate-node": "mt-1",
    }
    assert fit.bind_annotations(n, ((),)) == {}


# -- the whole path ---------------------------------------------------------------------


def test_pipeline_slice_lands_annotated_and_allocated():
    p = pipeline(mt_node(), backends=("mthreads", "nvidia"))
    out = p.submit(
        pod(
            "mt",
            {
                "mthreads.com/vgpu": "1",
                "mthreads.com/sgpu-memory": "8",
                "mthreads.com/sgpu-core": "4",
            },
        )
    )
    assert out.denied == "" and out.error == "" and out.node == "mt-1"
    ann = p.cluster.get_pod("default", "mt")["metadata"]["annotations"]
    (entry,) = decode_pod_devices(ann["hami.io/mthreads-vgpu-devices-allocated"])
    assert entry[0].memory_mib == 4096 and entry[0].cores_pct == 4
    assert ann["mthreads.com/predicate-node"] == "mt-1"
    assert ann["mthreads.com/gpu-index"] in ("0", "1")
    assert out.envs["main"]["MTHREADS_VISIBLE_DEVICES"] == ann["mthreads.com/gpu-index"]


def test_pipeline_denies_illegal_memory_and_fills_up():
    p = pipeline(mt_node(cores="16", memory="96"), backends=("mthreads",))
    bad = p.submit(pod("bad", {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "5"}))
    assert "mthreads.com/sgpu-memory 5" in bad.denied
    whole = p.submit(pod("whole", {"mthreads.com/vgpu": "1"}))
    assert whole.node == "mt-1"
    more = p.submit(pod("more", {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "2"}))
    assert more.node is None
    assert "CardInsufficientMemory" in more.filter.failed["mt-1"]


def test_quota_in_512_mib_units():
    p = pipeline(mt_node(), backends=("mthreads",))
    p.cluster.add_quota(quota("mt", {"limits.mthreads.com/sgpu-memory": "8"}))  # 4 GiB
    ok = p.submit(pod("a", {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8"}))
    assert ok.node == "mt-1"
    over = p.submit(pod("b", {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "2"}))
    assert "limits.mthreads.com/sgpu-memory" in over.denied


@pytest.mark.parametrize(("held", "want"), [("test123", True), ("test456", False)])
def test_custom_filter_rule_as_hami(held, want):
    """HAMi's ``Test_CustomFilterRule``: a device equal to the earlier containers' one."""
    request = DeviceRequest(vendor="Mthreads", count=1, memory_mib=1024, cores_pct=1)
    usage = [DeviceUsage(device=dev("test123"))]
    allocated = ((ContainerDevice(uuid=held, vendor="Mthreads", memory_mib=1, cores_pct=1),),)
    info = NodeInfo(name="n", devices=(usage[0].device,))
    out = fit.fit(request, info, usage, {}, DevicePolicy.SPREAD, allocated)
    assert out.fits is want
    if not want:
        assert out.device_reasons == {"test123": ReasonCode.CARD_NOT_FOUND_CUSTOM_FILTER_RULE}


def two_container_pod(name, per_container_memory):
    limits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": per_container_memory}
    containers = [
        {"name": c, "image": "busybox", "resources": {"limits": dict(limits)}} for c in ("a", "b")
    ]
    return pod(name, containers=containers)


def test_pipeline_all_containers_of_a_pod_on_one_gpu():
    p = pipeline(mt_node(cores="32", memory="192"), backends=("mthreads",))
    out = p.submit(two_container_pod("together", "32"))
    assert out.node == "mt-1"
    ann = p.cluster.get_pod("default", "together")["metadata"]["annotations"]
    a, b = decode_pod_devices(ann["hami.io/mthreads-vgpu-devices-allocated"])
    assert len(a) == len(b) == 1 and a[0].uuid == b[0].uuid
    # two halves of 64 units (32 GiB each) do not fit one 96-unit GPU: the second
    # container may not go to the other, idle GPU
    p2 = pipeline(mt_node(cores="32", memory="192"), backends=("mthreads",))
    apart = p2.submit(two_container_pod("apart", "64"))
    assert apart.node is None and apart.denied == ""
    assert apart.filter is not None
    assert "CardNotFoundCustomFilterRule" in apart.filter.failed["mt-1"]


def test_add_resource_usage():
    """``device_test.go::TestDevices_AddResourceUsage``: a GPU using 2000 MiB and 15 that
    takes a container of 1024 MiB and 50 holds one more sharer, 3024 MiB, 65."""
    from ..support import usage_of

    assert usage_of("Mthreads", dev("dev-0"), (2000, 15), (1024, 50)) == (2, 3024, 65)
