"""What a pod was given: devices per container, per vendor (PROTOCOL.md §3)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .mig import MigSlot


@attrs.frozen(kw_only=True)
class ContainerDevice:
    """One slice of one physical device, held by one container.

    Wire form (PROTOCOL.md §3): ``<uuid>,<vendor>,<memory_mib>,<cores_pct>``. ``mig``
    (the MIG instance chosen on a ``mig`` mode GPU) is not in that form: it travels in
    ``hami.io/vgpu-mig-allocations`` (``hami_core.protocol.migallocations``).
    """

    uuid: str = attrs.field(validator=attrs.validators.min_len(1))
    vendor: str = attrs.field(validator=attrs.validators.min_len(1))
    memory_mib: int = attrs.field(validator=attrs.validators.ge(0))
    cores_pct: int = attrs.field(validator=attrs.validators.ge(0))
    mig: MigSlot | None = None


#: Devices of one container (possibly empty).
ContainerDevices = tuple[ContainerDevice, ...]
#: One entry per container of a pod: init containers first, then app containers.
PodDevices = tuple[ContainerDevices, ...]


@attrs.frozen(kw_only=True)
class Allocation:
    """A pod's placement: the node and, per vendor key, the devices of each container.

    Attributes:
        node: the node name.
        devices: vendor key -> one entry per container (init containers first), each
            the tuple of device slices that container holds (empty when none).
    """

    node: str
    devices: Mapping[str, PodDevices] = attrs.field(factory=dict)

    def all_devices(self) -> tuple[ContainerDevice, ...]:
        """Every slice of every vendor and container, flattened."""
        return tuple(d for per_pod in self.devices.values() for c in per_pod for d in c)
