"""HAMi's own Go tests as a checklist (issue item 11): each behaviour they assert that we
implement, with HAMi's expected value. Every test names its source (file::test, case).
The whole list, with what is not applicable and why, is docs/hami-go-tests.md."""

from __future__ import annotations

import pytest
from hami_nvidia.requests import parse_request

from hami_core.backend import DeviceFilters, fit_devices
from hami_core.facts.policy import resolve_policies
from hami_core.model import (
    ContainerDevice,
    DeviceInfo,
    DevicePolicy,
    DeviceRequest,
    DeviceUsage,
    NodeInfo,
)
from hami_core.protocol import decode_pod_devices, encode_pod_devices
from hami_core.protocol.config import VendorConfig
from tests.builders import container, gpu, manager, node, pipeline, pod
from tests.unit.test_admission import limits_of, patched, review

NV = "pkg/device/nvidia/device_test.go"


def _usage(
    uuid="dev-0",
    *,
    index=0,
    used=0,
    count=100,
    usedmem=0,
    totalmem=1280,
    totalcore=100,
    usedcores=0,
    numa=0,
    health=True,
):
    """HAMi's ``device.DeviceUsage`` fields (Count, Used, Usedmem, Totalmem, ...)."""
    d = DeviceInfo(
        uuid=uuid,
        vendor="NVIDIA",
        model="NVIDIA-Tesla T4",
        index=index,
        split_count=count,
        memory_mib=totalmem,
        cores_pct=totalcore,
        numa=numa,
        healthy=health,
    )
    return DeviceUsage(device=d, used_count=used, used_memory_mib=usedmem, used_cores_pct=usedcores)


def _req(nums=1, mem=512, pct=0, cores=50):
    return DeviceRequest(
        vendor="NVIDIA", count=nums, memory_mib=mem, memory_pct=pct, cores_pct=cores
    )


NO_FILTERS = DeviceFilters()


def _fit(devices, request, filters=NO_FILTERS, policy=DevicePolicy.SPREAD):
    return fit_devices(request, NodeInfo(name="n"), devices, filters, policy)


@pytest.mark.parametrize(
    ("case", "devices", "request_", "filters", "reason"),
    [
        (
            "fit fail: memory not enough",
            [_usage(totalmem=128)],
            _req(mem=512),
            DeviceFilters(),
            "1/1 CardInsufficientMemory",
        ),
        (
            "fit fail: core not enough",
            [_usage(totalmem=1024, usedcores=100)],
            _req(),
            DeviceFilters(),
            "1/1 CardInsufficientCore",
        ),
        (
            "fit fail: user assign use uuid mismatch",
            [_usage("dev-1")],
            _req(nums=1),
            DeviceFilters(use_uuid=frozenset({"dev-0"})),
            "1/1 CardUuidMismatch",
        ),
        (
            "fit fail: user assign no use uuid match",
            [_usage("dev-0")],
            _req(nums=1),
            DeviceFilters(nouse_uuid=frozenset({"dev-0"})),
            "1/1 CardUuidMismatch",
        ),
        (
            "fit fail: card overused",
            [_usage(used=100)],
            _req(),
            DeviceFilters(),
            "1/1 CardTimeSlicingExhausted",
        ),
        (
            "fit fail:  card exclusively",
            [_usage(used=20)],
            _req(cores=100),
            DeviceFilters(),
            "1/1 ExclusiveDeviceAllocateConflict",
        ),
        (
            "fit fail:  CardComputeUnitsExhausted",
            [_usage(used=20, usedcores=100)],
            _req(cores=0),
            DeviceFilters(),
            "1/1 CardComputeUnitsExhausted",
        ),
        (
            "fit fail:  CardNotHealth",
            [_usage(used=20, usedcores=10, health=False)],
            _req(mem=0, pct=10, cores=20),
            DeviceFilters(),
            "1/1 CardNotHealth",
        ),
    ],
)
def test_devices_fit_reasons(case, devices, request_, filters, reason):
    """``pkg/device/nvidia/device_test.go::TestDevices_Fit`` (the case named)."""
    result = _fit(devices, request_, filters)
    assert not result.fits and result.summary(len(devices)) == reason, case


def test_devices_fit_memory_percentage():
    """``TestDevices_Fit`` "fit success:  memory percentage": 10 % of 1280 MiB on dev-0."""
    result = _fit([_usage(used=20, usedcores=10)], _req(mem=0, pct=10, cores=20))
    assert [(d.uuid, d.memory_mib, d.cores_pct) for d in result.devices] == [("dev-0", 128, 20)]


def test_node_with_fewer_devices_than_asked():
    """``pkg/scheduler/score.go`` (asserted by ``pkg/scheduler/score_test.go::Test_fitInDevices`` "request devices nums cannot exceed the total number of devices on the node",
    ``NodeInsufficientDevice``): more devices asked than the node has of the type."""
    result = _fit([_usage()], _req(nums=2))
    assert result.node_reason is not None and result.node_reason.value == "NodeInsufficientDevice"


