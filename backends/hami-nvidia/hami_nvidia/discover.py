"""From NVML's view of the GPUs to the node inventory (PROTOCOL.md §2).

Per GPU: ``split_count`` = ``deviceSplitCount``; ``memory_mib`` = floor(total MiB x
``deviceMemoryScaling``) (HAMi: ``uint64(float64(total/1024/1024) * scaling)``);
``cores_pct`` = floor(100 x ``deviceCoreScaling``); the model name gets the prefix
``NVIDIA-`` unless it starts with ``NVIDIA``; the NUMA node is read from
``<sysfs>/bus/pci/devices/<bus id>/numa_node`` (``-1``, no NUMA, and a missing file are
0, as HAMi reports them); ``mode`` is ``mig`` when MIG is on, else ``hami-core``.

Unified-memory GPUs (Grace Hopper, GB10: NVML reports no device memory) take their
memory from the backend option ``unifiedMemoryMiB``; without it discovery fails with a
message that says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from hami_core.backend import ConfigError, DeviceInfo, VendorConfig, inventory_device

from . import VENDOR
from .nvml import NvmlGpu, normalise_bus_id

log = logging.getLogger(__name__)

#: Where hosts mount sysfs; containers that see the host's at another path set
#: ``HAMI_NVIDIA_SYSFS_ROOT``.
DEFAULT_SYSFS_ROOT = "/sys"
#: ``DeviceInfo.node_local`` key of every GPU this device plugin discovered: absent from
#: an inventory read back (``hami simulate``), where Allocate must start nothing.
DISCOVERED = "nvidiaDiscovered"
MODEL_PREFIX = "NVIDIA"


def model_name(name: str) -> str:
    """``Tesla T4`` -> ``NVIDIA-Tesla T4``; ``NVIDIA A100-SXM4-80GB`` unchanged."""
    return name if name.startswith(MODEL_PREFIX) else f"{MODEL_PREFIX}-{name}"


def numa_node(bus_id: str, *, sysfs_root: str | Path = DEFAULT_SYSFS_ROOT) -> int:
    """The NUMA node of a PCI device; 0 when sysfs says -1 or has no such file."""
    path = Path(sysfs_root) / "bus" / "pci" / "devices" / normalise_bus_id(bus_id) / "numa_node"
    try:
        value = int(path.read_text().strip())
    except FileNotFoundError:
        log.debug("no %s: NUMA node 0", path)
        return 0
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s (%s): NUMA node 0", path, exc)
        return 0
    return max(value, 0)


def device_infos(
    gpus: Sequence[NvmlGpu],
    config: VendorConfig,
    *,
    healthy: Callable[[str], bool] = lambda uuid: True,
    numa: Callable[[str], int] = lambda bus_id: 0,
) -> list[DeviceInfo]:
    """The inventory entries of ``gpus``, index order.

    Args:
        gpus: what NVML reports.
        config: the nvidia section (split count, scaling, ``unifiedMemoryMiB``).
        healthy: health of a UUID (from the XID watch).
        numa: NUMA node of a bus id.

    Raises:
        ConfigError: a GPU reports no memory and ``unifiedMemoryMiB`` is not set.
    """
    unified = int(config.options["unifiedMemoryMiB"])
    out = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        total = gpu.memory_mib
        if total is None:
            if unified <= 0:
                raise ConfigError(
                    f"GPU {gpu.index} {gpu.uuid} ({gpu.name}) reports no device memory "
                    "(unified memory): set nvidia.unifiedMemoryMiB in the hami configuration "
                    "to the MiB this GPU may hand out"
                )
            total = unified
        device = inventory_device(
            config,
            uuid=gpu.uuid,
            vendor=VENDOR,
            model=model_name(gpu.name),
            index=gpu.index,
            memory_mib=total,
            numa=numa(gpu.bus_id),
            mode="mig" if gpu.mig_enabled else "hami-core",
            healthy=healthy(gpu.uuid),
        )
        out.append(attrs.evolve(device, node_local={**device.node_local, DISCOVERED: "1"}))
    return out
