"""Builders for the Kunlunxin tests: XPUs, containers, pods, nodes with HAMi's inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hami_kunlun import plugin

from hami_core.model import DeviceInfo, DeviceUsage
from hami_core.protocol import encode_inventory
from hami_core.protocol.config import VendorConfig
from hami_core.testing import section
from tests.builders import pod as pod  # the generic Pod builder, re-exported

SAMPLES = Path(__file__).parent / "samples"
P800_SAMPLE = SAMPLES / "xpu-smi-p800-oam.txt"
R300_SAMPLE = SAMPLES / "xpu_smi-r300.txt"
K200_SAMPLE = SAMPLES / "xpu_smi-k200.txt"
SRIOV_SAMPLE = SAMPLES / "xpu_smi-r200-sriov.txt"

VXPU = "kunlunxin.com/vxpu"
VMEM = "kunlunxin.com/vxpu-memory"
XPU = "kunlunxin.com/xpu"
REGISTER = "hami.io/node-register-xpu"
P800_MIB = 98304


def xpu(
    uuid: str,
    *,
    index: int = 0,
    memory_mib: int = P800_MIB,
    model: str = "P800",
    split: int = 4,
    healthy: bool = True,
) -> DeviceInfo:
    return DeviceInfo(
        uuid=uuid,
        vendor="XPU",
        model=model,
        index=index,
        split_count=split,
        memory_mib=memory_mib,
        cores_pct=100,
        healthy=healthy,
    )


def oam(prefix: str = "XPU-") -> list[DeviceInfo]:
    """An 8-XPU P800 OAM node: indices 0..7."""
    return [xpu(f"{prefix}{i}", index=i) for i in range(8)]


def free(*devices: DeviceInfo) -> tuple[DeviceUsage, ...]:
    return tuple(DeviceUsage(device=d) for d in devices)


def used(device: DeviceInfo, *slices: int) -> DeviceUsage:
    """``device`` holding vXPUs of the given sizes (MiB); cores derived from 98304."""
    return DeviceUsage(
        device=device,
        used_count=len(slices),
        used_memory_mib=sum(slices),
        used_cores_pct=sum(s * 100 // P800_MIB for s in slices),
    )


def container(name: str = "main", **limits: Any) -> dict[str, Any]:
    """``container(vxpu=1, vmem=24576)`` or ``container(xpu=2)``."""
    names = {"vxpu": VXPU, "vmem": VMEM, "xpu": XPU}
    values = {names[k]: str(v) for k, v in limits.items()}
    out: dict[str, Any] = {"name": name, "image": "busybox"}
    if values:
        out["resources"] = {"limits": values}
    return out


def node(name: str, devices: list[DeviceInfo]) -> dict[str, Any]:
    """A node carrying ``hami.io/node-register-xpu`` (JSON, zero values omitted)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {REGISTER: encode_inventory(devices)}},
        "status": {"allocatable": {VXPU: str(4 * len(devices))}},
    }


def config(**options: Any) -> VendorConfig:
    from hami_kunlun.options import OPTION_DEFAULTS

    return section(plugin, options={**OPTION_DEFAULTS, **options})
