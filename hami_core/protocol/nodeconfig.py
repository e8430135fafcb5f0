"""Per-node overrides of the device plugin, in the shape of HAMi's device-plugin
``config.json``, so a HAMi user's ConfigMap works unchanged.

Example::

    {"nodeconfig": [{"name": "gpu-node-1", "devicesplitcount": 4,
                     "devicememoryscaling": 1.5, "devicecorescaling": 1,
                     "filterdevices": {"uuid": ["GPU-..."], "index": [3]}}]}

YAML with the same keys is accepted. Every key of HAMi 2.10's entry
(``pkg/device/nvidia/device.go`` ``DevicePluginConfigs`` / ``NodeDefaultConfig``, the
chart's default ``nodeconfig``) is accepted: ``preconfigureddevicememory`` (MiB for a
device whose memory the driver does not report), ``enablenumatopology`` (NUMA nodes sent
to kubelet), ``operatingmode`` (``hami-core``, ``mps`` or ``mig``: published as every device's
inventory ``mode``, PROTOCOL.md §2; ``mig`` is HAMi's dynamic MIG, and a GPU already in
MIG mode is inventoried as ``mig`` whatever the node's mode: docs/sharing-modes.md),
``migstrategy`` (``none``, ``single``, ``mixed``: the NVIDIA device plugin's; handed to
the backend as ``VendorConfig.mig_strategy``: under ``single`` the NVIDIA backend
publishes every MIG instance of an administrator-partitioned node as a device of its
own, so ``nvidia.com/gpu: N`` asks N instances; ``none`` and ``mixed`` change nothing,
the scheduler accepts the ``nvidia.com/mig-<profile>`` names on every node;
``filterdevices.index`` then also takes ``"<gpu>:<n>"``, a MIG instance as NVIDIA's
device plugin numbers it: ``NodeOverrides.select``);
``enablegetpreferredallocation: false`` and ``libcudaloglevel`` are read and logged as
not applied (we always offer ``GetPreferredAllocation``: it keeps kubelet's IDs on the
GPUs the scheduler chose).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from hami_core.errors import ConfigError
from hami_core.model import PARENT_UUID, PART_INDEX, DeviceInfo
from hami_core.protocol.config import MAX_SPLIT_COUNT, VendorConfig, read_config_document
from hami_core.protocol.documents import shown, shown_key, shown_message

log = logging.getLogger(__name__)

_NODE_KEYS = frozenset(
    {
        "name",
        "operatingmode",
        "migstrategy",
        "devicesplitcount",
        "devicememoryscaling",
        "devicecorescaling",
        "filterdevices",
        "preconfigureddevicememory",
        "enablenumatopology",
        "enablegetpreferredallocation",
        "libcudaloglevel",
    }
)

#: ``operatingmode`` values accepted (HAMi 2.10's).
OPERATING_MODES = ("hami-core", "mps", "mig")
#: ``migstrategy`` values (the NVIDIA device plugin's).
MIG_STRATEGIES = ("none", "single", "mixed")


@attrs.frozen(kw_only=True)
class NodeOverrides:
    """One node's entry of the per-node file; None keeps the cluster-wide value.

    Attributes:
        split_count: ``devicesplitcount``.
        memory_scaling: ``devicememoryscaling``.
        core_scaling: ``devicecorescaling``.
        exclude_uuids: ``filterdevices.uuid``: devices not advertised.
        exclude_indexes: ``filterdevices.index``: devices not advertised, by index.
        exclude_parts: ``filterdevices.index`` entries ``"<index>:<n>"``: parts of a
            device published as devices of their own (``PART_INDEX``: a MIG instance under
            the ``single`` strategy, as NVIDIA's device plugin numbers it) not advertised.
        preconfigured_memory_mib: ``preconfigureddevicememory``: MiB of a device whose
            discovery reports no memory (0 or None: such a device keeps 0).
        numa_topology: ``enablenumatopology``; None: our default (sent).
        mode: ``operatingmode`` (``hami-core``, ``mps`` or ``mig``), the inventory
            ``mode`` of every device of the node; None: the backend's own.
        mig_strategy: ``migstrategy`` (``none``, ``single``, ``mixed``); None: not set.
    """

    split_count: int | None = None
    memory_scaling: float | None = None
    core_scaling: float | None = None
    exclude_uuids: frozenset[str] = frozenset()
    exclude_indexes: frozenset[int] = frozenset()
    exclude_parts: frozenset[str] = frozenset()
    preconfigured_memory_mib: int | None = None
    numa_topology: bool | None = None
    mode: str | None = None
    mig_strategy: str | None = None

    def apply(self, config: VendorConfig) -> VendorConfig:
        """``config`` with this node's values in force."""
        changes: dict[str, Any] = {}
        if self.split_count is not None:
            changes["split_count"] = self.split_count
        if self.memory_scaling is not None:
            changes["memory_scaling"] = self.memory_scaling
        if self.core_scaling is not None:
            changes["core_scaling"] = self.core_scaling
        if self.mode is not None:
            changes["operating_mode"] = self.mode
        if self.mig_strategy is not None:
            changes["mig_strategy"] = self.mig_strategy
        return attrs.evolve(config, **changes)

    def keeps(self, device: DeviceInfo) -> bool:
        """False for a device the node's ``filterdevices`` leaves out: by its UUID; a
        part of a device (``PART_INDEX`` set) by its part index ``"<index>:<n>"``, any
        other device by its index (HAMi's ``FilterDeviceToRegister``)."""
        if device.uuid in self.exclude_uuids:
            return False
        part = device.node_local.get(PART_INDEX)
        if part is not None:
            return part not in self.exclude_parts
        return device.index not in self.exclude_indexes

    def select(self, devices: Sequence[DeviceInfo], *, node: str) -> tuple[DeviceInfo, ...]:
        """The ``devices`` this node's ``filterdevices`` keeps (``keeps``), after checking
        every entry addresses what the node publishes.

        Where parts of a device are published as devices (a MIG instance under the NVIDIA
        device plugin's ``single`` strategy, ``PARENT_UUID``), the whole device is not one:
        NVIDIA's device plugin knows it there by no index (its MIG devices are
        ``"<gpu>:<n>"``: rm/device_map.go's ``devices.GetByIndex`` finds no ``"<gpu>"``) and HAMi's
        ``FilterDeviceToRegister`` matches no MIG device by index. Leaving the whole GPU out
        for it, or silently nothing, would both surprise; so the entry is refused.

        Raises:
            ConfigError: an index or UUID entry names a whole device whose parts are the
                published devices, or a part index is given where no part is published;
                names ``nodeconfig[<node>].filterdevices`` and the entry.
        """
        where = f"nodeconfig[{node}].filterdevices"
        parts = [d for d in devices if PART_INDEX in d.node_local]
        wholes = {d.node_local.get(PARENT_UUID, "") for d in parts} - {""}
        for index in sorted(self.exclude_indexes):
            named = sorted(str(d.node_local[PART_INDEX]) for d in parts if d.index == index)
            if named:
                raise ConfigError(
                    f"{where}.index: {index} is a whole GPU, but this node publishes its MIG "
                    f"instances as devices (migstrategy: single): name an instance by its "
                    f"index ({', '.join(repr(n) for n in named)}) or its MIG UUID in "
                    f"{where}.uuid"
                )
        for uuid in sorted(self.exclude_uuids):
            if uuid in wholes:
                named = sorted(d.uuid for d in parts if d.node_local.get(PARENT_UUID) == uuid)
                raise ConfigError(
                    f"{where}.uuid: {uuid} is a whole GPU, but this node publishes its MIG "
                    f"instances as devices (migstrategy: single): name the instances "
                    f"({', '.join(named)}) or their indexes in {where}.index"
                )
        if self.exclude_parts and not parts:
            raise ConfigError(
                f"{where}.index: {', '.join(repr(p) for p in sorted(self.exclude_parts))} "
                "names a MIG instance, but this node publishes whole GPUs (only under "
                "migstrategy: single is a MIG instance a device): name the GPU's index"
            )
        return tuple(d for d in devices if self.keeps(d))

    def unmatched_parts(self, devices: Sequence[DeviceInfo]) -> frozenset[str]:
        """The ``filterdevices.index`` part entries no device of ``devices`` carries (an
        instance gone or not made yet: the caller logs them)."""
        return self.exclude_parts - {str(d.node_local.get(PART_INDEX)) for d in devices}


def load_node_overrides(path: str | Path | None, *, node: str) -> NodeOverrides:
    """Read ``node``'s entry from a per-node file; no file or no entry: no overrides.

    Raises:
        ConfigError: unreadable file, unknown key or bad value; names the file, the
            node and the key.
    """
    if path is None:
        return NodeOverrides()
    data = read_config_document(path)
    try:
        return parse_node_overrides(data, node=node)
    except ConfigError as exc:
        raise ConfigError(shown_message(f"{path}: {exc}")) from None


def parse_node_overrides(data: object, *, node: str) -> NodeOverrides:
    """Validate an already-parsed per-node document and return ``node``'s entry.

    Every entry is validated, not only this node's, so a typo fails on every node.
    """
    if data is None:
        return NodeOverrides()
    if not isinstance(data, Mapping):
        raise ConfigError("the per-node configuration must be a mapping with 'nodeconfig'")
    unknown = [k for k in data if k != "nodeconfig"]
    if unknown:
        raise ConfigError(f"unknown key {shown(unknown[0])} (allowed: nodeconfig)")
    entries = data.get("nodeconfig") or []
    if not isinstance(entries, list):
        raise ConfigError("nodeconfig: must be a list")
    found = NodeOverrides()
    seen: set[str] = set()
    for pos, entry in enumerate(entries):
        parsed_name, parsed = _entry(entry, pos)
        if parsed_name in seen:
            raise ConfigError(f"nodeconfig: node {shown(parsed_name)} is listed twice")
        seen.add(parsed_name)
        if parsed_name == node:
            found = parsed
    return found


def _entry(entry: object, pos: int) -> tuple[str, NodeOverrides]:
    where = f"nodeconfig[{pos}]"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: must be a mapping")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: must be a node name")
    where = f"nodeconfig[{shown_key(name)}]"
    for key in entry:
        if key not in _NODE_KEYS:
            raise ConfigError(
                f"{where}.{shown_key(key)}: unknown key (allowed: {', '.join(sorted(_NODE_KEYS))})"
            )
    mode = entry.get("operatingmode")
    if mode not in (*OPERATING_MODES, "", None):
        raise ConfigError(
            f"{where}.operatingmode: {shown(mode)} is not supported "
            f"(one of {', '.join(OPERATING_MODES)})"
        )
    mig = entry.get("migstrategy", "none")
    if mig not in (*MIG_STRATEGIES, "", None):
        raise ConfigError(
            f"{where}.migstrategy: {shown(mig)} is not one of {', '.join(MIG_STRATEGIES)}"
        )
    split = _number(entry, "devicesplitcount", int, where)
    if split is not None and not 1 <= split <= MAX_SPLIT_COUNT:
        raise ConfigError(
            f"{where}.devicesplitcount: must be between 1 and {MAX_SPLIT_COUNT}, got {shown(split)}"
        )
    memory = _number(entry, "devicememoryscaling", float, where)
    core = _number(entry, "devicecorescaling", float, where)
    for key, value in (("devicememoryscaling", memory), ("devicecorescaling", core)):
        if value is not None and value <= 0:
            raise ConfigError(f"{where}.{key}: must be > 0, got {shown(value)}")
    filters = entry.get("filterdevices") or {}
    if not isinstance(filters, Mapping) or set(filters) - {"uuid", "index"}:
        raise ConfigError(f"{where}.filterdevices: must be a mapping of 'uuid' and 'index' lists")
    uuids = filters.get("uuid") or []
    indexes = filters.get("index") or []
    if not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids):
        raise ConfigError(f"{where}.filterdevices.uuid: must be a list of UUIDs")
    if not isinstance(indexes, list) or not all(
        (isinstance(i, int) and not isinstance(i, bool) and i >= 0) or _part_index(i)
        for i in indexes
    ):
        raise ConfigError(
            f"{where}.filterdevices.index: must be a list of indexes >= 0, or of MIG "
            'instance indexes "<gpu>:<n>" under migstrategy: single'
        )
    pre = _number(entry, "preconfigureddevicememory", int, where)
    if pre is not None and pre < 0:
        raise ConfigError(f"{where}.preconfigureddevicememory: must be >= 0, got {shown(pre)}")
    flags = {}
    for key in ("enablenumatopology", "enablegetpreferredallocation"):
        value = entry.get(key)
        if value is not None and not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected true or false, got {shown(value)}")
        flags[key] = value
    if flags["enablegetpreferredallocation"] is False:
        log.info(
            "%s.enablegetpreferredallocation: false is not applied: GetPreferredAllocation "
            "stays offered (it keeps kubelet's device IDs on the GPUs the scheduler chose)",
            where,
        )
    if entry.get("libcudaloglevel") is not None:
        log.warning("%s.libcudaloglevel: not applied by this device plugin", where)
    return name, NodeOverrides(
        preconfigured_memory_mib=pre,
        numa_topology=flags["enablenumatopology"],
        mode=mode or None,
        mig_strategy=mig or None,
        split_count=split,
        memory_scaling=memory,
        core_scaling=core,
        exclude_uuids=frozenset(uuids),
        exclude_indexes=frozenset(i for i in indexes if isinstance(i, int)),
        exclude_parts=frozenset(_part_index(i) for i in indexes if isinstance(i, str)),
    )


def _part_index(value: object) -> str:
    """``"<gpu>:<n>"`` (both integers >= 0) normalised (``"01:2"`` -> ``"1:2"``), or ""."""
    if not isinstance(value, str):
        return ""
    whole, colon, part = value.strip().partition(":")
    if not colon or not (whole + part).isascii() or not whole.isdigit() or not part.isdigit():
        return ""
    return f"{int(whole)}:{int(part)}"


def _number(entry: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in entry or entry[key] is None:
        return None
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{key}: expected a number, got {shown(value)}")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{where}.{key}: expected an integer, got {shown(value)}")
        return int(value)
    if not math.isfinite(value):
        raise ConfigError(f"{where}.{key}: must be a finite number, got {shown(value)}")
    return float(value)