def test_device_cordon():
    """``pkg/device/nvidia/device_test.go::TestFit_DeviceCordon``: a cordoned GPU is
    ``CardCordoned`` and the other one is used."""
    cordoned = DeviceUsage(device=_usage("dev-0").device, cordoned=True)
    result = _fit([cordoned, _usage("dev-1", index=1)], _req())
    assert [d.uuid for d in result.devices] == ["dev-1"]
    alone = _fit([cordoned], _req())
    assert alone.summary(1) == "1/1 CardCordoned"


def test_zero_memory_percentage_is_the_whole_card():
    """``TestZeroMemoryPercentageIsAccountedAsWholeCard``: ``gpumem-percentage: 0`` books
    the whole 11264 MiB card; a card with 11260 MiB used does not fit."""
    c = {
        "name": "test",
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"}},
    }
    req = parse_request(c, VendorConfig())
    empty = _fit([_usage(count=10, totalmem=11264)], req)
    assert empty.devices[0].memory_mib == 11264
    full = _fit([_usage(count=10, totalmem=11264, usedmem=11260)], req)
    assert "CardInsufficientMemory" in full.summary(1)


@pytest.mark.parametrize(
    ("case", "section", "resources", "cores"),
    [
        (
            "exclusive via percentage",
            "limits",
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"},
            "100",
        ),
        (
            "exclusive via percentage in requests only",
            "requests",
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"},
            "100",
        ),
        (
            "non-exclusive percentage",
            "limits",
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"},
            "0",
        ),
        ("no memory fields defaults to exclusive", "limits", {"nvidia.com/gpu": "1"}, "100"),
        (
            "explicit cores remains unchanged",
            "limits",
            {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "70"},
            "70",
        ),
        (
            "explicit cores in requests remains unchanged",
            "requests",
            {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "55"},
            "55",
        ),
        (
            "memory size present treated as shareable",
            "limits",
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"},
            "0",
        ),
    ],
)
def test_mutate_admission_defaults_exclusive_core(case, section, resources, cores):
    """``TestMutateAdmissionDefaultsExclusiveCore`` (the case named): the cores the
    webhook writes (HAMi writes none where we write the default 0: the same request)."""
    p = pod("p", {"name": "c", "image": "x", "resources": {section: dict(resources)}})
    assert limits_of(patched(p, review(p)))["limits"]["nvidia.com/gpucores"] == cores, case


def test_mutate_admission_runtime_class_name():
    """``TestMutateAdmission_RuntimeClassName``: the configured name is set on a pod asking
    NVIDIA devices."""
    p = pod("p", container(gpu=1))
    out = patched(p, review(p, config={"nvidia": {"runtimeClassName": "nvidia"}}))
    assert out["spec"]["runtimeClassName"] == "nvidia"


