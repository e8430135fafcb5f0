"""Iluvatar: requests, inventory, fit and the whole pipeline. Expected values from HAMi
2.10 ``pkg/device/iluvatar/device_test.go`` (``TestGetNodeDevices``,
``Test_GenerateResourceRequests``, ``Test_Fit``, ``Test_MutateAdmission``)."""

import pytest
from hami_iluvatar import fit, requests

from hami_core.errors import InvalidInputError
from hami_core.model import (
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
    ReasonCode,
)
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.inventory import decode_inventory
from hami_core.testing import mutated

from ..support import node, pipeline, pod, quota

#: HAMi's TestGetNodeDevices annotation (legacy 7-field form).
HAMI_REGISTER = "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae,10,8192,100,MR-V100,0,true:"


def ctr(chip="MR-V100", name="main", **limits):
    keys = {
        "count": f"iluvatar.ai/{chip}-vgpu",
        "mem": f"iluvatar.ai/{chip}.vMem",
        "cores": f"iluvatar.ai/{chip}.vCore",
    }
    return {"name": name, "resources": {"limits": {keys[k]: v for k, v in limits.items()}}}


def test_inventory_as_hami_registers_it():
    (d,) = decode_inventory(HAMI_REGISTER, node="node-01", vendor="MR-V100")
    assert (d.uuid, d.split_count, d.memory_mib, d.cores_pct, d.model, d.healthy) == (
        "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae",
        10,
        8192,
        100,
        "MR-V100",
        True,
    )


def test_requests_in_256_mib_units():
    # HAMi: vMem 1000 -> Memreq 256000, vCore 100
    assert requests.parse_request(ctr(count="1", mem="1000", cores="100")) == DeviceRequest(
        vendor="MR-V100", count=1, memory_mib=256000, cores_pct=100
    )
    # count only: MemPercentagereq 100, Coresreq 0
    assert requests.parse_request(ctr(count="1")) == DeviceRequest(
        vendor="MR-V100", count=1, memory_pct=100
    )
    assert requests.parse_request(ctr("BI-V150", count="2", mem="16")) == DeviceRequest(
        vendor="BI-V150", count=2, memory_mib=4096, cores_pct=100
    )
    assert requests.parse_request(ctr(mem="4")) is None
    assert (
        requests.parse_request({"name": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}})
        is None
    )


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"count": "0", "mem": "4"}, "iluvatar.ai/MR-V100-vgpu must be greater than 0"),
        ({"count": "1", "mem": "16Gi"}, "iluvatar.ai/MR-V100.vMem"),
        ({"count": "1", "mem": "16.0Gi"}, "iluvatar.ai/MR-V100.vMem"),
        ({"count": "1", "cores": "101"}, "iluvatar.ai/MR-V100.vCore 101 is above 100 per GPU"),
        ({"count": "2", "cores": "201"}, "above 100 per GPU"),
        ({"count": "1.5"}, "iluvatar.ai/MR-V100-vgpu"),
    ],
)
def test_illegal_values_are_denied(limits, message):
    with pytest.raises(InvalidInputError, match=message):
        requests.parse_request(ctr(**limits))
    res = requests.mutate(ctr(**limits), "/spec/containers/0")
    assert res is not None and res.denial and message.split()[0] in res.denial


def test_webhook_sets_vcore_for_several_gpus_and_the_container_name_env():
    p = {"metadata": {}, "spec": {"containers": [ctr(count="2", name="train")]}}
    res = requests.mutate(p["spec"]["containers"][0], "/spec/containers/0")
    out = mutated(p, "/spec/containers/0", res)
    c = out["spec"]["containers"][0]
    assert c["resources"]["limits"]["iluvatar.ai/MR-V100.vCore"] == "200"
    assert c["env"] == [{"name": "SOL_CONTINER_NAME", "value": "train"}]
    again = requests.mutate(c, "/spec/containers/0")
    assert mutated(out, "/spec/containers/0", again) == out


def dev(uuid, *, memory=128, cores=100, index=0):
    return DeviceInfo(
        uuid=uuid,
        vendor="MR-V100",
        model="MR-V100",
        index=index,
        split_count=100,
        memory_mib=memory,
        cores_pct=cores,
    )


def run(request, usage, annotations=None):
    return fit.fit(
        request,
        NodeInfo(name="n", devices=tuple(u.device for u in usage)),
        usage,
        {"metadata": {"annotations": annotations or {}}},
        DevicePolicy.SPREAD,
    )


def test_fit_cases_of_hami():
    req = DeviceRequest(vendor="MR-V100", count=1, memory_mib=64, cores_pct=50)
    ok = run(req, [DeviceUsage(device=dev("dev-0")), DeviceUsage(device=dev("dev-1", index=1))])
    assert len(ok.devices) == 1 and ok.devices[0].memory_mib == 64 and ok.devices[0].cores_pct == 50
    mem = run(
        DeviceRequest(vendor="MR-V100", count=1, memory_mib=512, cores_pct=50),
        [DeviceUsage(device=dev("dev-0"))],
    )
    assert mem.summary(1) == "1/1 CardInsufficientMemory"
    core = run(req, [DeviceUsage(device=dev("dev-0"), used_count=1, used_cores_pct=100)])
    assert core.summary(1) == "1/1 CardInsufficientCore"
    excluded = run(
        req, [DeviceUsage(device=dev("dev-0"))], {"hami.io/no-use-MR-V100-uuid": "dev-0"}
    )
    assert excluded.device_reasons == {"dev-0": ReasonCode.CARD_UUID_MISMATCH}
    chosen = run(
        req,
        [DeviceUsage(device=dev("dev-0")), DeviceUsage(device=dev("dev-1", index=1))],
        {"hami.io/use-MR-V100-uuid": "dev-1"},
    )
    assert [d.uuid for d in chosen.devices] == ["dev-1"]


