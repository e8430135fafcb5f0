"""Physical devices as a node advertises them, and their usage by live pods."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .mig import MigProfile, MigSlot

DEVICE_MODES = ("hami-core", "mig", "mps")

#: ``DeviceInfo.node_local`` keys the core reads, for a device that is part of another
#: physical device (a MIG instance published as a device of its own, under the NVIDIA
#: device plugin's ``single`` strategy): the whole device's UUID, and the part's index as
#: the vendor's own device plugin numbers it, ``"<whole device's index>:<n>"`` (NVIDIA's
#: ``rm/nvml_devices.go`` ``newMigDevice``: ``"%v:%v"`` of the GPU index and the MIG
#: device index, as ``nvidia-smi -L`` lists "MIG ... Device <n>"); the per-node
#: ``filterdevices`` addresses parts by it.
PARENT_UUID = "parentUUID"
PART_INDEX = "partIndex"
#: ``DeviceInfo.node_local`` key of a whole device whose parts have UUIDs of their own (a
#: GPU in MIG mode published whole: its instances' MIG UUIDs), comma separated: what a pod
#: placed while the parts were published as devices names instead of the device.
PART_UUIDS = "partUUIDs"


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen(kw_only=True)
class DeviceInfo:
    """One physical device of a node, as the node inventory (PROTOCOL.md §2) states it.

    Attributes:
        uuid: the vendor's stable device id, e.g. ``GPU-9a1b...`` (wire key ``id``).
        vendor: the vendor key, e.g. ``NVIDIA``, ``Ascend910B3``, ``MLU``, ``DCU``, ``XPU``.
        model: the device model, e.g. ``NVIDIA A100-SXM4-80GB`` (wire key ``type``).
        index: the device's index on the node (NVML index for NVIDIA).
        split_count: how many containers may share the device at once (wire ``count``).
        memory_mib: schedulable memory in MiB, after memory scaling (wire ``devmem``).
        cores_pct: schedulable compute in percent of the device, 100 x core scaling
            (wire ``devcore``).
        numa: the NUMA node the device is attached to.
        mode: ``hami-core`` (shared through the shim), ``mig`` or ``mps``.
        healthy: False when the device plugin reports the device unhealthy.
        custom: vendor facts about the device that fit or score read, as ``(key,
            value)`` pairs (HAMi's ``CustomInfo``: MetaX's QoS policy and link zone, an
            AWS instance type, a Vastai die's card). Filled by a backend's
            ``hami_node_devices``; not part of the inventory's wire form.
        mig_profiles: for a GPU in ``mig`` mode, the MIG profiles it offers and where
            (inventory ``migProfiles``, HAMi 2.10); empty otherwise.
        node_local: facts only the node needs at ``Allocate``, filled by discovery and
            never encoded into the inventory (so absent from what the scheduler
            decodes, and left out of equality): e.g. Ascend's physical id, Hygon's PCI
            bus and DRM nodes, a card index. Keys and values are the backend's own.
    """

    uuid: str = attrs.field(validator=attrs.validators.min_len(1))
    vendor: str = attrs.field(validator=attrs.validators.min_len(1))
    model: str = ""
    index: int = attrs.field(default=0, validator=_non_negative)
    split_count: int = attrs.field(default=0, validator=_non_negative)
    memory_mib: int = attrs.field(default=0, validator=_non_negative)
    cores_pct: int = attrs.field(default=0, validator=_non_negative)
    numa: int = 0
    mode: str = "hami-core"
    healthy: bool = True
    custom: tuple[tuple[str, str], ...] = ()
    mig_profiles: tuple[MigProfile, ...] = ()
    node_local: Mapping[str, str] = attrs.field(factory=dict, eq=False, repr=False)

    def info(self, key: str, default: str = "") -> str:
        """The ``custom`` value of ``key``, or ``default``."""
        return next((v for k, v in self.custom if k == key), default)


@attrs.frozen(kw_only=True)
class DeviceUsage:
    """A device together with what live pods already hold of it.

    Usage is recomputed from the allocations of live pods (by pod UID); it is never
    a counter that could drift.

    Attributes:
        device: the device.
        used_count: containers currently sharing the device.
        used_memory_mib: memory held, MiB.
        used_cores_pct: compute held, percent of the device.
        cordoned: True when the node lists the device in ``hami.io/device-cordon``.
        holders: the annotations of each live pod that holds part of the device, one
            entry per pod (HAMi's ``DeviceUsage.PodInfos``: MetaX's app-class rules read
            what kind of pods share a device). Not part of equality.
        mig_in_use: the MIG instances live pods hold on the device (a ``mig`` mode GPU).
    """

    device: DeviceInfo
    used_count: int = attrs.field(default=0, validator=_non_negative)
    used_memory_mib: int = attrs.field(default=0, validator=_non_negative)
    used_cores_pct: int = attrs.field(default=0, validator=_non_negative)
    cordoned: bool = False
    holders: tuple[Mapping[str, str], ...] = attrs.field(default=(), eq=False, repr=False)
    mig_in_use: tuple[MigSlot, ...] = ()

    @property
    def free_memory_mib(self) -> int:
        """Memory still free, MiB; 0 when usage exceeds the inventory (never negative)."""
        return max(0, self.device.memory_mib - self.used_memory_mib)

    @property
    def free_cores_pct(self) -> int:
        """Compute still free, percent of the device; never negative."""
        return max(0, self.device.cores_pct - self.used_cores_pct)

    def charged(
        self, *, memory_mib: int, cores_pct: int, mig: MigSlot | None = None
    ) -> DeviceUsage:
        """Return the usage after one more container takes ``memory_mib`` / ``cores_pct``
        (and, on a MIG GPU, the instance ``mig``)."""
        return attrs.evolve(
            self,
            used_count=self.used_count + 1,
            used_memory_mib=self.used_memory_mib + memory_mib,
            used_cores_pct=self.used_cores_pct + cores_pct,
            mig_in_use=self.mig_in_use + ((mig,) if mig is not None else ()),
        )


@attrs.frozen(kw_only=True)
class NodeInfo:
    """A node's devices as read from its annotations (PROTOCOL.md §2).

    Attributes:
        name: the Kubernetes node name.
        devices: the devices of every vendor, in inventory order.
        cordoned_uuids: devices listed in ``hami.io/device-cordon``.
        link_scores: pair scores between devices, ``{uuid: {other_uuid: score}}``
            (``hami.io/node-nvidia-score``); empty when topology is not published.
        unregistered: vendor key -> reason, for vendors whose inventory annotation is
            missing-but-expected, malformed or stale. Such a node is reported
            ``NodeUnregistered`` for that vendor; other nodes are unaffected.
        ignored: annotation key -> why, for optional annotations that could not be read
            and were left out (PROTOCOL.md §2: link scores); the node's devices are
            unaffected. Readers log it.
    """

    name: str
    devices: tuple[DeviceInfo, ...] = ()
    cordoned_uuids: frozenset[str] = frozenset()
    link_scores: Mapping[str, Mapping[str, int]] = attrs.field(factory=dict)
    unregistered: Mapping[str, str] = attrs.field(factory=dict)
    ignored: Mapping[str, str] = attrs.field(factory=dict)

    def devices_of(self, vendor: str) -> tuple[DeviceInfo, ...]:
        """The node's devices of one vendor key, in inventory order."""
        return tuple(d for d in self.devices if d.vendor == vendor)