def test_mutate_admission_overwrite_env():
    """``TestMutateAdmission_OverwriteEnv`` (HAMi ``pkg/device/nvidia/device_test.go``):
    with ``overwriteEnv`` a container without NVIDIA resources is no GPU container and
    gets ``NVIDIA_VISIBLE_DEVICES=none``."""
    p = pod("p", container())
    out = review(p, config={"nvidia": {"overwriteEnv": True}})
    assert out.allowed and not out.mutated  # HAMi: MutateAdmission returns false
    env = patched(p, out)["spec"]["containers"][0]["env"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in env


def test_mutate_admission_priority_env():
    """``TestMutateAdmission_Priority``: ``nvidia.com/priority`` becomes
    ``CUDA_TASK_PRIORITY`` in the container's env."""
    p = pod("p", container(gpu=1, priority=1))
    env = {e["name"]: e["value"] for e in patched(p, review(p))["spec"]["containers"][0]["env"]}
    assert env["CUDA_TASK_PRIORITY"] == "1"


def test_mutate_admission_core_policy_from_the_config():
    """``TestMutateAdmission_CorePolicy``: a configured core policy ``force`` (HAMi's
    ``gpuCorePolicy``) puts ``GPU_CORE_UTILIZATION_POLICY=force`` (HAMi's
    ``CoreLimitSwitch``) in the env of a count-only container. HAMi's webhook writes it;
    here the device plugin's Allocate answer carries it (the container sees the same)."""
    p = pipeline(node("n", [gpu("GPU-0")]), config={"nvidia": {"corePolicy": "force"}})
    out = p.submit(pod("p", container(gpu=1)))
    assert out.envs["main"]["GPU_CORE_UTILIZATION_POLICY"] == "force"


def test_check_type_allocate_mode():
    """``TestCheckType_AllocateMode``: a device whose mode ``nvidia.com/vgpu-mode`` does
    not list is not a match (``CardTypeMismatch``)."""
    from hami_nvidia.fit import filters_of

    dev = _usage()
    mig = DeviceUsage(
        device=DeviceInfo(
            uuid="m", vendor="NVIDIA", split_count=1, memory_mib=10, cores_pct=100, mode="mig"
        )
    )
    f = filters_of({"metadata": {"annotations": {"nvidia.com/vgpu-mode": "mig"}}})
    assert _fit([dev], _req(mem=1), f).summary(1) == "1/1 CardTypeMismatch"
    assert _fit([mig], _req(mem=1), f).fits


@pytest.mark.parametrize(
    ("case", "use", "nouse", "uuid", "ok"),
    [
        ("don't set GPUUseUUID and GPUNoUseUUID annotation", None, None, "GPU-1", True),
        ("use set, device match", "GPU-1,GPU-2", None, "GPU-1", True),
        ("use set, device don't match", "GPU-2", None, "GPU-1", False),
        ("nouse set, device match", None, "GPU-1", "GPU-1", False),
        ("nouse set, device don't match", None, "GPU-2", "GPU-1", True),
        ("both set, device in use list but also in nouse list", "GPU-1", "GPU-1", "GPU-1", False),
        ("both set, device in use list and not in nouse list", "GPU-1", "GPU-2", "GPU-1", True),
        ("use list with spaces around uuids", " GPU-1 , GPU-2 ", None, "GPU-1", True),
        ("empty GPUUseUUID annotation should not filter out any device", "", None, "GPU-1", True),
        ("whitespace-only GPUUseUUID annotation", "   ", None, "GPU-1", True),
        ("empty GPUNoUseUUID annotation should not exclude any device", None, "", "GPU-1", True),
    ],
)
def test_check_uuid(case, use, nouse, uuid, ok):
    """``pkg/device/devices_test.go::TestCheckUUID`` (the case named), through NVIDIA's
    ``nvidia.com/use-gpuuuid`` / ``nvidia.com/nouse-gpuuuid``."""
    from hami_nvidia.fit import filters_of

    ann = {}
    if use is not None:
        ann["nvidia.com/use-gpuuuid"] = use
    if nouse is not None:
        ann["nvidia.com/nouse-gpuuuid"] = nouse
    assert filters_of({"metadata": {"annotations": ann}}).uuid_ok(uuid) is ok, case


def test_decode_pod_devices_two_devices():
    """``pkg/device/devices_test.go::Test_DecodePodDevices`` "annos having two device":
    two containers of 500 MiB / 3 cores each (HAMi's decoder also yields an empty third
    entry for the trailing ``;``; we read ``;`` as the end of each container)."""
    value = (
        "GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76,NVIDIA,500,3:;"
        "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,NVIDIA,500,3:;"
    )
    got = decode_pod_devices(value)
    assert [[(d.uuid, d.vendor, d.memory_mib, d.cores_pct) for d in c] for c in got] == [
        [("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", "NVIDIA", 500, 3)],
        [("GPU-ebe7c3f7-303d-558d-435e-99a160631fe4", "NVIDIA", 500, 3)],
    ]
    assert encode_pod_devices(got) == value


def test_decode_pod_devices_bad_annotation():
    """``TestDecodePodDevices_BadAnnotation``: ``uuid,type,100:;`` is an error."""
    from hami_core.errors import AnnotationError

    with pytest.raises(AnnotationError):
        decode_pod_devices("uuid,type,100:;")


def test_empty_container_and_pod_device_coding():
    """``TestEmptyContainerDevicesCoding`` / ``TestEmptyPodDeviceCoding``: empty lists
    encode to the empty container entry and decode back."""
    assert decode_pod_devices(encode_pod_devices(((),))) == ((),)
    dev = ContainerDevice(uuid="GPU-1", vendor="NVIDIA", memory_mib=1, cores_pct=0)
    assert decode_pod_devices(encode_pod_devices(((), (dev,)))) == ((), (dev,))


def test_resourcereqs_with_init_containers():
    """``pkg/device/devices_test.go::TestResourcereqs_WithInitContainers``: requests in
    wire order, init containers first, then the app containers."""
    from hami_core.facts.podrequest import read_pod_request

    p = pod(
        "p",
        container("app", gpu=1, gpumem=2000),
        init=[container("init", gpu=1, gpumem=1000)],
    )
    req = read_pod_request(p, manager())
    assert [(c.name, c.init, c.devices[0].memory_mib) for c in req.containers] == [
        ("init", True, 1000),
        ("app", False, 2000),
    ]


def test_get_gpu_scheduler_policy_by_pod():
    """``pkg/util/util_test.go::TestGetGPUSchedulerPolicyByPod`` and
    ``TestPolicyContains``: the pod's annotation wins over the default; a comma list
    contains each of its tokens."""
    cfg = manager().config
    assert resolve_policies(pod("p"), cfg).device is DevicePolicy.SPREAD
    annotated = pod("p", annotations={"hami.io/gpu-scheduler-policy": "binpack,numa"})
    chain = resolve_policies(annotated, cfg).device_chain
    assert chain.primary is DevicePolicy.BINPACK and DevicePolicy.NUMA in chain.tie_breaks


def test_node_policy_binpack_prefers_the_fuller_node():
    """``pkg/scheduler/policy/node_policy_test.go::TestLess`` (binpack orders the node with more
    used first, spread the emptier)."""
    for policy, want in (("binpack", "busy"), ("spread", "idle")):
        p2 = pipeline(node("busy", [gpu("GPU-B")]), node("idle", [gpu("GPU-I")]))
        p2.cluster.add_pod(
            {
                "metadata": {
                    "name": "old",
                    "namespace": "default",
                    "annotations": {
                        "hami.io/vgpu-node": "busy",
                        "hami.io/vgpu-devices-allocated": "GPU-B,NVIDIA,4000,0:;",
                        "hami.io/bind-phase": "success",
                    },
                },
                "spec": {
                    "nodeName": "busy",
                    "schedulerName": "hami-scheduler",
                    "containers": [container(gpu=1, gpumem=4000)],
                },
                "status": {"phase": "Running"},
            }
        )
        out = p2.submit(
            pod(
                "new",
                container(gpu=1, gpumem=1000),
                annotations={"hami.io/node-scheduler-policy": policy},
            )
        )
        assert out.node == want, policy


# -- pkg/scheduler/webhook_test.go -----------------------------------------------------

WH = "pkg/scheduler/webhook_test.go"


def test_webhook_pod_has_node_name_is_denied():
    """``pkg/scheduler/webhook_test.go::TestPodHasNodeName``: a GPU pod with a preset
    ``nodeName`` is denied."""
    p = pod("test-pod", container("container1", gpu=1))
    p["spec"]["nodeName"] = "test-node"
    assert not review(p).allowed


def test_webhook_pod_for_a_different_scheduler_is_allowed_untouched():
    """``TestPodHasDifferentScheduler``: allowed, nothing patched."""
    p = pod("test-pod", container("container1", gpu=1))
    p["spec"]["schedulerName"] = "different-scheduler"
    out = review(p)
    assert out.allowed and not out.patch


def test_webhook_empty_containers_denied():
    """``TestEmptyContainersDenied``: a pod with no containers is denied."""
    out = review({"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": []}})
    assert not out.allowed and "spec.containers is empty" in out.message


