"""Allocate helpers: a container's slices matched to the node's discovered devices, and
runtimes that select devices by node index.

``hami_allocate`` receives the container's slices (UUIDs, as the scheduler wrote them)
and the node's devices as the device plugin discovered them (index, ``node_local``
facts). Both helpers refuse to guess: a slice whose device the node does not list is an
error or keeps its UUID, never another device's index.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

import attrs

from hami_core.errors import InvalidInputError
from hami_core.model import ContainerAllocation, ContainerDevices, DeviceInfo, DeviceNode
from hami_core.plugin import hookimpl
from hami_core.protocol.config import VendorConfig


def discovered(
    devices: ContainerDevices, node_devices: Sequence[DeviceInfo], *, what: str, tool: str = ""
) -> list[DeviceInfo]:
    """The node's discovered device of each slice, in slice order.

    Args:
        devices: one container's slices.
        node_devices: the node's devices as ``hami_allocate`` receives them.
        what: the device as the message names it (``"DCU"``, ``"Ascend910B3 chip"``).
        tool: the vendor's discovery tool, for the message (``"hy-smi"``); "" for none.

    Raises:
        InvalidInputError: a slice's device is not among ``node_devices``:
            ``DCU <uuid> is not on this node (hy-smi does not list it)``; the allocation
            names a device this node does not have, and no index is guessed for it.
    """
    known = {d.uuid: d for d in node_devices}
    out = []
    for d in devices:
        if d.uuid not in known:
            listed = f" ({tool} does not list it)" if tool else ""
            raise InvalidInputError(f"{what} {d.uuid} is not on this node{listed}")
        out.append(known[d.uuid])
    return out


#: ``(devices, config)`` -> what the vendor adds for a container that has devices.
Extra = Callable[[ContainerDevices, VendorConfig], ContainerAllocation]


@attrs.frozen(kw_only=True)
class IndexedDevices:
    """A container runtime told a container's devices by their node index in one env
    variable (Cambricon's ``CAMBRICON_VISIBLE_DEVICES``, Kunlunxin's
    ``CXPU_VISIBLE_DEVICES``), and the device nodes kubelet exposes when the section's
    ``useContainerRuntime`` is false (the runtime injects them otherwise).

    Callable as the vendor's allocate: ``allocate(devices, config, *, indices)``
    (``hami_allocate``'s arguments; ``indices``: device UUID -> node index, from
    ``node_devices``; ``hook()`` is the ``hami_allocate`` that reads them) -> ``ContainerAllocation``: the indices in slice order, comma
    separated, a UUID whose index is unknown (no discovery tool, ``hami simulate``)
    written as the UUID itself, which the runtime cannot take for another device's
    index; without the runtime the nodes of the known indices and the control nodes.

    Attributes:
        visible_devices: the env variable.
        none: its value for a container without devices (Kunlunxin's ``none``); None:
            such a container gets nothing.
        device_nodes: per-device node paths, ``{index}`` replaced by the node index.
        host_optional_nodes: per-device nodes exposed only where the host has them
            (Cambricon's ``/dev/cambricon_ipcm<i>``, MLU370 and later).
        control_nodes: nodes exposed once for any device (``/dev/xpuctrl``).
        extra: what the vendor adds for a container with devices (a limit env, a
            mount), merged in; None for nothing.
    """

    visible_devices: str
    none: str | None = None
    device_nodes: tuple[str, ...] = ()
    host_optional_nodes: tuple[str, ...] = ()
    control_nodes: tuple[str, ...] = ()
    extra: Extra | None = None

    #: The section option that says the vendor's container runtime injects the nodes.
    USE_RUNTIME = "useContainerRuntime"

    def hook(
        self,
    ) -> Callable[[ContainerDevices, VendorConfig, Sequence[DeviceInfo]], ContainerAllocation]:
        """This allocation as the backend's ``hami_allocate`` implementation, marked:
        ``hami_allocate = allocate.hook()`` in its plugin module; ``indices`` are the
        ``index`` of each of the node's discovered devices the hook receives."""

        @hookimpl
        def hami_allocate(
            devices: ContainerDevices, config: VendorConfig, node_devices: Sequence[DeviceInfo]
        ) -> ContainerAllocation:
            return self(devices, config, indices={d.uuid: d.index for d in node_devices})

        return hami_allocate

    def __call__(
        self, devices: ContainerDevices, config: VendorConfig, *, indices: Mapping[str, int]
    ) -> ContainerAllocation:
        if not devices:
            none = {self.visible_devices: self.none} if self.none is not None else {}
            return ContainerAllocation(envs=none)
        ids = [str(indices[d.uuid]) if d.uuid in indices else d.uuid for d in devices]
        nodes: list[DeviceNode] = []
        if not config.options.get(self.USE_RUNTIME, True):
            for d in devices:
                if d.uuid in indices:
                    nodes += self._nodes(indices[d.uuid])
            nodes += [DeviceNode(container_path=p, host_path=p) for p in self.control_nodes]
        own = ContainerAllocation(
            envs={self.visible_devices: ",".join(ids)}, device_nodes=tuple(nodes)
        )
        if self.extra is None:
            return own
        more = self.extra(devices, config)
        return attrs.evolve(
            own,
            envs={**own.envs, **more.envs},
            device_nodes=own.device_nodes + more.device_nodes,
            mounts=own.mounts + more.mounts,
        )

    def _nodes(self, index: int) -> list[DeviceNode]:
        paths = [p.format(index=index) for p in self.device_nodes]
        paths += [
            p.format(index=index)
            for p in self.host_optional_nodes
            if os.path.exists(p.format(index=index))
        ]
        return [DeviceNode(container_path=p, host_path=p) for p in paths]
