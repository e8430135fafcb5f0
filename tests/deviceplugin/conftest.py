"""Fixtures of the device-plugin tests.

- ``fake_nvml_dir``: the stand-in ``libnvidia-ml.so.1`` (fakenvml/fake_nvml.c), built
  once per session with ``cc``; processes load it through ``LD_LIBRARY_PATH``.
- ``fake_gpus``: the JSON file that drives it (GPUs, events, failures), per test.
- ``short_dir``: a directory with a short path (unix socket paths stop at 107 bytes).
- ``nvidia``: the hami-nvidia backend alone in a ``BackendManager``, its hook path in
  the test's directory.
- ``bound_pod``: creates a pod and binds it with the real scheduler (lock, allocation
  annotations, ``spec.nodeName``), as kube-scheduler's bind call would.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hami_nvidia.plugin
import pytest

from hami_core.cluster import MemoryCluster
from hami_core.plugin import BackendManager
from hami_core.protocol.config import parse_config
from hami_core.scheduling.scheduler import Scheduler

from . import fakenvml


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the stand-in libnvidia-ml.so.1 (built here with cc)."""
    try:
        return fakenvml.build(tmp_path_factory.mktemp("fakenvml"))
    except fakenvml.BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


def gpu_uuid(i: int) -> str:
    return f"GPU-{i:08x}-1111-2222-3333-444455556666"


class FakeGpus:
    """Writes the stand-in NVML's JSON; every change rewrites the file (it re-reads it)."""

    def __init__(self, path: Path, sysfs: Path, devices: list[dict[str, Any]]) -> None:
        self.path = path
        self.sysfs = sysfs
        self.doc: dict[str, Any] = {"devices": devices, "events": []}
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1))
        os.replace(tmp, self.path)

    def uuid(self, index: int) -> str:
        return str(self.doc["devices"][index]["uuid"])

    def event(self, device: int, xid: int = 0, *, type: str = "xid") -> None:
        self.doc["events"].append({"device": device, "xid": xid, "type": type})
        self.write()

    def fail(self, device: int | None, function: str, code: int) -> None:
        target = self.doc if device is None else self.doc["devices"][device]
        target.setdefault("fail", {})[function] = code
        self.write()

    def heal(self, device: int | None, function: str) -> None:
        target = self.doc if device is None else self.doc["devices"][device]
        target.get("fail", {}).pop(function, None)
        self.write()

    def numa(self, bus_id: str, node: int) -> None:
        d = self.sysfs / "bus" / "pci" / "devices" / bus_id
        d.mkdir(parents=True, exist_ok=True)
        (d / "numa_node").write_text(f"{node}\n")

    def env(self, lib_dir: Path) -> dict[str, str]:
        """Environment of a process that must load the stand-in."""
        return {
            "LD_LIBRARY_PATH": str(lib_dir),
            "FAKE_NVML_CONFIG": str(self.path),
            "HAMI_NVIDIA_SYSFS_ROOT": str(self.sysfs),
        }


@pytest.fixture
def fake_gpus(tmp_path: Path) -> FakeGpus:
    """Two 16384-MiB GPUs; GPU 0 on NUMA node 1 (through its sysfs entry)."""
    gpus = FakeGpus(
        tmp_path / "fake-nvml.json",
        tmp_path / "sys",
        [
            {
                "uuid": gpu_uuid(i),
                "name": "NVIDIA A100-PCIE-16GB",
                "memory_mib": 16384,
                "bus_id": f"00000000:{0x3B + i:02X}:00.0",
            }
            for i in range(2)
        ],
    )
    gpus.numa("0000:3b:00.0", 1)
    return gpus


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh directory under /tmp with a short path (unix sockets)."""
    path = Path(tempfile.mkdtemp(prefix="hdp", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def nvidia_manager(hook_dir: Path, **section: Any) -> BackendManager:
    """hami-nvidia alone, with ``hookPath`` in ``hook_dir`` and extra config keys."""
    base = BackendManager.from_plugins({"nvidia": hami_nvidia.plugin})
    config = parse_config(
        {"version": "v1", "nvidia": {"hookPath": str(hook_dir), **section}},
        backends=base.infos,
    )
    return base.with_config(config)


@pytest.fixture
def nvidia(tmp_path: Path) -> BackendManager:
    return nvidia_manager(tmp_path / "vgpu")


def gpu_node(name: str, uuids: list[str], *, memory_mib: int = 16384) -> dict[str, Any]:
    """A Node with the inventory of ``uuids`` (split 10), as the device plugin writes it."""
    from hami_core.model import DeviceInfo
    from hami_core.protocol import encode_inventory

    devices = [
        DeviceInfo(
            uuid=u,
            vendor="NVIDIA",
            model="NVIDIA A100-PCIE-16GB",
            index=i,
            split_count=10,
            memory_mib=memory_mib,
            cores_pct=100,
        )
        for i, u in enumerate(uuids)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"hami.io/node-nvidia-register": encode_inventory(devices)},
        },
        "status": {"allocatable": {"nvidia.com/gpu": str(10 * len(uuids))}},
    }


def gpu_pod(name: str, *containers: dict[str, Any], init: list[dict[str, Any]] | None = None):
    spec: dict[str, Any] = {"containers": list(containers), "schedulerName": "hami-scheduler"}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def ctr(name: str, **limits: int | str) -> dict[str, Any]:
    """``ctr("main", gpu=1, gpumem=3000, gpucores=30)``: limits on nvidia.com/<key>."""
    out: dict[str, Any] = {"name": name, "image": "busybox"}
    if limits:
        out["resources"] = {"limits": {f"nvidia.com/{k}": str(v) for k, v in limits.items()}}
    return out


BindPod = Callable[..., dict[str, Any]]


@pytest.fixture
def bound_pod() -> BindPod:
    """``bound_pod(cluster, manager, pod, node)``: create ``pod`` and bind it to ``node``
    through ``Scheduler.bind`` (node lock, allocation annotations, spec.nodeName; signed
    when given a ``signer``); returns the pod as stored."""

    def bind(
        cluster: MemoryCluster,
        manager: BackendManager,
        pod: dict[str, Any],
        node: str,
        *,
        lock_wait_s: float = 0.0,
        signer: Any = None,
    ) -> dict[str, Any]:
        created = cluster.add_pod(pod)
        meta = created["metadata"]
        scheduler = Scheduler(cluster, manager, lock_wait_s=lock_wait_s)
        scheduler.binder.signer = signer
        allocation = scheduler.bind(meta["namespace"], meta["name"], uid=meta["uid"], node=node)
        assert allocation is not None, "the pod asks no device"
        return cluster.get_pod(meta["namespace"], meta["name"])

    return bind