def test_webhook_empty_scheduler_name_is_set():
    """``TestSchedulerNameEmptyNoOverwrite``: a GPU pod without ``schedulerName`` gets a
    patch setting it to the scheduler's name."""
    p = pod("p", container(gpu=1))
    ops = [op for op in review(p).patch if op["path"] == "/spec/schedulerName"]
    assert [op["value"] for op in ops] == ["hami-scheduler"]


def test_webhook_non_gpu_pod_allowed():
    """``TestNonGPUPodAllowedAdmission``: CPU and memory only: allowed, not ours."""
    c = {"name": "c", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "256Mi"}}}
    out = review(pod("p", c))
    assert out.allowed and not out.mutated


def test_webhook_quota_init_container_peak_sequence():
    """``TestFitResourceQuota_InitContainerPeakSequence``: quota 30000 MiB; pod1 (init
    20000, app 10000) allowed and holds its peak 20000; pod2 the same is denied; once
    pod1's init container finished it holds 10000 and pod2 is allowed."""
    from tests.compat.test_init_charge import _terminated

    p = pipeline(node("node-1", [gpu("GPU-A", memory_mib=81920)]))
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "30000"}},
        }
    )

    def pod_n(name):
        return pod(
            name,
            container("app", gpu=1, gpumem=10000),
            init=[container("init", gpu=1, gpumem=20000)],
            namespace="team",
        )

    assert review(pod_n("pod1"), store=p.cluster).allowed
    assert p.submit(pod_n("pod1")).scheduled
    assert not review(pod_n("pod2"), store=p.cluster).allowed
    p.cluster.set_pod_status("team", "pod1", {"initContainerStatuses": [_terminated("init")]})
    assert review(pod_n("pod2"), store=p.cluster).allowed


