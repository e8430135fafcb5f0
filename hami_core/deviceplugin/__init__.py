"""Device-plugin domain logic, without gRPC (PROTOCOL.md §2-4, §7).

- ``devices``: fake IDs ``<UUID>-<i>``, kubelet's view of the devices, preferred IDs.
- ``state``: the versioned device list behind ``ListAndWatch``.
- ``agent``: the node agent (discovery, inventory, handshake, per-node overrides).
- ``pending``: which pod kubelet is allocating.
- ``allocator``: the ``Allocate`` / ``GetPreferredAllocation`` use cases.
- ``cdi``: CDI mode.
- ``allocate``: the end of an allocation (phase and lock).

The gRPC edge is ``hami_core.servers.deviceplugin``.
"""

from .agent import NodeAgent, NodeOverrides, load_node_overrides
from .allocate import finish_allocation
from .allocator import (
    AllocateFailedError,
    Allocator,
    DeviceCountMismatchError,
    NoPendingPodError,
    PreferredRequest,
)
from .cdi import CdiWriter
from .devices import KubeletDevice, fake_ids, kubelet_devices, physical_uuid
from .state import DeviceState

__all__ = [
    "AllocateFailedError",
    "Allocator",
    "CdiWriter",
    "DeviceCountMismatchError",
    "DeviceState",
    "KubeletDevice",
    "NoPendingPodError",
    "NodeAgent",
    "NodeOverrides",
    "PreferredRequest",
    "fake_ids",
    "finish_allocation",
    "kubelet_devices",
    "load_node_overrides",
    "physical_uuid",
]
