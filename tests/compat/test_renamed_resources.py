"""Resource names renamed in the configuration are the names in force everywhere.

HAMi's ``device-config.yaml`` (and our ``version: v1`` file) may rename a vendor's
resources (``resourceCountName``, ``resourceMemoryName``, ...: HAMi 2.10
``pkg/device/nvidia/device.go`` ``NvidiaConfig``). The requests were read under the new
names, but what reads ``DeviceTypeInfo.resources`` (namespace quotas, the webhook's
annotation check, ``hami simulate``'s managed-resource check and its nodes' advertised
count) kept the declared ones: a quota on the renamed memory was not enforced, and the
what-if called the renamed pod unmanaged and placed a pod of the old names "with no
devices" on nodes that would not advertise them.
"""

from hami_core.simulate.report import build_report
from tests.builders import container, gpu, node, pipeline, pod
from tests.simulate.helpers import gpu_pod, manager, run
from tests.unit.test_admission import review

RENAMED = {
    "nvidia": {"resourceCountName": "nvidia.com/vgpu", "resourceMemoryName": "nvidia.com/vgpumem"}
}


def _renamed_pod(name, namespace="default", mem="3000"):
    p = gpu_pod(name, namespace=namespace)
    p["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/vgpu": "1", "nvidia.com/vgpumem": mem}
    }
    return p


def test_the_manager_names_the_resources_in_force():
    t = manager(RENAMED).device_type("NVIDIA")
    assert (t.resources.count, t.resources.memory) == ("nvidia.com/vgpu", "nvidia.com/vgpumem")
    assert t.resources.cores == "nvidia.com/gpucores"  # not renamed
    assert manager().device_type("NVIDIA").resources.count == "nvidia.com/gpu"


def test_simulate_places_the_renamed_pod_and_not_the_old_names():
    cluster = {"nodes": [{"name": "t4", "gpus": [{"model": "T4", "memoryMiB": 15360}]}]}
    sim = run(
        cluster, [_renamed_pod("renamed"), gpu_pod("old", gpu=1, gpumem=3000)], mgr=manager(RENAMED)
    )
    got = {p["name"]: p for p in build_report(sim)["pods"]}
    assert got["renamed"]["status"] == "placed"
    assert [d["memoryMiB"] for d in got["renamed"]["devices"]] == [3000]
    # the device plugin advertises nvidia.com/vgpu: nothing offers nvidia.com/gpu
    assert got["old"]["status"] == "unmanaged"


def test_a_quota_on_the_renamed_memory_is_enforced():
    p = pipeline(node("node-1", [gpu("GPU-A")]), config=RENAMED)
    p.cluster.add_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/vgpumem": "4000"}},
        }
    )
    over = _renamed_pod("over", namespace="team", mem="6000")
    denied = review(over, store=p.cluster, config=RENAMED)
    assert not denied.allowed and "limits.nvidia.com/vgpumem" in denied.message
    assert review(_renamed_pod("ok", namespace="team"), store=p.cluster, config=RENAMED).allowed


def test_the_renamed_memory_written_as_an_annotation_is_denied():
    p = pod("p", container(), annotations={"nvidia.com/vgpumem": "3000"})
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/vgpu": "1"}}
    out = review(p, config=RENAMED)
    assert not out.allowed and "nvidia.com/vgpumem" in out.message