def test_webhook_quota_counts_every_device():
    """``TestFitResourceQuotaCountsEveryDevice``: each device of a multi-device request
    counts against the quota (HAMi: 2 MLUs x 40 of 60 units is over). Shown with NVIDIA
    (2 x 40000 MiB against 60000): hami-cambricon refuses a multi-MLU sMLU slice at
    admission, as Cambricon's device plugin cannot give one."""
    from hami_core.cluster import MemoryCluster

    store = MemoryCluster()
    store.add_quota(
        {
            "metadata": {"name": "q", "namespace": "multi"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "60000"}},
        }
    )
    two = review(pod("p", container(gpu=2, gpumem=40000), namespace="multi"), store=store)
    assert not two.allowed and two.reason == "ResourceQuotaNotFit"
    assert "this pod 80000" in two.message
    assert review(pod("q", container(gpu=1, gpumem=40000), namespace="multi"), store=store).allowed


# -- pkg/device/hygon, pkg/device/cambricon: GenerateResourceRequests ----------------------


def _vendor_cfg(backend):
    from hami_core.plugin import BackendManager

    return BackendManager.from_entry_points(disabled=[]).vendor_config(backend)


@pytest.mark.parametrize(
    ("case", "limits", "requests", "want"),
    [
        (
            "dcuResourceCount,dcuesourceMem and dcuResourceCores set to limits and request",
            {"hygon.com/dcunum": "1", "hygon.com/dcucores": "1", "hygon.com/dcumem": "1024"},
            {"hygon.com/dcunum": "1", "hygon.com/dcucores": "1", "hygon.com/dcumem": "1024"},
            (1, 1024, 0, 1),
        ),
        (
            "dcuResourceMem,dcuResourceCores don't set limit and dcuResourceCount set to limits and request",
            {"hygon.com/dcunum": "1"},
            {"hygon.com/dcunum": "1", "hygon.com/dcucores": "1", "hygon.com/dcumem": "1024"},
            (1, 1024, 0, 1),
        ),
        (
            "dcuResourceMem don't set limit and request,dcuResourceCores don't set limit and dcuResourceCount set to limits and request",
            {"hygon.com/dcunum": "1"},
            {"hygon.com/dcunum": "1", "hygon.com/dcucores": "1"},
            (1, 0, 100, 1),
        ),
    ],
)
def test_hygon_generate_resource_requests(case, limits, requests, want):
    """``pkg/device/hygon/device_test.go::Test_GenerateResourceRequests`` (the case named):
    (Nums, Memreq, MemPercentagereq, Coresreq)."""
    from hami_hygon.requests import parse_request as hygon_request

    r = hygon_request(
        {"name": "c", "resources": {"limits": limits, "requests": requests}}, _vendor_cfg("hygon")
    )
    assert (r.count, r.memory_mib, r.memory_pct, r.cores_pct) == want, case


@pytest.mark.parametrize(
    ("case", "limits"),
    [
        (
            "oversized dcu memory request exceeds int32 range",
            {"hygon.com/dcunum": "1", "hygon.com/dcumem": "16Gi"},
        ),
        ("oversized dcu count exceeds int32 range", {"hygon.com/dcunum": "2200000000"}),
        ("negative dcu cores", {"hygon.com/dcunum": "1", "hygon.com/dcucores": "-1"}),
    ],
)
def test_hygon_out_of_range_requests_are_refused(case, limits):
    """``Test_GenerateResourceRequests`` / ``_OutOfRangeValues``: HAMi drops the request
    (no DCU); we refuse it with the resource named (never scheduled as something else)."""
    from hami_hygon.requests import parse_request as hygon_request

    from hami_core.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="hygon.com/dcu"):
        hygon_request({"name": "c", "resources": {"limits": limits}}, _vendor_cfg("hygon"))


