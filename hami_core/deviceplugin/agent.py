"""The node agent: discover this node's devices and publish them on the Node
(PROTOCOL.md §2).

It writes the inventory annotation (``hami.io/node-nvidia-register`` for NVIDIA), and
the link-score annotation when enabled, only when their value changes, so a quiet node
causes no API writes. It answers the handshake: whenever the handshake annotation is
missing, unreadable or not ``Reported_<time>`` (HAMi's scheduler writes
``Requesting_<time>`` and declares the node dead after 60 s without an answer), and
whenever the inventory changes, it writes ``Reported_<now UTC>``.

Per-node overrides come from a file in the shape of HAMi's device-plugin
``config.json``, so a HAMi user's ConfigMap works unchanged::

    {"nodeconfig": [{"name": "gpu-node-1", "devicesplitcount": 4,
                     "devicememoryscaling": 1.5, "devicecorescaling": 1,
                     "filterdevices": {"uuid": ["GPU-..."], "index": [3]}}]}

YAML with the same keys is accepted. Every key of HAMi 2.10's entry
(``pkg/device/nvidia/device.go`` ``DevicePluginConfigs`` / ``NodeDefaultConfig``, the
chart's default ``nodeconfig``) is accepted: ``preconfigureddevicememory`` (MiB for a
device whose memory the driver does not report), ``enablenumatopology`` (NUMA nodes sent
to kubelet), ``operatingmode`` (only ``hami-core``), ``migstrategy`` (only ``none``);
``enablegetpreferredallocation: false`` and ``libcudaloglevel`` are read and logged as
not applied (we always offer ``GetPreferredAllocation``: it keeps kubelet's IDs on the
GPUs the scheduler chose).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from hami_core.cluster.base import ClusterStore
from hami_core.errors import AnnotationError, ConfigError, HamiError
from hami_core.model import DeviceInfo
from hami_core.plugin import BackendManager
from hami_core.protocol.config import HamiConfig, VendorConfig
from hami_core.protocol.handshake import HandshakeState, decode_handshake, encode_handshake
from hami_core.protocol.inventory import encode_inventory
from hami_core.protocol.topology import encode_link_scores

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


class DiscoveryUnavailableError(HamiError):
    """The backend cannot discover devices on this node (no driver)."""

    grpc_code = "UNAVAILABLE"


@attrs.frozen(kw_only=True)
class NodeOverrides:
    """One node's entry of the per-node file; None keeps the cluster-wide value.

    Attributes:
        split_count: ``devicesplitcount``.
        memory_scaling: ``devicememoryscaling``.
        core_scaling: ``devicecorescaling``.
        exclude_uuids: ``filterdevices.uuid``: devices not advertised.
        exclude_indexes: ``filterdevices.index``: devices not advertised, by index.
        preconfigured_memory_mib: ``preconfigureddevicememory``: MiB of a device whose
            discovery reports no memory (0 or None: such a device keeps 0).
        numa_topology: ``enablenumatopology``; None: our default (sent).
    """

    split_count: int | None = None
    memory_scaling: float | None = None
    core_scaling: float | None = None
    exclude_uuids: frozenset[str] = frozenset()
    exclude_indexes: frozenset[int] = frozenset()
    preconfigured_memory_mib: int | None = None
    numa_topology: bool | None = None

    def apply(self, config: VendorConfig) -> VendorConfig:
        """``config`` with this node's values in force."""
        changes: dict[str, Any] = {}
        if self.split_count is not None:
            changes["split_count"] = self.split_count
        if self.memory_scaling is not None:
            changes["memory_scaling"] = self.memory_scaling
        if self.core_scaling is not None:
            changes["core_scaling"] = self.core_scaling
        return attrs.evolve(config, **changes)

    def keeps(self, device: DeviceInfo) -> bool:
        """False for a device the node's ``filterdevices`` leaves out."""
        return device.uuid not in self.exclude_uuids and device.index not in self.exclude_indexes