def ilu_node(name="ilu-1", chip="MR-V100"):
    register = "".join(f"ILU-{name}-{i},10,32768,100,{chip},0,true:" for i in range(2))
    return node(
        name,
        annotations={f"hami.io/node-{chip}-register": register},
        capacity={f"iluvatar.ai/{chip}-vgpu": "20"},
    )


def test_pipeline_chip_pods_land_on_their_chip_only():
    p = pipeline(
        ilu_node("ilu-v100"), ilu_node("ilu-v150", chip="BI-V150"), backends=("iluvatar", "nvidia")
    )
    out = p.submit(
        pod(
            "v150",
            {
                "iluvatar.ai/BI-V150-vgpu": "1",
                "iluvatar.ai/BI-V150.vMem": "16",
                "iluvatar.ai/BI-V150.vCore": "50",
            },
        )
    )
    assert out.denied == "" and out.error == "" and out.node == "ilu-v150"
    stored = p.cluster.get_pod("default", "v150")
    ann = stored["metadata"]["annotations"]
    (entry,) = decode_pod_devices(ann["hami.io/BI-V150-devices-allocated"])
    assert entry[0].memory_mib == 4096 and entry[0].cores_pct == 50 and entry[0].vendor == "BI-V150"
    assert decode_pod_devices(ann["hami.io/BI-V150-devices-to-allocate"]) == ((),)  # answered
    assert stored["spec"]["containers"][0]["env"] == [
        {"name": "SOL_CONTINER_NAME", "value": "main"},
        # nvidia is installed too: a container asking for no NVIDIA GPU gets none
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
    ]
    two = p.submit(pod("v100x2", {"iluvatar.ai/MR-V100-vgpu": "2"}))
    assert two.node == "ilu-v100"
    full = p.submit(
        pod("more", {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vCore": "10"})
    )
    assert full.node is None and full.filter.failed["ilu-v100"] == "2/2 CardInsufficientMemory"


def test_quota_in_256_mib_units():
    p = pipeline(ilu_node(), backends=("iluvatar",))
    p.cluster.add_quota(quota("q", {"limits.iluvatar.ai/MR-V100.vMem": "64"}))  # 16 GiB
    assert (
        p.submit(pod("a", {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "64"})).node
        == "ilu-1"
    )
    over = p.submit(pod("b", {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "1"}))
    assert "limits.iluvatar.ai/MR-V100.vMem" in over.denied


def test_allocate_gives_the_device_nodes_of_the_containers_gpus_by_index():
    from hami_iluvatar import allocate

    from hami_core.model import ContainerDevice

    gpus = [
        DeviceInfo(
            uuid=f"ILU-{i}",
            vendor="MR-V100",
            model="MR-V100",
            index=i,
            split_count=10,
            memory_mib=32768,
            cores_pct=100,
        )
        for i in range(3)
    ]
    slices = tuple(
        ContainerDevice(uuid=u, vendor="MR-V100", memory_mib=1024, cores_pct=100)
        for u in ("ILU-2", "ILU-1")
    )
    out = allocate.allocate(slices, gpus)
    assert [n.host_path for n in out.device_nodes] == ["/dev/iluvatar2", "/dev/iluvatar1"]
    # an index nobody knows is an error, never GPU 0
    with pytest.raises(InvalidInputError, match="ILU-2 is not on this node"):
        allocate.allocate(slices, [])
    with pytest.raises(InvalidInputError, match="ILU-9"):
        allocate.allocate(
            (ContainerDevice(uuid="ILU-9", vendor="MR-V100", memory_mib=1, cores_pct=1),), gpus
        )


def test_pipeline_allocation_names_the_chosen_gpu_node():
    p = pipeline(ilu_node(), backends=("iluvatar",))
    out = p.submit(pod("one", {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "4"}))
    assert out.node == "ilu-1" and out.error == ""
    ann = p.cluster.get_pod("default", "one")["metadata"]["annotations"]
    (entry,) = decode_pod_devices(ann["hami.io/MR-V100-devices-allocated"])
    index = int(entry[0].uuid.rsplit("-", 1)[-1])
    (node_,) = out.allocations["main"].device_nodes
    assert node_.host_path == f"/dev/iluvatar{index}"


def test_fit_mutex_rejects_used_device():
    """``pkg/device/iluvatar/device_test.go::TestFit_MutexRejectsUsedDevice``: with
    ``hami.io/gpu-scheduler-policy: mutex`` a GPU already used by one container is refused,
    ``1/1 ExclusiveDeviceAllocateConflict``."""
    gpu = DeviceInfo(
        uuid="dev-0",
        vendor="MR-V100",
        model="MR-V100",
        split_count=100,
        memory_mib=128,
        cores_pct=100,
    )
    usage = (DeviceUsage(device=gpu, used_count=1),)
    out = fit.fit(
        DeviceRequest(vendor="MR-V100", count=1, memory_mib=64, cores_pct=50),
        NodeInfo(name="n", devices=(gpu,)),
        usage,
        {"metadata": {"annotations": {"hami.io/gpu-scheduler-policy": "mutex"}}},
        DevicePolicy.SPREAD,
    )
    assert not out.fits and out.summary(1) == "1/1 ExclusiveDeviceAllocateConflict"
