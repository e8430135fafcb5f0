"""Builders for the Cambricon tests: MLUs, containers, pods, nodes with HAMi's inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hami_cambricon import plugin

from hami_core.model import DeviceInfo, DeviceUsage
from hami_core.protocol import encode_inventory
from hami_core.protocol.config import VendorConfig
from hami_core.testing import section
from tests.builders import gpu
from tests.builders import pod as pod  # the generic Pod builder, re-exported

SAMPLES = Path(__file__).parent / "samples"
X8_SAMPLE = SAMPLES / "cnmon-info-mlu370-x8.txt"
X4_SAMPLE = SAMPLES / "cnmon-info-mlu370-x4.txt"

COUNT = "cambricon.com/vmlu"
MEMORY = "cambricon.com/mlu.smlu.vmemory"
CORES = "cambricon.com/mlu.smlu.vcore"
REGISTER = "hami.io/node-mlu-register"


def mlu(
    uuid: str,
    *,
    index: int = 0,
    memory_mib: int = 24576,
    model: str = "MLU370-X8",
    split: int = 10,
    cores: int = 100,
    healthy: bool = True,
    numa: int = 0,
) -> DeviceInfo:
    """An MLU of the inventory (``tests.builders.gpu`` with vendor key ``MLU``)."""
    return gpu(
        uuid,
        index=index,
        memory_mib=memory_mib,
        model=model,
        split=split,
        cores=cores,
        numa=numa,
        healthy=healthy,
        vendor="MLU",
    )


def free(*devices: DeviceInfo) -> tuple[DeviceUsage, ...]:
    return tuple(DeviceUsage(device=d) for d in devices)


def container(name: str = "main", **limits: Any) -> dict[str, Any]:
    """``container(vmlu=1, vmemory=20, vcore=30)``; other keys are full resource names
    passed through ``res={...}``."""
    names = {"vmlu": COUNT, "vmemory": MEMORY, "vcore": CORES}
    extra = limits.pop("res", {})
    values = {names[k]: str(v) for k, v in limits.items()}
    values.update({k: str(v) for k, v in extra.items()})
    out: dict[str, Any] = {"name": name, "image": "busybox"}
    if values:
        out["resources"] = {"limits": values}
    return out


def node(
    name: str,
    devices: list[DeviceInfo] | None = None,
    *,
    register_value: str | None = None,
) -> dict[str, Any]:
    """A node carrying ``hami.io/node-mlu-register`` (JSON from ``devices``, or a raw value
    such as HAMi's legacy colon form)."""
    value = register_value if register_value is not None else encode_inventory(devices or [])
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {REGISTER: value}},
        "status": {"allocatable": {COUNT: str(10 * len(devices or [1]))}},
    }


def config(**options: Any) -> VendorConfig:
    from hami_cambricon.options import OPTION_DEFAULTS

    return section(plugin, options={**OPTION_DEFAULTS, **options})
