"""What our device plugin adds to a Neuron container.

The Neuron runtime (Neuron SDK "NeuronCore allocation": ``NEURON_RT_VISIBLE_CORES``)
uses the NeuronCores named by ``NEURON_RT_VISIBLE_CORES`` (node-wide core indices);
the container gets the device nodes ``/dev/neuron<i>`` of its devices, as the Neuron
device plugin mounts them.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.backend import ContainerAllocation, ContainerDevices, DeviceInfo, DeviceNode

from .bind import core_ids


def allocate(devices: ContainerDevices, node_devices: Sequence[DeviceInfo]) -> ContainerAllocation:
    """Device nodes and ``NEURON_RT_VISIBLE_CORES`` for one container (empty without
    devices). A device not discovered here is taken by the index in its id."""
    if not devices:
        return ContainerAllocation()
    known = {d.uuid: d for d in node_devices}
    nodes, cores = [], []
    for d in devices:
        info = known.get(d.uuid)
        tail = d.uuid.rsplit("-", 1)[-1]
        index = info.index if info is not None else (int(tail) if tail.isdigit() else 0)
        per_device = info.split_count if info is not None else 2
        path = f"/dev/neuron{index}"
        nodes.append(DeviceNode(container_path=path, host_path=path, permissions="rw"))
        cores.extend(core_ids(index, d.cores_pct, per_device))
    return ContainerAllocation(
        envs={"NEURON_RT_VISIBLE_CORES": ",".join(map(str, cores))}, device_nodes=tuple(nodes)
    )
