"""HAMi's ``pkg/device/nvidia/device_test.go`` tests not in test_hami_go_tests.py, with
HAMi's expected values (issue #15 item 11): which containers the webhook takes, the
device lists written at bind, the node inventory read, usage added, the quota counted
during fit (init containers at their peak) and NUMA binding."""

from __future__ import annotations

import datetime as dt

import pytest
from hami_nvidia import mig

from hami_core.facts.nodes import read_node
from hami_core.model import ContainerDevice, DeviceRequest, DeviceUsage, NodeInfo
from hami_core.plugin import BackendManager
from hami_core.protocol import encode_pod_devices
from tests.builders import container, gpu, node, pipeline, pod
from tests.unit.test_admission import review

NV = "pkg/device/nvidia/device_test.go"
MANAGER = BackendManager.from_entry_points(disabled=[])


@pytest.mark.parametrize(
    ("case", "limits", "taken"),
    [
        ("having ResourceName set to resource limits.", {"nvidia.com/gpu": "1"}, True),
        (
            "don't having ResourceName, but having ResourceCores set to resource limits",
            {"nvidia.com/gpucores": "1"},
            True,
        ),
        (
            "don't having ResourceName, but having ResourceMem set to resource limits",
            {"nvidia.com/gpumem": "1"},
            True,
        ),
        (
            "don't having ResourceName, but having ResourceMemPercentage set to resource limits",
            {"nvidia.com/gpumem-percentage": "1"},
            True,
        ),
        ("don't having math resources.", {}, False),
    ],
)
def test_mutate_admission_takes_a_container_naming_any_nvidia_resource(case, limits, taken):
    """``Test_MutateAdmission``: any of the four names makes the container HAMi's (the
    count then defaults to ``DefaultGPUNum`` 1 and the pod goes to HAMi's scheduler);
    none leaves it alone."""
    c = container()
    c["resources"] = {"limits": dict(limits)}
    out = review(pod("p", c))
    assert out.allowed and out.mutated is taken, case
    paths = {op["path"]: op.get("value") for op in out.patch}
    if taken:
        assert paths["/spec/schedulerName"] == "hami-scheduler"
        count = paths.get("/spec/containers/0/resources/limits/nvidia.com~1gpu", "1")
        assert count == "1" == limits.get("nvidia.com/gpu", count)
    else:
        assert out.patch == ()


def test_patch_annotations_writes_both_device_lists():
    """``Test_PatchAnnotations`` "exist device": ``nvidia-device-0,NVIDIA,2000,1:;`` in
    ``hami.io/vgpu-devices-to-allocate`` and ``hami.io/vgpu-devices-allocated`` and
    nothing else of NVIDIA's own; "no device": nothing."""
    lists = (
        (ContainerDevice(uuid="nvidia-device-0", vendor="NVIDIA", memory_mib=2000, cores_pct=1),),
    )
    assert encode_pod_devices(lists) == "nvidia-device-0,NVIDIA,2000,1:;"
    the_pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}
    card = gpu("nvidia-device-0")
    assert (
        MANAGER.bind_annotations("NVIDIA", the_pod, NodeInfo(name="n", devices=(card,)), lists)
        == {}
    )
    assert (
        MANAGER.bind_annotations("NVIDIA", the_pod, NodeInfo(name="n", devices=(card,)), ((),))
        == {}
    )
    # through filter and bind: the allocated list carries it (to-allocate is consumed by
    # the device plugin's Allocate, which the pipeline runs too)
    p = pipeline(node("n", [card]))
    assert p.submit(pod("p", container(gpu=1, gpumem=2000, gpucores=1))).scheduled
    ann = p.cluster.get_pod("default", "p")["metadata"]["annotations"]
    assert ann["hami.io/vgpu-devices-allocated"] == "nvidia-device-0,NVIDIA,2000,1:;"


def _read(annotations):
    info = read_node(
        {"metadata": {"name": "node-01", "annotations": annotations}},
        MANAGER.device_types(),
        now=dt.datetime.now(dt.UTC),
        reader=MANAGER.node_devices,
    )
    return info


def test_get_node_devices():
    """``Test_GetNodeDevices``: "exist gpu devices" (id, count, devmem, devcore, type, numa,
    health, index and vendor NVIDIA); "no gpu devices" (``[]``) and "no annotation" give
    no device (HAMi: an error and no device)."""
    info = _read(
        {
            "hami.io/node-nvidia-register": '[{"id":"GPU-0","count":5,"devmem":8192,'
            '"devcore":100,"type":"NVIDIA-Tesla P4","numa":0,"health":true,"index":0}]'
        }
    )
    (d,) = info.devices
    assert (d.uuid, d.split_count, d.memory_mib, d.cores_pct, d.model, d.numa, d.healthy) == (
        "GPU-0",
        5,
        8192,
        100,
        "NVIDIA-Tesla P4",
        0,
        True,
    )
    assert (d.index, d.vendor) == (0, "NVIDIA")
    for ann in ({"hami.io/node-nvidia-register": "[]"}, {}):
        info = _read(ann)
        assert info.devices == () and not info.unregistered


