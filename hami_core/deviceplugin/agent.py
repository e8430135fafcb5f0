"""The node agent: discover this node's devices and publish them on the Node
(PROTOCOL.md §2).

It writes the inventory annotation (``hami.io/node-nvidia-register`` for NVIDIA), and
the link-score annotation when enabled, only when their value changes, so a quiet node
causes no API writes. It answers the handshake: whenever the handshake annotation is
missing, unreadable or not ``Reported_<time>`` (HAMi's scheduler writes
``Requesting_<time>`` and declares the node dead after 60 s without an answer), and
whenever the inventory changes, it writes ``Reported_<now UTC>``.

Per-node overrides (HAMi's device-plugin ``config.json``) are read by
``hami_core.protocol.nodeconfig``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence

import attrs

from hami_core.backend import scaled
from hami_core.cluster.base import ClusterStore
from hami_core.errors import AnnotationError, ConfigError, HamiError
from hami_core.model import DeviceInfo
from hami_core.plugin import BackendManager
from hami_core.protocol.config import HamiConfig, VendorConfig
from hami_core.protocol.handshake import (
    HandshakeState,
    decode_handshake,
    encode_handshake,
    podresources_key,
)
from hami_core.protocol.inventory import encode_inventory
from hami_core.protocol.nodeconfig import NodeOverrides, load_node_overrides, parse_node_overrides
from hami_core.protocol.topology import encode_link_scores

from .reshaped import reshaped_holdings

log = logging.getLogger(__name__)

__all__ = [
    "DiscoveryUnavailableError",
    "NodeAgent",
    "NodeOverrides",
    "PublishResult",
    "load_node_overrides",
    "parse_node_overrides",
]


class DiscoveryUnavailableError(HamiError):
    """The backend cannot discover devices on this node (no driver)."""

    grpc_code = "UNAVAILABLE"


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
        self._unmatched_parts: frozenset[str] = frozenset()
        #: True while this node's ``Allocate`` tells pods apart without the node lock
        #: (``Allocator.identifies_pods``): each handshake answer then says so.
        self.identifies_pods: Callable[[], bool] = lambda: False

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
            ConfigError: a ``filterdevices`` entry does not address what the node
                publishes (``NodeOverrides.select``).
            BackendError / HamiError: discovery failed (e.g. the driver does not answer).
        """
        devices = self.manager.discover(self.backend)
        if devices is None:
            raise DiscoveryUnavailableError(
                f"backend {self.backend!r} cannot discover devices on node {self.node} "
                "(is the driver installed and its library on the library path?)"
            )
        mine = [d for d in devices if d.vendor == self.vendor]
        kept = tuple(self._preconfigured(d) for d in self.overrides.select(mine, node=self.node))
        unmatched = self.overrides.unmatched_parts(mine)
        if unmatched and unmatched != self._unmatched_parts:  # once per change, not per round
            log.warning(
                "nodeconfig[%s].filterdevices.index: no MIG instance %s on this node",
                self.node,
                ", ".join(sorted(unmatched)),
            )
        self._unmatched_parts = unmatched
        kept_uuids = {d.uuid for d in kept}
        left_out = [d.uuid for d in devices if d.vendor == self.vendor and d.uuid not in kept_uuids]
        if left_out:
            log.debug("node config leaves out %s", left_out)
        return kept

    def check_reshaped(self, devices: Sequence[DeviceInfo]) -> None:
        """Refuse ``devices`` when live pods our scheduler placed here hold some of them
        under UUIDs of another shape (``reshaped.reshaped_holdings``: the node's
        ``migstrategy`` changed while pods held its GPUs), so the same memory is never
        handed out twice. An unreadable pod list refuses nothing (the pods cannot be
        known; the scheduler's own usage rule still applies).

        Raises:
            ConfigError: names the node's strategy, the pods and devices, and what to do.
        """
        try:
            pods = self.store.pods_on_node(self.node)
        except HamiError as exc:
            log.warning("cannot list the pods of %s to check what they hold: %s", self.node, exc)
            return
        held = reshaped_holdings(
            pods,
            devices,
            self.dtype,
            node=self.node,
            scheduler_name=self.hami_config.scheduler_name,
        )
        if held:
            raise ConfigError(
                f"node {self.node}: migstrategy {self.config.mig_strategy or 'none'} "
                f"(operatingmode {self.config.operating_mode}) publishes these devices in "
                f"another shape than live pods hold them: {'; '.join(held)}. Changing "
                "migstrategy while pods hold the GPUs would hand the same memory out "
                "twice: delete or drain those pods, or restore the previous migstrategy "
                "in the node configuration; the device plugin starts once no pod holds "
                "them (the node keeps its previous inventory until then)"
            )

    def _preconfigured(self, device: DeviceInfo) -> DeviceInfo:
        """The node's ``operatingmode`` as the device's inventory ``mode``, and HAMi's
        ``preconfigureddevicememory`` for a device reporting no memory (some drivers
        cannot report it), scaled like discovered memory. A device the backend reports
        in ``mig`` mode stays so (a GPU in MIG mode is never shared any other way), and
        on a ``mig`` node the backend's mode stands (it advertises only MIG GPUs)."""
        mode = self.overrides.mode
        if mode is not None and device.mode != mode and "mig" not in (device.mode, mode):
            device = attrs.evolve(device, mode=mode)
        pre = self.overrides.preconfigured_memory_mib
        if device.memory_mib or not pre:
            return device
        return attrs.evolve(device, memory_mib=scaled(pre, self.config.memory_scaling))

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
        # The capability rides on the handshake answer, with its exact value
        # (PROTOCOL.md §4): another device plugin's answer makes it lapse.
        capability = podresources_key(self.dtype.handshake_annotation)
        capable = self.identifies_pods()
        claim_wrong = ann.get(capability) != handshake if capable else capability in ann
        if changes or not _reported(handshake) or claim_wrong:
            answer = encode_handshake(HandshakeState.REPORTED, self.clock())
            changes[self.dtype.handshake_annotation] = answer
            if capable:
                changes[capability] = answer
            elif capability in ann:
                changes[capability] = None
        if changes:
            self.store.patch_node_annotations(self.node, changes)
            log.info("node %s: published %s", self.node, ", ".join(sorted(changes)))
        return PublishResult(
            inventory=self.dtype.register_annotation in changes,
            link_scores=self.score_annotation in changes,
            handshake=self.dtype.handshake_annotation in changes,
        )

    def withdraw(self) -> None:
        """Remove this vendor's capability annotation (the process stops: the node's
        next device plugin may not tell pods apart). Best effort: a failure is logged,
        and the capability lapses anyway at the next device plugin's handshake answer."""
        key = podresources_key(self.dtype.handshake_annotation)
        try:
            node = self.store.get_node(self.node)
            if key in ((node.get("metadata") or {}).get("annotations") or {}):
                self.store.patch_node_annotations(self.node, {key: None})
        except HamiError as exc:
            log.warning("node %s: cannot remove %s: %s", self.node, key, exc)


def _reported(value: str | None) -> bool:
    if not value:
        return False
    try:
        return decode_handshake(value).state is HandshakeState.REPORTED
    except AnnotationError:
        return False
