"""Namespace quotas on resources a configuration section renames (PROTOCOL.md §8).

HAMi's ``device-config.yaml`` lets a section rename its resources (``resourceMemoryName``,
...); a ResourceQuota on the renamed resource must be enforced, at admission and at fit,
as one on the default name is (issue #15: configs written for HAMi 2.10 work unchanged).
"""

from __future__ import annotations

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
