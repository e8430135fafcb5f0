"""What kubelet adds to a Kunlunxin container (PROTOCOL.md §3, §7 for the shape).

Sources:
    - XPU Container Toolkit user guide (``doc/UserGuide.md``, "XPU Enumeration"):
      ``CXPU_VISIBLE_DEVICES`` selects the XPUs the xpu-container-runtime exposes: a
      comma-separated list of XPU indices, ``all``, or ``none`` ("no XPU will be
      accessible"); Kunlunxin's base images set ``all``, so a container without XPUs in
      a pod that has some gets ``none``. HAMi's Kunlunxin vXPU guide requires
      xpu-container-toolkit >= xpu_container_1.0.2-1 on the node.
    - XPU Container Toolkit README ("Usage", step 4): ``CXPU_CONTAINER_MEMORY_LIMIT`` is
      the container's XPU memory limit in bytes (``100000000`` shows as 95 MB).
    - Kunlunxin XRE user guide §1.4: the device nodes ``/dev/xpu<n>`` and the control
      node ``/dev/xpuctrl``; exposed when the runtime is not used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.backend import ContainerAllocation, ContainerDevices, DeviceNode, VendorConfig

from . import options

VISIBLE_DEVICES = "CXPU_VISIBLE_DEVICES"
MEMORY_LIMIT = "CXPU_CONTAINER_MEMORY_LIMIT"
DEVICE_NODE = "/dev/xpu{index}"
CONTROL_NODE = "/dev/xpuctrl"
BYTES_PER_MIB = 1024 * 1024


def allocate(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    devices: ContainerDevices,
    config: VendorConfig,
    *,
    indices: Mapping[str, int],
) -> ContainerAllocation:
    """Env and device nodes for one container given its XPU slices.

    Args:
        devices: the container's slices (empty: ``CXPU_VISIBLE_DEVICES=none``).
        indices: device id -> ``DevID``, from the node's devices ``hami_allocate`` receives.

    Returns:
        ``CXPU_VISIBLE_DEVICES`` = the XPU indices in slice order. An id whose index is
        unknown on this machine (no ``xpu-smi``, e.g. ``hami simulate``) is written as the
        id itself: a value the runtime cannot take for another XPU's index. For vXPU
        slices (cores below 100), ``CXPU_CONTAINER_MEMORY_LIMIT`` = the slice memory in
        bytes (all slices of a container have the same size). With
        ``useContainerRuntime: false`` also ``/dev/xpu<n>`` of the known indices and
        ``/dev/xpuctrl``.
    """
    if not devices:
        return ContainerAllocation(envs={VISIBLE_DEVICES: "none"})
    ids = [str(indices[d.uuid]) if d.uuid in indices else d.uuid for d in devices]
    envs = {VISIBLE_DEVICES: ",".join(ids)}
    if any(d.cores_pct < 100 for d in devices):
        envs[MEMORY_LIMIT] = str(max(d.memory_mib for d in devices) * BYTES_PER_MIB)
    nodes: list[DeviceNode] = []
    if not config.options[options.USE_RUNTIME]:
        for d in devices:
            if d.uuid in indices:
                path = DEVICE_NODE.format(index=indices[d.uuid])
                nodes.append(DeviceNode(container_path=path, host_path=path))
        nodes.append(DeviceNode(container_path=CONTROL_NODE, host_path=CONTROL_NODE))
    return ContainerAllocation(envs=envs, device_nodes=tuple(nodes))