@pytest.mark.parametrize(
    ("case", "limits", "want"),
    [
        (
            "resourcecoresname,resourcecountname and resourcememoryname set to limits and request",
            {
                "cambricon.com/vmlu": "1",
                "cambricon.com/mlu.smlu.vmemory": "1000",
                "cambricon.com/mlu.smlu.vcore": "2",
            },
            (1, 256000, 0, 2),
        ),
        (
            "resourcecoresname don't set to limits and requests",
            {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vcore": "2"},
            (1, 0, 100, 2),
        ),
        (
            "resourcememoryname don't set to limits and requests",
            {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "1000"},
            (1, 256000, 0, 100),
        ),
    ],
)
def test_cambricon_generate_resource_requests(case, limits, want):
    """``pkg/device/cambricon/device_test.go::Test_GenerateResourceRequests`` (the case
    named; 256 MiB per memory unit; memory without vcore books cores 100, as HAMi's
    ``corenum`` default)."""
    from hami_cambricon.requests import parse_request as mlu_request

    r = mlu_request(
        {"name": "c", "resources": {"limits": limits, "requests": limits}}, _vendor_cfg("cambricon")
    )
    assert (r.count, r.memory_mib, r.memory_pct, r.cores_pct) == want, case


@pytest.mark.parametrize(
    "value", ["16Gi", "1.5"], ids=["memory overflowing int32", "decimal-form memory"]
)
def test_cambricon_bad_memory_is_refused(value):
    """``Test_GenerateResourceRequests`` "memory overflowing int32 is rejected, not
    truncated to zero" / "decimal-form memory request is rejected, not treated as zero"."""
    from hami_cambricon.requests import parse_request as mlu_request

    from hami_core.errors import InvalidInputError

    limits = {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": value}
    with pytest.raises(InvalidInputError, match="vmemory"):
        mlu_request({"name": "c", "resources": {"limits": limits}}, _vendor_cfg("cambricon"))


# -- mutex in every vendor's Fit ------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "vendor"),
    [
        ("pkg/device/nvidia/device_test.go::TestFit_MutexPolicy", "NVIDIA"),
        (
            "pkg/device/cambricon/device_test.go::TestDevices_Fit 'mutex policy rejects used device'",
            "MLU",
        ),
        (
            "pkg/device/hygon/device_test.go::TestDevices_Fit 'mutex policy rejects used device'",
            "DCU",
        ),
        ("pkg/device/ascend/device_test.go 'mutex policy rejects used device'", "Ascend910B3"),
    ],
)
def test_mutex_rejects_a_used_device_in_every_vendor(source, vendor):
    """The case named in ``source``: one device used once (Count 100, 128 MiB), request 1
    x 64 MiB, 50 % cores: ``1/1 ExclusiveDeviceAllocateConflict`` under ``mutex``; the
    same device takes it without the annotation."""
    from hami_core.plugin import BackendManager

    m = BackendManager.from_entry_points(disabled=[])
    dev = DeviceInfo(
        uuid="dev-0",
        vendor=vendor,
        model=vendor,
        index=0,
        split_count=100,
        memory_mib=128,
        cores_pct=100,
    )
    usage = (DeviceUsage(device=dev, used_count=1),)
    node_info = NodeInfo(name="n", devices=(dev,))
    req = DeviceRequest(vendor=vendor, count=1, memory_mib=64, cores_pct=50)
    mutex = {"metadata": {"annotations": {"hami.io/gpu-scheduler-policy": "mutex"}}}
    refused = m.fit(req, node_info, usage, pod=mutex, policy=DevicePolicy.SPREAD)
    assert refused.summary(1) == "1/1 ExclusiveDeviceAllocateConflict", source
    assert m.fit(req, node_info, usage, pod={"metadata": {}}, policy=DevicePolicy.SPREAD).fits


def test_kunlun_vxpu_mutex():
    """``pkg/device/kunlun/device_test.go::TestKunlunVDevices_Fit_Mutex``: 8 shared XPUs
    each used once (24576 of 98304 MiB), request 1 x 24576 MiB: shared by default,
    ``8/8 ExclusiveDeviceAllocateConflict`` under mutex."""
    from hami_core.plugin import BackendManager

    m = BackendManager.from_entry_points(disabled=[])
    devs = [
        DeviceInfo(
            uuid=f"XPU-{i}",
            vendor="XPU",
            model="P800",
            index=i,
            split_count=4,
            memory_mib=98304,
            cores_pct=100,
        )
        for i in range(8)
    ]
    node_info = NodeInfo(name="n", devices=tuple(devs))
    usage = tuple(DeviceUsage(device=d, used_count=1, used_memory_mib=24576) for d in devs)
    req = DeviceRequest(vendor="XPU", count=1, memory_mib=24576)
    assert m.fit(req, node_info, usage, pod={"metadata": {}}, policy=DevicePolicy.SPREAD).fits
    mutex = {"metadata": {"annotations": {"hami.io/gpu-scheduler-policy": "mutex"}}}
    refused = m.fit(req, node_info, usage, pod=mutex, policy=DevicePolicy.SPREAD)
    assert refused.summary(8) == "8/8 ExclusiveDeviceAllocateConflict"


def _nv(limits=None, requests=None, config=None):
    res = {}
    if limits is not None:
        res["limits"] = dict(limits)
    if requests is not None:
        res["requests"] = dict(requests)
    r = parse_request({"name": "c", "resources": res}, config or VendorConfig())
    return None if r is None else (r.count, r.memory_mib, r.memory_pct, r.cores_pct)


G, M, P, C = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
)


