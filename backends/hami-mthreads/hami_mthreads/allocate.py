"""What our device plugin adds to a Moore Threads container.

Moore Threads' container toolkit (mt-container-toolkit, the ``mthreads`` runtime) selects
GPUs by ``MTHREADS_VISIBLE_DEVICES``, a comma list of GPU indices, as NVIDIA's does with
``NVIDIA_VISIBLE_DEVICES``. The sGPU memory and core limits are enforced by Moore
Threads' own stack (driver and device plugin) from the pod's resources; hami's shim does
not run on these GPUs, so this backend passes the selection only.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.backend import ContainerAllocation, ContainerDevices, DeviceInfo

VISIBLE_DEVICES = "MTHREADS_VISIBLE_DEVICES"


def gpu_index(uuid: str, node_devices: Sequence[DeviceInfo]) -> int:
    """The GPU's index: from the discovered devices, else the ``-<i>`` suffix HAMi's ids
    (``<node>-mthreads-<i>``) carry, else 0."""
    for d in node_devices:
        if d.uuid == uuid:
            return d.index
    tail = uuid.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def allocate(devices: ContainerDevices, node_devices: Sequence[DeviceInfo]) -> ContainerAllocation:
    """``MTHREADS_VISIBLE_DEVICES`` for one container (``none`` without GPUs)."""
    if not devices:
        return ContainerAllocation(envs={VISIBLE_DEVICES: "none"})
    indices = ",".join(str(gpu_index(d.uuid, node_devices)) for d in devices)
    return ContainerAllocation(envs={VISIBLE_DEVICES: indices})
