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

from hami_core.backend import ContainerAllocation, ContainerDevices, IndexedDevices, VendorConfig

VISIBLE_DEVICES = "CXPU_VISIBLE_DEVICES"
MEMORY_LIMIT = "CXPU_CONTAINER_MEMORY_LIMIT"
DEVICE_NODE = "/dev/xpu{index}"
CONTROL_NODE = "/dev/xpuctrl"
BYTES_PER_MIB = 1024 * 1024


def memory_limit(devices: ContainerDevices, config: VendorConfig) -> ContainerAllocation:
    """For vXPU slices (cores below 100): ``CXPU_CONTAINER_MEMORY_LIMIT`` = the slice
    memory in bytes (all slices of a container have the same size)."""
    if not any(d.cores_pct < 100 for d in devices):
        return ContainerAllocation()
    limit = max(d.memory_mib for d in devices) * BYTES_PER_MIB
    return ContainerAllocation(envs={MEMORY_LIMIT: str(limit)})


#: ``allocate(devices, config, *, indices)``: env and device nodes for one
#: container given its XPU slices (``indices``: device id -> ``DevID``, from the node's
#: devices ``hami_allocate`` receives). ``CXPU_VISIBLE_DEVICES`` = the XPU indices in slice
#: order (an id whose index is unknown, e.g. ``hami simulate``, stays the id), ``none``
#: for a container without XPUs, plus ``memory_limit``; with ``useContainerRuntime:
#: false`` also ``/dev/xpu<n>`` of the known indices and ``/dev/xpuctrl``.
allocate = IndexedDevices(
    visible_devices=VISIBLE_DEVICES,
    none="none",
    device_nodes=(DEVICE_NODE,),
    control_nodes=(CONTROL_NODE,),
    extra=memory_limit,
)