@pytest.mark.parametrize(
    ("case", "limits", "requests", "want"),
    [
        ("gpu count only — defaults to 100% memory", {G: "1"}, None, (1, 0, 100, 100)),
        ("gpu count + explicit memory", {G: "2", M: "4096"}, None, (2, 4096, 0, 0)),
        ("gpu count + memory percentage", {G: "1", P: "50"}, None, (1, 0, 50, 0)),
        ("gpu count + explicit cores", {G: "1", C: "50"}, None, (1, 0, 100, 50)),
        ("no gpu resource — returns empty request", {}, None, None),
        ("gpu in Requests (not Limits) — falls back to Requests", None, {G: "1"}, (1, 0, 100, 100)),
        (
            "gpu count + memory percentage of 0 — treated as unset",
            {G: "1", P: "0"},
            None,
            (1, 0, 100, 0),
        ),
        (
            "memory percentage of 0 in Requests — treated as unset",
            {G: "1"},
            {P: "0"},
            (1, 0, 100, 0),
        ),
        (
            "memory percentage of 0 + explicit memory — explicit memory wins",
            {G: "1", P: "0", M: "2000"},
            None,
            (1, 2000, 0, 0),
        ),
    ],
)
def test_generate_resource_requests(case, limits, requests, want):
    """``pkg/device/nvidia/device_test.go::TestGenerateResourceRequests``, the case named:
    (count, memory MiB, memory %, cores). HAMi's ``MemPercentagereq: 101`` beside a
    stated memory is its "no percentage" sentinel, memory % 0 here. A count-only container
    books cores 100: HAMi's webhook writes them before this function runs
    (``defaultExclusiveCoreIfNeeded``; ``TestMutateAdmissionDefaultsExclusiveCore``), a
    stated percentage of 0 does not."""
    assert _nv(limits, requests) == want, case


@pytest.mark.parametrize(
    ("case", "limits"),
    [
        ("byte-scale memory quantity that overflows int32 is rejected", {G: "1", M: "16Gi"}),
        ("decimal-form memory request is rejected, not treated as zero", {G: "1", M: "16.0Gi"}),
    ],
)
def test_generate_resource_requests_refusals(case, limits):
    """``TestGenerateResourceRequests``, the case named: HAMi returns an empty request, we
    refuse the container naming ``nvidia.com/gpumem``."""
    from hami_core.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match=r"nvidia\.com/gpumem"):
        _nv(limits)


def test_generate_resource_requests_default_memory():
    """``TestGenerateResourceRequests_DefaultMemory``: with ``defaultMemory: 512`` a
    count-only container asks 512 MiB."""
    assert _nv({G: "1"}, config=VendorConfig(default_memory_mib=512))[:3] == (1, 512, 0)


def _nv_devices(*specs):
    return [
        _usage(uuid, index=i, count=10, totalmem=8192, numa=numa)
        for i, (uuid, numa) in enumerate(specs)
    ]


def test_numa_bind_keeps_a_container_on_one_numa_node():
    """``pkg/scheduler/numa_sort_test.go::TestNumaBindSortPreservesAffinity``: with
    ``nvidia.com/numa-bind: "true"``, 2 x 100 MiB from A (NUMA 0), B (NUMA 0), C (NUMA 1)
    are A and B; without it two GPUs of different NUMA nodes are allowed."""
    from hami_core.plugin import BackendManager

    m = BackendManager.from_entry_points(disabled=[])
    usage = tuple(_nv_devices(("A_n0", 0), ("C_n1", 1), ("B_n0", 0)))
    node_info = NodeInfo(name="n", devices=tuple(u.device for u in usage))
    req = _req(nums=2, mem=100, cores=10)
    bound = {"metadata": {"annotations": {"nvidia.com/numa-bind": "true"}}}
    got = m.fit(req, node_info, usage, pod=bound, policy=DevicePolicy.SPREAD)
    assert sorted(d.uuid for d in got.devices) == ["A_n0", "B_n0"]
    free = m.fit(req, node_info, usage, pod={"metadata": {}}, policy=DevicePolicy.SPREAD)
    assert sorted(d.uuid for d in free.devices) == ["A_n0", "C_n1"]


def test_spread_takes_across_numa_without_numa_bind():
    """``numa_sort_test.go::TestScorePrimarySelectsAcrossNuma``: three idle GPUs, no
    NUMA binding, 1 x 100 MiB: P (NUMA 0) is taken (HAMi by its score order; here idle
    GPUs tie and the lowest index wins)."""
    usage = _nv_devices(("P_n0", 0), ("Q_n1", 1), ("R_n1", 1))
    result = _fit(usage, _req(nums=1, mem=100, cores=10))
    assert [d.uuid for d in result.devices] == ["P_n0"]


