"""hami-nvidia's Allocate for shim devices: what issue #17 adds (memory oversubscription,
task priority) to PROTOCOL.md §7's env, mounts and limits file."""

from __future__ import annotations

from typing import Any

from hami_nvidia import plugin
from hami_nvidia.allocate import CONTAINER_LIMITS_FILE, allocate

from hami_core.model import ContainerDevice
from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config

UUIDS = ["GPU-aaaa", "GPU-bbbb"]
POD: dict[str, Any] = {"metadata": {"name": "p", "namespace": "default", "uid": "u-1"}}


def config(scaling: float = 1.0, **section: Any):  # type: ignore[no-untyped-def]
    base = BackendManager.from_plugins({"nvidia": plugin})
    raw = {
        "version": "v1",
        "nvidia": {"hookPath": "/hook", "deviceMemoryScaling": scaling, **section},
    }
    return base.with_config(parse_config(raw, backends=base.infos)).vendor_config("nvidia")


def container(priority: str | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "2"}
    if priority is not None:
        limits["nvidia.com/priority"] = priority
    return {"name": "main", "resources": {"limits": limits}}


DEVICES = tuple(
    ContainerDevice(uuid=u, vendor="NVIDIA", memory_mib=3000, cores_pct=30) for u in UUIDS
)


def limits_of(out) -> dict[str, str]:  # type: ignore[no-untyped-def]
    (path,) = [p for p in out.files if p.endswith(".limits")]
    return dict(line.split("=", 1) for line in out.files[path].splitlines())


def test_memory_scaling_above_one_turns_oversubscription_on_in_env_and_file():
    out = allocate(POD, container(), DEVICES, config(scaling=1.5), ())
    assert out.envs["CUDA_OVERSUBSCRIBE"] == "true"
    assert limits_of(out)["CUDA_OVERSUBSCRIBE"] == "true", "the shim reads the file"
    plain = allocate(POD, container(), DEVICES, config(scaling=1.0), ())
    assert "CUDA_OVERSUBSCRIBE" not in plain.envs
    assert "CUDA_OVERSUBSCRIBE" not in limits_of(plain)


def test_every_container_sees_its_gpus_priority_boards_read_only():
    out = allocate(POD, container("1"), DEVICES, config(), ())
    mounts = {m.container_path: m for m in out.mounts}
    for uuid in UUIDS:
        board = mounts[f"/usr/local/vgpu/priority/{uuid}"]
        assert (board.host_path, board.read_only) == (f"/hook/priority/{uuid}", True)
        assert f"/hook/priority/{uuid}/.gpu" in out.files, (
            "the board exists before kubelet mounts it"
        )
    assert not any(p.startswith("/usr/local/vgpu/priority-beat") for p in mounts)
    assert limits_of(out)["CUDA_TASK_PRIORITY"] == "1"
    assert CONTAINER_LIMITS_FILE in mounts


def test_only_a_high_priority_container_gets_its_own_beat_file_writable():
    out = allocate(POD, container("0"), DEVICES, config(), ())
    mounts = {m.container_path: m for m in out.mounts}
    for uuid in UUIDS:
        own = mounts[f"/usr/local/vgpu/priority-beat/{uuid}/beat"]
        host = f"/hook/priority/{uuid}/u-1_main/beat"
        assert (own.host_path, own.read_only) == (host, False)
        assert out.shared_files[host] == 8, "the file alone, made and sized by the host"
    assert limits_of(out)["CUDA_TASK_PRIORITY"] == "0"
    for low in (container("1"), container(None)):
        paths = [m.container_path for m in allocate(POD, low, DEVICES, config(), ()).mounts]
        assert not any("priority-beat" in p for p in paths)
