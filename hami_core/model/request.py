"""What a pod asks for: per container, per vendor."""

from __future__ import annotations

import attrs

from .device import DeviceInfo


@attrs.frozen(kw_only=True)
class DeviceRequest:
    """One container's request for devices of one vendor, defaults already applied.

    Exactly one of ``memory_mib`` and ``memory_pct`` is set (> 0): a request without
    memory asks for 100 percent of each device (PROTOCOL.md §1).

    Attributes:
        vendor: the vendor key, e.g. ``NVIDIA``.
        count: number of distinct physical devices; memory and cores are per device.
        memory_mib: memory per device in MiB, or 0 when ``memory_pct`` is used.
        memory_pct: memory per device in percent of that device (1..100), or 0.
        cores_pct: compute per device in percent (0..100); 100 means exclusive.
        custom: vendor facts of the request its fit reads, as ``(key, value)`` pairs,
            where the request cannot be stated in memory and cores before the node is
            known (Enflame's DRS slice size, resolved against the node's profiles).
    """

    vendor: str = attrs.field(validator=attrs.validators.min_len(1))
    count: int = attrs.field(validator=attrs.validators.ge(1))
    memory_mib: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    memory_pct: int = attrs.field(
        default=0, validator=[attrs.validators.ge(0), attrs.validators.le(100)]
    )
    cores_pct: int = attrs.field(
        default=0, validator=[attrs.validators.ge(0), attrs.validators.le(100)]
    )
    custom: tuple[tuple[str, str], ...] = ()

    def __attrs_post_init__(self) -> None:
        if (self.memory_mib > 0) == (self.memory_pct > 0):
            raise ValueError(
                "exactly one of memory_mib and memory_pct must be > 0, got "
                f"memory_mib={self.memory_mib} memory_pct={self.memory_pct}"
            )

    def info(self, key: str, default: str = "") -> str:
        """The ``custom`` value of ``key``, or ``default``."""
        return next((v for k, v in self.custom if k == key), default)

    def memory_on(self, device: DeviceInfo) -> int:
        """Memory this request takes on ``device``, MiB: ``floor(total x pct / 100)``."""
        if self.memory_mib:
            return self.memory_mib
        return device.memory_mib * self.memory_pct // 100


@attrs.frozen(kw_only=True)
class ContainerRequest:
    """The device requests of one container.

    Attributes:
        name: the container name.
        init: True for an init container.
        devices: one request per vendor the container asks for (usually one); empty for
            a container without managed devices.
    """

    name: str
    init: bool = False
    devices: tuple[DeviceRequest, ...] = ()


@attrs.frozen(kw_only=True)
class PodRequest:
    """A pod's device requests, one entry per container, init containers first.

    The order is the order of PROTOCOL.md §3's device list: all init containers in
    spec order, then the app containers in spec order.
    """

    namespace: str
    name: str
    uid: str
    containers: tuple[ContainerRequest, ...] = ()

    @property
    def vendors(self) -> tuple[str, ...]:
        """Vendor keys asked for by any container, in first-seen order."""
        seen: dict[str, None] = {}
        for c in self.containers:
            for r in c.devices:
                seen.setdefault(r.vendor, None)
        return tuple(seen)

    @property
    def wants_devices(self) -> bool:
        """True when any container asks for a managed device."""
        return any(c.devices for c in self.containers)