@pytest.mark.parametrize(
    ("case", "containers", "inits", "allowed"),
    [
        ("quota passed", [dict(gpu=1, gpumem=100)], [], True),
        ("quota exceeded", [dict(gpu=1, gpumem=1024)], [], False),
        ("request multiple gpus", [dict(gpu=2, gpumem=1024)], [], False),
        ("request multiple gpus within quota", [dict(gpu=2, gpumem=400)], [], True),
        (
            "InitContainers run sequentially: max init fits quota, but simple sum would exceed",
            [dict(gpu=1, gpumem=500)],
            [dict(gpu=1, gpumem=800), dict(gpu=1, gpumem=800)],
            True,
        ),
        (
            "InitContainer request exceeds quota directly",
            [dict(gpu=1, gpumem=100)],
            [dict(gpu=1, gpumem=1500)],
            False,
        ),
    ],
)
def test_webhook_fit_resource_quota(case, containers, inits, allowed):
    """``pkg/scheduler/webhook_test.go::TestFitResourceQuota``, the case named: the
    namespace may use 2000 MiB and 400 % cores and already uses 1000 MiB and 200 % (here a
    running pod holding them, through a real ``ResourceQuota``)."""
    p = pipeline(
        node("node-1", [gpu("GPU-A", memory_mib=81920), gpu("GPU-B", index=1, memory_mib=81920)])
    )
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {
                "hard": {"limits.nvidia.com/gpumem": "2000", "limits.nvidia.com/gpucores": "400"}
            },
        }
    )
    held = pod("held", container("c", gpu=2, gpumem=500, gpucores=100), namespace="team")
    assert p.submit(held).scheduled
    candidate = pod(
        "new",
        *[container(f"c{i}", **c) for i, c in enumerate(containers)],
        init=[container(f"i{i}", **c) for i, c in enumerate(inits)],
        namespace="team",
    )
    out = review(candidate, store=p.cluster)
    assert out.allowed is allowed, case
    if not allowed:
        assert "limits.nvidia.com/gpumem" in out.message or "nvidia.com/gpumem" in out.message, (
            out.message
        )


def test_a_terminating_pod_keeps_its_devices_until_it_ends():
    """``pkg/scheduler/scheduler_test.go::Test_SchedulerTerminatingPodRetainsCache``
    (HAMi #1368): a running pod with a deletionTimestamp still holds its GPU; once in a
    terminal phase (Succeeded) it holds nothing."""
    p = pipeline(node("node-1", [gpu("GPU-A")]))
    assert p.submit(pod("old", container(gpu=1))).scheduled
    obj = p.cluster.get_pod("default", "old")
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj.setdefault("status", {})["phase"] = "Running"
    p.cluster.delete_pod("default", "old")
    p.cluster.add_pod(obj)
    assert not p.submit(pod("new", container(gpu=1))).scheduled
    p.cluster.set_pod_phase("default", "old", "Succeeded")
    assert p.submit(pod("newer", container(gpu=1))).scheduled


def test_add_resource_usage_sums_count_memory_and_cores():
    """``pkg/device/hygon/device_test.go::TestDevices_AddResourceUsage`` (the same in
    Biren, Vastai, Cambricon, Ascend, Moore Threads, MetaX): a device using 2000 MiB and 15 %
    that takes a container of 1024 MiB and 50 % uses one more sharer, 3024 MiB and 65 %."""
    from tests.backends.hygon.test_pipeline import HAMI_LEGACY, dcu_node, dcu_pod

    p = pipeline(dcu_node("dcu-1", HAMI_LEGACY.split(":")[0] + ":"))
    assert p.submit(dcu_pod("first", count=1, mem=2000, cores=15)).scheduled

    def used():
        sched = p.scheduler
        info = sched.node_info(p.cluster.get_node("dcu-1"))
        u = sched.node_usage(info)["DCU-SN0"]
        return (u.used_count, u.used_memory_mib, u.used_cores_pct)

    before = used()
    assert before == (1, 2000, 15)
    assert p.submit(dcu_pod("second", count=1, mem=1024, cores=50)).scheduled
    assert used() == (before[0] + 1, 3024, 65)


@pytest.mark.parametrize(
    ("case", "annotations", "bound"),
    [
        ("NumaBind=true enforces numa", {"nvidia.com/numa-bind": "true"}, True),
        ("NumaBind=false does not enforce", {"nvidia.com/numa-bind": "false"}, False),
        ("NumaBind invalid value", {"nvidia.com/numa-bind": "notabool"}, False),
        ("NumaBind key absent", {}, False),
    ],
)
def test_assert_numa(case, annotations, bound):
    """``pkg/device/nvidia/device_test.go::TestAssertNuma``, the case named: only
    ``"true"`` binds a container's GPUs to one NUMA node (an invalid value is ignored, not
    refused); seen as the pair the fit takes for 2 GPUs on A (NUMA 0), C (NUMA 1), B (NUMA 0)."""
    from hami_core.plugin import BackendManager

    m = BackendManager.from_entry_points(disabled=[])
    usage = tuple(_nv_devices(("A_n0", 0), ("C_n1", 1), ("B_n0", 0)))
    node_info = NodeInfo(name="n", devices=tuple(u.device for u in usage))
    got = m.fit(
        _req(nums=2, mem=100, cores=10),
        node_info,
        usage,
        pod={"metadata": {"annotations": annotations}},
        policy=DevicePolicy.SPREAD,
    )
    want = ["A_n0", "B_n0"] if bound else ["A_n0", "C_n1"]
    assert sorted(d.uuid for d in got.devices) == want, case
