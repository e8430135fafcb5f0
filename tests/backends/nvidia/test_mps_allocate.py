"""hami-nvidia's Allocate for devices in MPS mode (PROTOCOL.md §7, NVIDIA's MPS guide):
the MPS client's variables and the daemon's pipe directory, none of the shim's."""

from __future__ import annotations

from typing import Any

import pytest
from hami_nvidia import plugin
from hami_nvidia.allocate import CONTAINER_MPS_PIPE_DIR, allocate

from hami_core.backend import ConfigError, HamiError
from hami_core.model import ContainerDevice, DeviceInfo
from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config

UUIDS = ["GPU-aaaa", "GPU-bbbb"]
POD: dict[str, Any] = {"metadata": {"name": "p", "namespace": "default", "uid": "u-1"}}
MAIN: dict[str, Any] = {"name": "main"}


def config(**section: Any):  # type: ignore[no-untyped-def]
    base = BackendManager.from_plugins({"nvidia": plugin})
    parsed = parse_config({"version": "v1", "nvidia": section}, backends=base.infos)
    return base.with_config(parsed).vendor_config("nvidia")


def node(*modes: str) -> tuple[DeviceInfo, ...]:
    return tuple(
        DeviceInfo(uuid=u, vendor="NVIDIA", index=i, memory_mib=16384, cores_pct=100, mode=m)
        for i, (u, m) in enumerate(zip(UUIDS, modes, strict=False))
    )


def slices(*shares: tuple[int, int]) -> tuple[ContainerDevice, ...]:
    return tuple(
        ContainerDevice(uuid=UUIDS[i], vendor="NVIDIA", memory_mib=m, cores_pct=c)
        for i, (m, c) in enumerate(shares)
    )


def test_an_mps_device_gets_the_mps_client_variables_and_the_pipe_directory_only():
    out = allocate(POD, MAIN, slices((3000, 30)), config(), node("mps"))

    assert out.envs == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-aaaa",
        "CUDA_MPS_PIPE_DIRECTORY": CONTAINER_MPS_PIPE_DIR,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=3000M",
    }
    assert [(m.container_path, m.host_path, m.read_only) for m in out.mounts] == [
        ("/tmp/nvidia-mps", "/tmp/nvidia-mps", False)
    ]
    # none of the shim: no library, no ld.so.preload, no limits file, no region
    assert not out.files and not any("vgpu" in m.host_path for m in out.mounts)


def test_two_mps_devices_are_limited_each_by_their_ordinal_in_the_container():
    out = allocate(POD, MAIN, slices((3000, 25), (5000, 25)), config(), node("mps", "mps"))
    assert out.envs["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa,GPU-bbbb"
    assert out.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3000M,1=5000M"
    assert out.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"


@pytest.mark.parametrize("cores", [0, 100])
def test_no_thread_percentage_without_a_core_share(cores):
    out = allocate(POD, MAIN, slices((3000, cores)), config(), node("mps"))
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in out.envs
    assert out.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=3000M"


def test_the_host_directories_are_configurable_and_the_shm_is_mounted_when_set():
    cfg = config(mpsPipeDirectory="/run/nvidia-mps/pipe", mpsShmDirectory="/run/nvidia-mps/shm")
    out = allocate(POD, MAIN, slices((1000, 10)), cfg, node("mps"))
    assert [(m.container_path, m.host_path, m.read_only) for m in out.mounts] == [
        ("/tmp/nvidia-mps", "/run/nvidia-mps/pipe", False),
        ("/dev/shm", "/run/nvidia-mps/shm", False),
    ]
    assert out.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"


def test_a_shim_device_keeps_the_shims_allocation():
    out = allocate(POD, MAIN, slices((3000, 30)), config(), node("hami-core"))
    assert out.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert not any(k.startswith("CUDA_MPS_") for k in out.envs)
    assert any(m.container_path == "/etc/ld.so.preload" for m in out.mounts)


def test_a_container_across_modes_is_refused_with_both_named():
    with pytest.raises(HamiError, match=r"'main'.*different modes \(hami-core, mps\)"):
        allocate(POD, MAIN, slices((1000, 10), (1000, 10)), config(), node("mps", "hami-core"))


def test_a_pod_is_never_served_in_a_mode_its_vgpu_mode_does_not_accept():
    # bound to an MPS GPU; the node's device plugin restarted in hami-core mode since
    pod = {**POD, "metadata": {**POD["metadata"], "annotations": {"nvidia.com/vgpu-mode": "mps"}}}
    with pytest.raises(HamiError, match=r"now in mode hami-core.*vgpu-mode='mps' does not accept"):
        allocate(pod, MAIN, slices((1000, 10)), config(), node("hami-core"))
    assert (
        allocate(pod, MAIN, slices((1000, 10)), config(), node("mps")).envs[
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
        ]
        == "0=1000M"
    )
    both = {
        **POD,
        "metadata": {**POD["metadata"], "annotations": {"nvidia.com/vgpu-mode": "hami-core, mps"}},
    }
    assert (
        "CUDA_DEVICE_MEMORY_LIMIT_0"
        in allocate(both, MAIN, slices((1000, 10)), config(), node("hami-core")).envs
    )


@pytest.mark.parametrize(
    "section, key",
    [
        ({"mpsPipeDirectory": "tmp/nvidia-mps"}, "nvidia.mpsPipeDirectory"),
        ({"mpsPipeDirectory": ""}, "nvidia.mpsPipeDirectory"),
        ({"mpsShmDirectory": "shm"}, "nvidia.mpsShmDirectory"),
    ],
)
def test_a_relative_mps_directory_stops_the_start_with_the_key_named(section, key):
    with pytest.raises(ConfigError, match=key):
        plugin.hami_check_config(config(**section))