def load_node_overrides(path: str | Path | None, *, node: str) -> NodeOverrides:
    """Read ``node``'s entry from a per-node file; no file or no entry: no overrides.

    Raises:
        ConfigError: unreadable file, unknown key or bad value; names the file, the
            node and the key.
    """
    if path is None:
        return NodeOverrides()
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    try:
        return parse_node_overrides(data, node=node)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


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
        raise ConfigError(f"unknown key {unknown[0]!r} (allowed: nodeconfig)")
    entries = data.get("nodeconfig") or []
    if not isinstance(entries, list):
        raise ConfigError("nodeconfig: must be a list")
    found = NodeOverrides()
    seen: set[str] = set()
    for pos, entry in enumerate(entries):
        parsed_name, parsed = _entry(entry, pos)
        if parsed_name in seen:
            raise ConfigError(f"nodeconfig: node {parsed_name!r} is listed twice")
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
    where = f"nodeconfig[{name}]"
    for key in entry:
        if key not in _NODE_KEYS:
            raise ConfigError(
                f"{where}.{key}: unknown key (allowed: {', '.join(sorted(_NODE_KEYS))})"
            )
    mode = entry.get("operatingmode", "hami-core")
    if mode not in ("hami-core", "", None):
        raise ConfigError(f"{where}.operatingmode: {mode!r} is not supported (only hami-core)")
    mig = entry.get("migstrategy", "none")
    if mig not in ("none", "", None):
        raise ConfigError(f"{where}.migstrategy: {mig!r} is not supported (only none)")
    split = _number(entry, "devicesplitcount", int, where)
    if split is not None and split < 1:
        raise ConfigError(f"{where}.devicesplitcount: must be >= 1, got {split}")
    memory = _number(entry, "devicememoryscaling", float, where)
    core = _number(entry, "devicecorescaling", float, where)
    for key, value in (("devicememoryscaling", memory), ("devicecorescaling", core)):
        if value is not None and value <= 0:
            raise ConfigError(f"{where}.{key}: must be > 0, got {value}")
    filters = entry.get("filterdevices") or {}
    if not isinstance(filters, Mapping) or set(filters) - {"uuid", "index"}:
        raise ConfigError(f"{where}.filterdevices: must be a mapping of 'uuid' and 'index' lists")
    uuids = filters.get("uuid") or []
    indexes = filters.get("index") or []
    if not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids):
        raise ConfigError(f"{where}.filterdevices.uuid: must be a list of UUIDs")
    if not isinstance(indexes, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indexes
    ):
        raise ConfigError(f"{where}.filterdevices.index: must be a list of indexes >= 0")
    pre = _number(entry, "preconfigureddevicememory", int, where)
    if pre is not None and pre < 0:
        raise ConfigError(f"{where}.preconfigureddevicememory: must be >= 0, got {pre}")
    flags = {}
    for key in ("enablenumatopology", "enablegetpreferredallocation"):
        value = entry.get(key)
        if value is not None and not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected true or false, got {value!r}")
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
        split_count=split,
        memory_scaling=memory,
        core_scaling=core,
        exclude_uuids=frozenset(uuids),
        exclude_indexes=frozenset(indexes),
    )


