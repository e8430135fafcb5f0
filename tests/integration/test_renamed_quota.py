"""Namespace quotas on resources a configuration section renames (PROTOCOL.md §8).

HAMi's ``device-config.yaml`` lets a section rename its resources (``resourceMemoryName``,
...); a ResourceQuota on the renamed resource must be enforced, at admission and at fit,
as one on the default name is (issue #15: configs written for HAMi 2.10 work unchanged).
"""

from __future__ import annotations

import pytest
import yaml

from hami_core.cluster import MemoryCluster
from hami_core.plugin import BackendManager
from hami_core.protocol.config import load_config
from hami_core.simulate.pipeline import Pipeline
from tests.builders import gpu, node, pipeline, pod

RENAMED = "example.com/vram"
CONFIG = {"nvidia": {"resourceMemoryName": RENAMED}}


def _vram(name: str, mib: int) -> dict:
    return {
        "name": name,
        "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": "1", RENAMED: str(mib)}},
    }


def _quota(p, hard: dict[str, str]) -> None:
    p.cluster.add_quota(
        {"metadata": {"name": "vram-quota", "namespace": "team"}, "spec": {"hard": hard}}
    )


def test_a_quota_on_a_renamed_memory_resource_admits_what_fits_and_denies_the_rest():
    p = pipeline(node("node-1", [gpu("GPU-A", memory_mib=81920)]), config=CONFIG)
    _quota(p, {f"limits.{RENAMED}": "20000"})
    fits = p.submit(pod("fits", _vram("main", 12000), namespace="team"))
    assert fits.scheduled
    annotations = p.cluster.get_pod("team", "fits")["metadata"]["annotations"]
    assert annotations["hami.io/vgpu-devices-allocated"] == "GPU-A,NVIDIA,12000,0:;"
    over = p.submit(pod("over", _vram("main", 12000), namespace="team"))
    assert over.denied
    assert "vram-quota" in over.denied and f"limits.{RENAMED} 20000" in over.denied
    assert "used 12000" in over.denied and "this pod 12000" in over.denied
    # what is left still fits
    assert p.submit(pod("rest", _vram("main", 8000), namespace="team")).scheduled


def test_the_renamed_quota_is_enforced_at_fit_for_memory_in_percent():
    """Admission cannot size a percentage: fit charges it on the candidate device."""
    p = pipeline(node("node-1", [gpu("GPU-A", memory_mib=81920)]), config=CONFIG)
    _quota(p, {f"limits.{RENAMED}": "30000"})
    half = {
        "name": "main",
        "image": "busybox",
        "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}},
    }
    out = p.submit(pod("half", half, namespace="team"))
    assert not out.denied
    assert out.filter.failed["node-1"] == (
        f"ResourceQuotaNotFit (quota vram-quota: limits.{RENAMED} 30000, used 0, this pod 40960)"
    )


def test_a_quota_on_the_default_name_no_longer_binds_a_renamed_resource():
    """After the rename ``nvidia.com/gpumem`` is no resource of ours: a quota on it says
    nothing about the renamed memory (the tenant cannot escape the renamed quota by it,
    and the administrator's stale key does not deny what the new one allows)."""
    p = pipeline(node("node-1", [gpu("GPU-A", memory_mib=81920)]), config=CONFIG)
    _quota(p, {"limits.nvidia.com/gpumem": "1000", f"limits.{RENAMED}": "20000"})
    out = p.submit(pod("p", _vram("main", 12000), namespace="team"))
    assert out.scheduled, out.denied


# -- Ascend: each model renames its own resources (ascend.vnpus.<model>, HAMi's
# vnpus.configs[]), read per device type (DeviceTypeInfo.configured_resources) -----------

NPU, NPU_MEM = "example.com/npu", "example.com/npu-mem"
OLD, OLD_MEM = "huawei.com/Ascend910B3", "huawei.com/Ascend910B3-memory"
ASCEND_RENAMED = {
    "ascend": {"vnpus": {"Ascend910B3": {"resourceName": NPU, "resourceMemoryName": NPU_MEM}}}
}


def _ascend_node() -> dict:
    from tests.backends.ascend.test_pipeline import HAMI_910B3, ascend_node

    return ascend_node("npu-1", "Ascend910B3", HAMI_910B3, count_resource=NPU)


def _npu(name: str, **limits: str) -> dict:
    return {"name": name, "image": "busybox", "resources": {"limits": dict(limits)}}