def test_get_node_devices_invalid_json():
    """``TestGetNodeDevices_InvalidJSON``: ``not-valid-json`` is an error: the node's
    NVIDIA devices are unregistered with the reason, the node stays readable."""
    info = _read({"hami.io/node-nvidia-register": "not-valid-json"})
    assert info.devices == ()
    assert "hami.io/node-nvidia-register" in info.unregistered["NVIDIA"]


def test_add_resource_usage():
    """``TestDevices_AddResourceUsage``: a GPU using 2000 MiB and 15 % that takes a
    container of 1024 MiB and 50 % has one more sharer, 3024 MiB and 65 %."""
    p = pipeline(node("n", [gpu("dev-0")]))
    assert p.submit(pod("first", container(gpu=1, gpumem=2000, gpucores=15))).scheduled

    def used():
        info = p.scheduler.node_info(p.cluster.get_node("n"))
        u = p.scheduler.node_usage(info)["dev-0"]
        return (u.used_count, u.used_memory_mib, u.used_cores_pct)

    assert used() == (1, 2000, 15)
    assert p.submit(pod("second", container(gpu=1, gpumem=1024, gpucores=50))).scheduled
    assert used() == (2, 3024, 65)


def _c(name, mem):
    return container(name, gpu=1, gpumem=mem, gpucores=1)


@pytest.mark.parametrize(
    ("case", "apps", "inits", "fits"),
    [
        ("no tmp and no allocated", [100], [], True),
        ("request exceed quota", [3000], [], False),
        ("tmpdev", [1024, 100], [], True),
        ("tmpdev exceed quota", [1024, 2000], [], False),
        ("allocated devs", [1024, 100], [], True),
        ("allocated devs exceed quota", [1024, 2000], [], False),
        ("exceed quota", [1024, 1024, 100], [], False),
        ("fit", [100, 100, 100], [], True),
        ("fitting second init container maxes against first", [100], [1500, 1500], True),
        ("sequential init containers counted as peak not sum", [500], [1024, 1024], True),
        ("collapsed init peak still enforces quota", [100], [2100], False),
    ],
)
def test_fit_quota(case, apps, inits, fits):
    """``TestFitQuota``: ``limits.nvidia.com/gpumem: 2048`` in the namespace; the pod's
    earlier devices (HAMi's tmpDevs and allocated) count with the one being fitted, init
    containers at their peak (they run one after another), against the quota. Checked
    where HAMi checks it (the fit) and at admission, through a real ``ResourceQuota``."""
    cards = [gpu(f"gpu-{i}", index=i, memory_mib=81920) for i in range(3)]
    p = pipeline(node("n", cards))
    p.cluster.add_quota(
        {
            "metadata": {"name": "basic-quota", "namespace": "default"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "2048"}},
        }
    )
    candidate = pod(
        "test",
        *[_c(f"app{i}", m) for i, m in enumerate(apps)],
        init=[_c(f"init{i}", m) for i, m in enumerate(inits)],
    )
    assert review(candidate, store=p.cluster).allowed is fits, case
    out = p.submit(candidate)
    assert out.scheduled is fits, (case, out)
    if not fits:
        assert "gpumem" in (out.denied or str(out.filter.failed)), out


def test_fit_numa_switching():
    """``TestFit_NumaSwitching``: with ``nvidia.com/numa-bind: "true"`` two GPUs come from
    one NUMA node: dev-0 and dev-1 (NUMA 1), not dev-2 (NUMA 0). HAMi lists them in its
    reverse scan order (dev-1, dev-0); ours by index."""
    cards = [
        gpu("dev-0", index=0, numa=1, memory_mib=8192),
        gpu("dev-1", index=1, numa=1, memory_mib=8192),
        gpu("dev-2", index=2, numa=0, memory_mib=8192),
    ]
    p = pipeline(node("n", cards))
    out = p.submit(
        pod(
            "p",
            container(gpu=2, gpumem=100, gpucores=10),
            annotations={"nvidia.com/numa-bind": "true"},
        )
    )
    assert [d.uuid for c in out.allocation.devices["NVIDIA"] for d in c] == ["dev-0", "dev-1"]


def test_custom_filter_rule_non_mig():
    """``TestCustomFilterRule_NonMig``: a GPU not in mig mode passes the MIG step of the
    NVIDIA fit (``FitRules.extra_check``) for a plain request."""
    usage = DeviceUsage(device=gpu("dev-0"))
    assert mig.check(usage, DeviceRequest(vendor="NVIDIA", count=1, memory_mib=100)) is None