def _number(entry: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in entry or entry[key] is None:
        return None
    value = entry[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{key}: expected a number, got {value!r}")
    if kind is int:
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{where}.{key}: expected an integer, got {value!r}")
        return int(value)
    return float(value)


@attrs.frozen(kw_only=True)
class PublishResult:
    """What one ``NodeAgent.publish`` wrote (all False: nothing written)."""

    inventory: bool = False
    link_scores: bool = False
    handshake: bool = False

    @property
    def wrote(self) -> bool:
        return self.inventory or self.link_scores or self.handshake


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class NodeAgent:
    """Discovers one backend's devices of one vendor and publishes them on the Node."""

    def __init__(
        self,
        store: ClusterStore,
        manager: BackendManager,
        *,
        backend: str,
        vendor: str,
        node: str,
        overrides: NodeOverrides | None = None,
        link_scores: bool = False,
        clock: Callable[[], dt.datetime] = utcnow,
    ) -> None:
        """Args:
        store: the cluster (this node is read and patched).
        manager: the backends under the cluster-wide configuration; the agent keeps
            a copy under this node's overrides (``self.manager``).
        backend, vendor: what is served (``nvidia``, ``NVIDIA``).
        node: this node's name.
        overrides: this node's entry of the per-node file.
        link_scores: publish the vendor key's ``link_score_annotation`` from
            ``hami_link_scores``.
        clock: now, timezone-aware (tests pin it).
        """
        self.store = store
        self.backend = backend
        self.vendor = vendor
        self.node = node
        self.overrides = overrides or NodeOverrides()
        base = manager.config
        vendors = dict(base.vendors)
        vendors[backend] = self.overrides.apply(base.vendor(backend))
        self.manager = manager.with_config(attrs.evolve(base, vendors=vendors))
        self.dtype = self.manager.device_type(vendor)
        self.link_scores_enabled = link_scores
        self.clock = clock

    @property
    def config(self) -> VendorConfig:
        """The backend's configuration on this node (overrides applied)."""
        return self.manager.vendor_config(self.backend)

    @property
    def hami_config(self) -> HamiConfig:
        return self.manager.config

    @property
    def score_annotation(self) -> str:
        """The vendor key's ``link_score_annotation`` (``hami.io/node-nvidia-score`` for
        NVIDIA); "" when the vendor publishes none."""
        return self.manager.device_type(self.vendor).link_score_annotation

    def discover(self) -> tuple[DeviceInfo, ...]:
        """This node's devices of the vendor, minus those the overrides leave out.

        Raises:
            DiscoveryUnavailableError: the backend cannot discover here (no driver).
            BackendError / HamiError: discovery failed (e.g. the driver does not answer).
        """
        devices = self.manager.discover(self.backend)
        if devices is None:
            raise DiscoveryUnavailableError(
                f"backend {self.backend!r} cannot discover devices on node {self.node} "
                "(is the driver installed and its library on the library path?)"
            )
        kept = tuple(
            self._preconfigured(d)
            for d in devices
            if d.vendor == self.vendor and self.overrides.keeps(d)
        )
        kept_uuids = {d.uuid for d in kept}
        left_out = [d.uuid for d in devices if d.vendor == self.vendor and d.uuid not in kept_uuids]
        if left_out:
            log.debug("node config leaves out %s", left_out)
        return kept

    def _preconfigured(self, device: DeviceInfo) -> DeviceInfo:
        """HAMi's ``preconfigureddevicememory`` for a device reporting no memory (some
        drivers cannot report it), scaled like discovered memory."""
        pre = self.overrides.preconfigured_memory_mib
        if device.memory_mib or not pre:
            return device
        return attrs.evolve(device, memory_mib=int(pre * self.config.memory_scaling))

    def scores(self, devices: tuple[DeviceInfo, ...]) -> dict[str, dict[str, int]] | None:
        """Link scores to publish, or None when disabled or the backend has none."""
        if not self.link_scores_enabled:
            return None
        return self.manager.link_scores(self.backend, devices)

    def publish(
        self,
        devices: tuple[DeviceInfo, ...],
        *,
        scores: Mapping[str, Mapping[str, int]] | None = None,
    ) -> PublishResult:
        """Write what changed: inventory, link scores, handshake; one patch at most.

        Raises:
            NotFoundError: the Node does not exist (yet).
            HamiError: the API server refused the patch.
        """
        node = self.store.get_node(self.node)
        ann: Mapping[str, str] = (node.get("metadata") or {}).get("annotations") or {}
        changes: dict[str, str | None] = {}
        inventory = encode_inventory(list(devices))
        if ann.get(self.dtype.register_annotation) != inventory:
            changes[self.dtype.register_annotation] = inventory
        if scores is not None:
            encoded = encode_link_scores(scores)
            if ann.get(self.score_annotation) != encoded:
                changes[self.score_annotation] = encoded
        elif self.score_annotation in ann:
            # Scoring turned off: stale scores would keep steering topology-aware picks.
            changes[self.score_annotation] = None
        handshake = ann.get(self.dtype.handshake_annotation)
        if changes or not _reported(handshake):
            changes[self.dtype.handshake_annotation] = encode_handshake(
                HandshakeState.REPORTED, self.clock()
            )
        if changes:
            self.store.patch_node_annotations(self.node, changes)
            log.info("node %s: published %s", self.node, ", ".join(sorted(changes)))
        return PublishResult(
            inventory=self.dtype.register_annotation in changes,
            link_scores=self.score_annotation in changes,
            handshake=self.dtype.handshake_annotation in changes,
        )


def _reported(value: str | None) -> bool:
    if not value:
        return False
    try:
        return decode_handshake(value).state is HandshakeState.REPORTED
    except AnnotationError:
        return False