def _ascend_pipeline(tmp_path, form: str):
    pytest.importorskip("hami_ascend")
    if form == "ours":
        return pipeline(_ascend_node(), config=ASCEND_RENAMED)
    # HAMi's device-config.yaml, as its chart's users write it
    entry = {
        "chipName": "910B3",
        "commonWord": "Ascend910B3",
        "resourceName": NPU,
        "resourceMemoryName": NPU_MEM,
    }
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump({"vnpus": {"configs": [entry]}}))
    base = BackendManager.from_entry_points(disabled=[])
    m = base.with_config(load_config(path, backends=base.infos))
    c = MemoryCluster()
    c.add_node(_ascend_node())
    return Pipeline(c, m)


@pytest.mark.parametrize("form", ["ours", "hami"])
def test_a_quota_on_a_renamed_ascend_model_memory_is_enforced(tmp_path, form):
    p = _ascend_pipeline(tmp_path, form)
    assert p.manager.device_type("Ascend910B3").resources.memory == NPU_MEM
    _quota(p, {f"limits.{NPU_MEM}": "20000"})
    fits = p.submit(pod("fits", _npu("main", **{NPU: "1", NPU_MEM: "16384"}), namespace="team"))
    assert fits.scheduled, fits
    allocated = p.cluster.get_pod("team", "fits")["metadata"]["annotations"]
    assert allocated["hami.io/Ascend910B3-devices-allocated"].split(",")[2] == "16384"
    over = p.submit(pod("over", _npu("main", **{NPU: "1", NPU_MEM: "16384"}), namespace="team"))
    assert over.denied and f"limits.{NPU_MEM} 20000" in over.denied, over
    assert "used 16384" in over.denied


@pytest.mark.parametrize("form", ["ours", "hami"])
def test_a_tenant_cannot_get_around_the_renamed_quota_by_the_old_names(tmp_path, form):
    """With the quota full, the model's default names (what the tenant's manifest may
    still say) neither reach a chip nor count as a request of ours; a quota on a default
    name does not bind the renamed model either way."""
    p = _ascend_pipeline(tmp_path, form)
    _quota(p, {f"limits.{NPU_MEM}": "16384", f"limits.{NPU}": "1"})
    assert p.submit(
        pod("first", _npu("main", **{NPU: "1", NPU_MEM: "16384"}), namespace="team")
    ).scheduled
    old = p.submit(pod("old", _npu("main", **{OLD: "1", OLD_MEM: "16384"}), namespace="team"))
    assert not old.scheduled and not old.allocations, old
    assert OLD in old.unmanaged and OLD_MEM in old.unmanaged
    # the renamed count alone (a whole chip) is charged too: the count quota is full
    whole = p.submit(pod("whole", _npu("main", **{NPU: "1"}), namespace="team"))
    assert whole.denied and f"limits.{NPU} 1" in whole.denied, whole
    # the new count with the old memory name is a chip of the renamed count as well
    mixed = p.submit(pod("mixed", _npu("main", **{NPU: "1", OLD_MEM: "1024"}), namespace="team"))
    assert mixed.denied and f"limits.{NPU} 1, used 1" in mixed.denied, mixed
    used = [
        q
        for q in p.cluster.list_pods()
        if (q["metadata"].get("annotations") or {}).get("hami.io/Ascend910B3-devices-allocated")
    ]
    assert [q["metadata"]["name"] for q in used] == ["first"]


def test_a_quota_on_the_default_ascend_name_no_longer_binds_the_renamed_model(tmp_path):
    p = _ascend_pipeline(tmp_path, "ours")
    _quota(p, {f"limits.{OLD_MEM}": "1000", f"limits.{NPU_MEM}": "20000"})
    out = p.submit(pod("p", _npu("main", **{NPU: "1", NPU_MEM: "16384"}), namespace="team"))
    assert out.scheduled, out.denied


def test_the_device_plugin_serves_the_renamed_ascend_model_under_its_new_name():
    """kubelet counts what the device plugin registers: the renamed model's new count
    name (what its pods request and its quota names), the others' own."""
    pytest.importorskip("hami_ascend")
    from hami_core.servers.deviceplugin_main import DevicePluginProcess
    from hami_core.servers.options import DevicePluginOptions
    from tests.builders import manager

    m = manager(ASCEND_RENAMED)
    names = {}
    for vendor in ("Ascend910B3", "Ascend910B4"):
        opts = DevicePluginOptions(node_name="npu-1", backend="ascend", vendor=vendor)
        process = DevicePluginProcess(opts, store=MemoryCluster(), manager=m)
        names[vendor] = (process.resource_name, process.allocator.resource_name)
    assert names == {
        "Ascend910B3": (NPU, NPU),
        "Ascend910B4": ("huawei.com/Ascend910B4", "huawei.com/Ascend910B4"),
    }
