"""What our device plugin adds to an Iluvatar container.

The CoreX driver exposes GPU ``<i>`` as ``/dev/iluvatar<i>`` (the device node public
CoreX container examples pass with ``--device``; not from Iluvatar's device plugin); the
container gets the device nodes of its GPUs only, by the index of ``node_devices`` (the
inventory in ``hami simulate``). hami's device plugin does not serve Iluvatar GPUs
(no discovery: see the README). vGPU memory and core limits are
enforced by Iluvatar's own runtime (its device plugin and ``SOL_CONTINER_NAME``); hami's
shim does not run on these GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.backend import (
    ContainerAllocation,
    ContainerDevices,
    DeviceInfo,
    DeviceNode,
    discovered,
)

from . import CHIPS


def allocate(devices: ContainerDevices, node_devices: Sequence[DeviceInfo]) -> ContainerAllocation:
    """Device nodes ``/dev/iluvatar<i>`` for one container's GPUs (none without GPUs).

    Raises:
        InvalidInputError: a GPU is not among the Iluvatar chips of ``node_devices`` (its
            index is unknown).
    """
    ours = [d for d in node_devices if d.vendor in CHIPS]
    # never a guess: GPU 0 for an unknown index would hand out another's GPU
    paths = [f"/dev/iluvatar{d.index}" for d in discovered(devices, ours, what="Iluvatar GPU")]
    nodes = (DeviceNode(container_path=p, host_path=p, permissions="rw") for p in paths)
    return ContainerAllocation(device_nodes=tuple(nodes))
