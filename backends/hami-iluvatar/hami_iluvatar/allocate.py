"""What our device plugin adds to an Iluvatar container.

The CoreX driver exposes GPU ``<i>`` as ``/dev/iluvatar<i>``; the container gets the
device nodes of its GPUs only, found by index from the discovered devices (or, where
none were discovered, from the inventory's ``index``). vGPU memory and core limits are
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
    InvalidInputError,
)


def allocate(devices: ContainerDevices, node_devices: Sequence[DeviceInfo]) -> ContainerAllocation:
    """Device nodes ``/dev/iluvatar<i>`` for one container's GPUs (none without GPUs).

    Raises:
        InvalidInputError: a GPU is not among the node's discovered devices (when the
            device plugin discovered any).
    """
    index = {d.uuid: d.index for d in node_devices}
    nodes = []
    for d in devices:
        if node_devices and d.uuid not in index:
            raise InvalidInputError(f"Iluvatar GPU {d.uuid} is not on this node")
        path = f"/dev/iluvatar{index.get(d.uuid, 0)}"
        nodes.append(DeviceNode(container_path=path, host_path=path, permissions="rw"))
    return ContainerAllocation(device_nodes=tuple(nodes))
