"""MIG on the node side: what a GPU in MIG mode offers, the instance a container gets at
``Allocate``, and freeing the instances no pod holds (HAMi 2.10's device plugin
``pkg/device-plugin/nvidiadevice/nvinternal/plugin``: ``register.go``
``discoverMigProfiles``, ``migmgr.go``, ``server.go`` reconcile).

Two ways a GPU is in ``mig`` mode (docs/sharing-modes.md):

- **dynamic** (the node's ``operatingmode: mig``): the GPU offers every GPU instance
  profile NVML reports (or those ``migProfileAllowlist`` allows for its model) at every
  possible placement; the instance a container was given at bind is created at
  ``Allocate`` (GPU instance, then one compute instance covering it) and destroyed once
  no live pod names it (``release``: at start and after every publication).
- **static** (a GPU an administrator put in MIG mode, on a node of another mode): the GPU
  offers only its existing instances (each a profile with the one placement it has);
  ``Allocate`` hands out the existing instance and nothing is created or destroyed.

Either way the container sees the instance only: ``NVIDIA_VISIBLE_DEVICES`` is its MIG
UUID and it gets none of the shim (MIG isolates memory and SMs in hardware).

Under the NVIDIA device plugin's ``single`` strategy (the node's ``migstrategy: single``,
static MIG only) each instance is published as a device of its own (``instance_devices``):
its id is the MIG UUID, ``count`` 1, ``devmem`` the instance's memory, ``devcore`` 100
(all of the instance), one ``migProfiles`` entry at its one placement. A request's count
of distinct devices is then a count of instances, as ``nvidia.com/gpu: N`` means there
(NVIDIA's "MIG Support in Kubernetes": the single strategy exposes the instances as
``nvidia.com/gpu``; its device plugin requires every GPU of the node in MIG mode with
instances of one profile, ``rm/device_map.go`` ``assertAllMigDevicesAreValid``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from hami_core.backend import (
    PARENT_UUID,
    PART_INDEX,
    PART_UUIDS,
    ConfigError,
    ContainerAllocation,
    ContainerDevices,
    DeviceInfo,
    HamiError,
    MigAllocation,
    MigPlacement,
    MigProfile,
    MigSlot,
    VendorConfig,
    decode_mig_allocations,
    encode_mig_allocations,
    type_matches,
)

from .mig import MIG_MODE
from .nvml import Nvml, NvmlError
from .nvml_mig import NvmlMigInstance, NvmlMigProfile

log = logging.getLogger(__name__)

#: The node's operatingmode that makes MIG dynamic.
DYNAMIC = "mig"
#: The node's migstrategy that makes each static MIG instance a device of its own.
SINGLE = "single"
#: Key of the nvidia section: HAMi's ``migProfileAllowlist`` (``[{models, profiles}]``).
ALLOWLIST_KEY = "migProfileAllowlist"
#: An instance created less than this long ago is never released: the pod list the
#: release reads may not show the pod it was made for yet (option
#: ``migReleaseGraceSeconds``).
CREATE_GRACE_S = 120.0
GRACE_KEY = "migReleaseGraceSeconds"
MIG_KEY = "hami.io/vgpu-mig-allocations"
#: ``DeviceInfo.node_local`` key of a MIG GPU this device plugin discovered (absent from
#: an inventory read back, as ``hami simulate`` passes it: no instance exists there).
ON_NODE = "migDiscovered"


def check_allowlist(value: object) -> None:
    """Validate ``migProfileAllowlist`` (HAMi's ``ValidateMigProfileAllowlist``): a
    list of ``{models: [...], profiles: [...]}``, both non-empty, profiles named
    ``<n>g.<memory>`` (``1g.10gb``).

    Raises:
        ConfigError: naming ``nvidia.migProfileAllowlist`` and the bad entry.
    """
    where = f"nvidia.{ALLOWLIST_KEY}"
    if not isinstance(value, list):
        raise ConfigError(f"{where}: must be a list of {{models, profiles}}")
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping) or set(entry) - {"models", "profiles"}:
            raise ConfigError(f"{where}[{i}]: must be a mapping of 'models' and 'profiles'")
        for key in ("models", "profiles"):
            items = entry.get(key)
            if (
                not isinstance(items, list)
                or not items
                or not all(isinstance(x, str) for x in items)
            ):
                raise ConfigError(f"{where}[{i}].{key}: must be a non-empty list of names")
        for name in entry["profiles"]:
            head, dot, _ = name.partition(".")
            if not dot or len(head) < 2 or not head.endswith("g") or not head[:-1].isdigit():
                raise ConfigError(f"{where}[{i}].profiles: {name!r} is not a MIG profile name")


def allowed_profiles(config: VendorConfig, model: str) -> frozenset[str] | None:
    """The profiles the allowlist allows for ``model`` (its first matching entry), or
    None when no entry names the model (every profile is offered)."""
    for entry in config.options.get(ALLOWLIST_KEY) or []:
        if any(type_matches(model, m) or m == model for m in entry["models"]):
            return frozenset(entry["profiles"])
    return None


def _profile(p: NvmlMigProfile, full_sm: int, placements: tuple[MigPlacement, ...]) -> MigProfile:
    cores = -(-p.multiprocessors * 100 // full_sm) if full_sm else 0  # rounded up, as HAMi
    return MigProfile(
        name=p.name,
        memory_mib=p.memory_mib,
        cores_pct=min(cores, 100),
        slice_count=p.slice_count,
        placements=placements,
    )


def mig_device(
    base: DeviceInfo, nvml: Nvml, config: VendorConfig, *, total_mib: int
) -> DeviceInfo | None:
    """The inventory entry of a GPU in MIG mode, or None when it offers nothing (logged).

    ``devmem`` is the GPU's physical memory and ``devcore`` 100 (HAMi registers MIG GPUs
    unscaled); ``count`` is the most instances it can hold (dynamic) or has (static);
    ``node_local[PART_UUIDS]`` the MIG UUIDs of its instances now.

    Raises:
        NvmlError: NVML fails.
    """
    profiles = nvml.mig_profiles(base.index)
    full_sm = max((p.multiprocessors for p in profiles), default=0)
    instances = [m for m in nvml.mig_instances(base.index) if m.mig_uuid]
    if config.operating_mode == DYNAMIC:
        allowed = allowed_profiles(config, base.model)
        offered = tuple(
            _profile(p, full_sm, tuple(MigPlacement(start=s, size=n) for s, n in p.placements))
            for p in profiles
            if allowed is None or p.name in allowed
        )
        count = max(
            (p.instance_count for p in profiles if allowed is None or p.name in allowed), default=0
        )
    else:
        by_id = {p.profile_id: p for p in profiles}
        grouped: dict[int, list[MigPlacement]] = {}
        for m in instances:
            grouped.setdefault(m.profile_id, []).append(MigPlacement(start=m.start, size=m.size))
        offered = tuple(
            _profile(by_id[pid], full_sm, tuple(sorted(places, key=lambda x: x.start)))
            for pid, places in sorted(grouped.items())
            if pid in by_id
        )
        count = len(instances)
    if not offered:
        log.error(
            "GPU %d %s is in MIG mode but offers no MIG instance (%s): not advertised",
            base.index,
            base.uuid,
            "no allowed profile"
            if config.operating_mode == DYNAMIC
            else "create instances with nvidia-smi mig",
        )
        return None
    return attrs.evolve(
        base,
        mode=MIG_MODE,
        memory_mib=total_mib,
        cores_pct=100,
        split_count=count,
        mig_profiles=offered,
        # PART_UUIDS: a pod placed while these instances were devices of their own
        # (migstrategy: single) names them, not the GPU (deviceplugin.reshaped)
        node_local={
            **base.node_local,
            ON_NODE: "1",
            PART_UUIDS: ",".join(sorted(m.mig_uuid for m in instances)),
        },
    )


def is_instance(device: DeviceInfo) -> bool:
    """True for a MIG instance published as a device of its own (``single`` strategy):
    its id is the instance's MIG UUID (NVML names MIG devices ``MIG-...``)."""
    return device.mode == MIG_MODE and device.uuid.startswith("MIG-")


def instance_devices(base: DeviceInfo, nvml: Nvml) -> list[DeviceInfo]:
    """The ``single`` strategy's devices of one GPU in MIG mode: one per existing
    instance that has its compute instance (a MIG UUID), in placement order. Each names
    its GPU (``PARENT_UUID``) and its index as NVIDIA's device plugin numbers a MIG device,
    ``"<GPU index>:<MIG device index>"`` (``PART_INDEX``; rm/nvml_devices.go
    ``newMigDevice``), which ``filterdevices.index`` matches; the MIG device index is
    NVML's (``NvmlMigInstance.mig_index``), else the instance's rank by GPU instance id.

    Raises:
        NvmlError: NVML fails.
    """
    by_id = {p.profile_id: p for p in nvml.mig_profiles(base.index)}
    found = [m for m in nvml.mig_instances(base.index) if m.mig_uuid]
    rank = {
        m.gpu_instance_id: n for n, m in enumerate(sorted(found, key=lambda m: m.gpu_instance_id))
    }
    out = []
    for m in sorted(found, key=lambda m: m.start):
        p = by_id.get(m.profile_id)
        if p is None:
            continue
        part = m.mig_index if m.mig_index is not None else rank[m.gpu_instance_id]
        profile = MigProfile(
            name=p.name,
            memory_mib=p.memory_mib,
            cores_pct=100,  # the instance is the whole device
            slice_count=p.slice_count,
            placements=(MigPlacement(start=m.start, size=m.size),),
        )
        out.append(
            attrs.evolve(
                base,
                uuid=m.mig_uuid,
                mode=MIG_MODE,
                memory_mib=p.memory_mib,
                cores_pct=100,
                split_count=1,
                mig_profiles=(profile,),
                node_local={
                    **base.node_local,
                    ON_NODE: "1",
                    PARENT_UUID: base.uuid,
                    PART_INDEX: f"{base.index}:{part}",
                },
            )
        )
    return out


def single_strategy_devices(
    bases: Sequence[tuple[DeviceInfo, bool]], nvml: Nvml
) -> list[DeviceInfo]:
    """Every instance of the node as a device (``instance_devices``), after the checks
    NVIDIA's device plugin makes for its ``single`` strategy.

    Args:
        bases: each GPU's inventory entry and whether MIG mode is on for it.

    Raises:
        ConfigError: a GPU has MIG mode off or no instance, or the node's instances are
            of several profiles (naming the GPUs; the device plugin stops at start).
        NvmlError: NVML fails.
    """
    where = "migstrategy: single"
    out: list[DeviceInfo] = []
    for base, enabled in bases:
        if not enabled:
            raise ConfigError(
                f"{where}: GPU {base.index} {base.uuid} has MIG mode off; the single strategy "
                "needs every GPU of the node in MIG mode (or use migstrategy: none or mixed)"
            )
        found = instance_devices(base, nvml)
        if not found:
            raise ConfigError(
                f"{where}: GPU {base.index} {base.uuid} has no MIG instance "
                "(create them with nvidia-smi mig -cgi ... -C)"
            )
        out.extend(found)
    profiles = sorted({(d.mig_profiles[0].name, d.index) for d in out})
    names = sorted({name for name, _ in profiles})
    if len(names) > 1:
        listed = ", ".join(f"GPU {i}: {name}" for name, i in profiles)
        raise ConfigError(
            f"{where}: the node's MIG instances are of several profiles ({listed}); the "
            "single strategy needs one profile on every GPU (or use migstrategy: mixed)"
        )
    return out


def container_position(pod: Mapping[str, Any], container: Mapping[str, Any]) -> int:
    """The container's entry in the pod's device list (init containers first).

    Raises:
        HamiError: the container is not in the pod's spec.
    """
    spec = pod.get("spec") or {}
    names = [
        str(c.get("name", ""))
        for key in ("initContainers", "containers")
        for c in spec.get(key) or []
    ]
    name = str(container.get("name", ""))
    if name not in names:
        raise HamiError(f"container {name!r} is not in the pod's spec")
    return names.index(name)


#: A slot as reservations name it: (GPU UUID, first memory slice, slices).
SlotKey = tuple[str, int, int]
#: Where a reservation sits in its pod: (container index, device index).
Position = tuple[int, int]


def _pod_ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


@attrs.define
class MigManager:
    """Creates, finds and frees this node's MIG instances over one NVML. Thread-safe
    through NVML's own lock; ``created`` remembers recent creations (``CREATE_GRACE_S``).

    Who holds an instance comes from two sources: the reservations of the node's live
    pods (``claims``, read by ``observe`` from the pod list the device plugin hands over
    before each ``Allocate`` of a MIG pod and at each release round) and the instances
    this process handed out (``given``: the device plugin's own record, which a pod's
    author cannot rewrite). ``realise`` never hands a pod an instance another live pod
    holds by either."""

    nvml: Nvml
    clock: Callable[[], float] = time.monotonic
    created: dict[tuple[int, int], float] = attrs.field(factory=dict)
    #: slot -> {pod UID: "namespace/name"} of the live pods whose readable reservation
    #: names it, as of the last ``observe``; None before the first.
    claims: dict[SlotKey, dict[str, str]] | None = None
    #: (GPU index, GPU instance id) -> (pod UID, "namespace/name") this process gave it to;
    #: entries of pods no longer live are dropped by ``observe``.
    given: dict[tuple[int, int], tuple[str, str]] = attrs.field(factory=dict)
    #: (pod UID, (container index, device index)) -> the slot this process realised for
    #: that position; a reservation naming another slot for it was rewritten afterwards
    #: and holds nothing (``holders``). Dropped with the pod, like ``given``.
    realised_at: dict[tuple[str, Position], SlotKey] = attrs.field(factory=dict)
    #: slot -> {pod UID: the positions whose reservation names it}, as of ``observe``.
    claim_positions: dict[SlotKey, dict[str, set[Position]]] = attrs.field(factory=dict)

    def observe(self, pods: Sequence[Mapping[str, Any]]) -> list[str]:
        """Read who claims which slot from ``pods`` (every pod bound to the node; finished
        ones hold nothing) into ``claims``, and forget what was given to pods no longer
        live. A pod whose ``hami.io/vgpu-mig-allocations`` cannot be read is skipped
        (logged): it claims nothing by its reservation, and keeps what ``given`` says
        it was handed.

        Returns:
            One line per pod skipped, ``"<namespace>/<name>: <why>"``.
        """
        claims: dict[SlotKey, dict[str, str]] = {}
        positions: dict[SlotKey, dict[str, set[Position]]] = {}
        live: set[str] = set()
        skipped = []
        for pod in pods:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            meta = pod.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            live.add(uid)
            ann = meta.get("annotations") or {}
            try:
                allocations = decode_mig_allocations(str(ann.get(MIG_KEY) or ""))
            except HamiError as exc:
                line = f"{_pod_ref(pod)}: {MIG_KEY}: {exc}"
                log.error("%s; its reservation is skipped", line)
                skipped.append(line)
                continue
            for a in allocations:
                key = (a.gpu_uuid, a.slot.placement.start, a.slot.placement.size)
                claims.setdefault(key, {})[uid] = _pod_ref(pod)
                positions.setdefault(key, {}).setdefault(uid, set()).add(
                    (a.container_index, a.device_index)
                )
        self.claims = claims
        self.claim_positions = positions
        self.given = {k: v for k, v in self.given.items() if v[0] in live}
        self.realised_at = {k: v for k, v in self.realised_at.items() if k[0] in live}
        return skipped

    def _rewritten(self, key: SlotKey, uid: str) -> bool:
        """Whether every position by which pod ``uid``'s reservation names ``key`` was
        realised by this process at another slot: the reservation was rewritten after
        Allocate (its author patched the annotation) and claims nothing."""
        positions = self.claim_positions.get(key, {}).get(uid)
        if not positions:
            return False
        return all(
            (uid, p) in self.realised_at and self.realised_at[(uid, p)] != key for p in positions
        )

    def claimed(self) -> set[SlotKey]:
        """The slots some live pod's reservation holds (``observe``), rewritten
        reservations (``_rewritten``) left out."""
        return {
            key
            for key, pods in (self.claims or {}).items()
            if any(not self._rewritten(key, uid) for uid in pods)
        }

    def holders(self, device: DeviceInfo, instance: NvmlMigInstance, pod_uid: str) -> list[str]:
        """The live pods other than ``pod_uid`` that hold ``instance`` of ``device``:
        by their reservation (``claims``) or by this process's record (``given``), as
        ``namespace/name``.

        Raises:
            HamiError: no pod list was read yet (``observe``): who holds it is unknown.
        """
        if self.claims is None:
            raise HamiError(
                f"GPU {device.uuid}: cannot tell which pods hold its MIG instances (the "
                "node's pod list was not read yet); not handing out an existing instance"
            )
        key = (device.uuid, instance.start, instance.size)
        out = {
            ref
            for uid, ref in self.claims.get(key, {}).items()
            if uid != pod_uid and not self._rewritten(key, uid)
        }
        owner = self.given.get((device.index, instance.gpu_instance_id))
        if owner is not None and owner[0] != pod_uid:
            out.add(owner[1])
        return sorted(out)

    def realise(
        self,
        device: DeviceInfo,
        slot: MigSlot,
        *,
        dynamic: bool,
        pod: Mapping[str, Any] | None = None,
        position: Position | None = None,
    ) -> NvmlMigInstance:
        """The instance of ``slot`` on ``device`` for ``pod``: the existing one at
        exactly that profile and placement (a static instance, or a retried Allocate)
        when no other live pod holds it (``holders``), else, in dynamic mode, a new one.

        Raises:
            HamiError: the GPU does not offer the slot, a static instance is missing,
                the instance at the slot is held by another live pod (named), or NVML
                refuses.
        """
        meta = (pod or {}).get("metadata") or {}
        uid, ref = str(meta.get("uid") or ""), _pod_ref(pod or {})
        profile = next((p for p in device.mig_profiles if p.name == slot.profile), None)
        if profile is None or slot.placement not in profile.placements:
            raise HamiError(
                f"GPU {device.uuid} offers no MIG instance {slot.profile} at slices "
                f"{slot.placement.start}+{slot.placement.size}"
            )
        try:
            ids = {p.name: p.profile_id for p in self.nvml.mig_profiles(device.index)}
            for m in self.nvml.mig_instances(device.index):
                if (
                    m.profile_id == ids.get(slot.profile)
                    and (m.start, m.size) == (slot.placement.start, slot.placement.size)
                    and m.mig_uuid
                ):
                    others = self.holders(device, m, uid)
                    if others:
                        raise HamiError(
                            f"GPU {device.uuid}: the MIG instance {slot.profile} at slice "
                            f"{slot.placement.start} is one live pod {', '.join(others)} "
                            f"holds; pod {ref}'s reservation names it too (refused)"
                        )
                    self.given[(device.index, m.gpu_instance_id)] = (uid, ref)
                    if position is not None:
                        self.realised_at[(uid, position)] = (device.uuid, m.start, m.size)
                    return m
            if not dynamic:
                raise HamiError(
                    f"GPU {device.uuid}: the MIG instance {slot.profile} at slice "
                    f"{slot.placement.start} is gone (static MIG: recreate it)"
                )
            made = self.nvml.create_mig_instance(
                device.index, ids[slot.profile], slot.placement.start, slot.placement.size
            )
        except NvmlError as exc:
            raise HamiError(f"GPU {device.uuid}: MIG instance {slot.profile}: {exc}") from exc
        self.created[(device.index, made.gpu_instance_id)] = self.clock()
        self.given[(device.index, made.gpu_instance_id)] = (uid, ref)
        if position is not None:
            self.realised_at[(uid, position)] = (device.uuid, made.start, made.size)
        log.info(
            "created MIG instance %s (%s at slice %d, GI %d CI %s) on GPU %s for pod %s",
            made.mig_uuid,
            slot.profile,
            made.start,
            made.gpu_instance_id,
            made.compute_instance_id,
            device.uuid,
            ref,
        )
        return made

    def release(
        self,
        pods: Sequence[Mapping[str, Any]],
        devices: Sequence[DeviceInfo],
        *,
        grace_s: float = CREATE_GRACE_S,
    ) -> list[str]:
        """Destroy the dynamic instances no live pod holds (HAMi's reconcile): a pod
        holds the instances of its ``hami.io/vgpu-mig-allocations`` until it has
        finished or is gone, and those this process gave it (``given``). A live pod's
        unreadable annotation skips only that pod's reservation (``observe``, logged):
        every other instance no one holds is still freed. Instances made in the last
        ``grace_s`` seconds are kept. GPUs this process did not discover (``hami
        simulate``'s inventory) are left alone.

        Raises:
            NvmlError: NVML fails (nothing more is destroyed this round).
        """
        self.observe(pods)
        held = self.claimed()
        now = self.clock()
        self.created = {k: t for k, t in self.created.items() if now - t < grace_s}
        freed = []
        for device in devices:
            if device.mode != MIG_MODE or ON_NODE not in device.node_local:
                continue
            for m in self.nvml.mig_instances(device.index):
                if (device.uuid, m.start, m.size) in held:
                    continue
                if (device.index, m.gpu_instance_id) in self.created:
                    continue
                if (device.index, m.gpu_instance_id) in self.given:
                    continue
                self.nvml.destroy_mig_instance(device.index, m.gpu_instance_id)
                freed.append(
                    f"MIG instance {m.mig_uuid or '(no compute instance)'} (GI {m.gpu_instance_id}, "
                    f"slice {m.start}+{m.size}) on GPU {device.uuid}: no live pod holds it"
                )
        return freed


def mig_allocation(
    devices: ContainerDevices,
    node_devices: Sequence[DeviceInfo],
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    manager: MigManager,
    dynamic: bool,
) -> ContainerAllocation:
    """What a container whose devices are MIG GPUs gets: for each device the instance
    the scheduler reserved for this container and position (``containerIndex``,
    ``deviceIndex`` of ``hami.io/vgpu-mig-allocations``, cross-checked against the GPU
    of the device list), realised (``MigManager.realise``); ``NVIDIA_VISIBLE_DEVICES``
    names the MIG UUIDs and the pod annotation gets their runtime triple.

    Raises:
        HamiError: no readable reservation for a device, one for another GPU, or the
            instance cannot be had.
    """
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        allocations = list(decode_mig_allocations(str(ann.get(MIG_KEY) or "")))
    except HamiError as exc:
        raise HamiError(f"{MIG_KEY}: {exc}") from None
    position = container_position(pod, container)
    by_uuid = {d.uuid: d for d in node_devices}
    uuids = []
    for i, dev in enumerate(devices):
        at = next(
            (
                n
                for n, a in enumerate(allocations)
                if (a.container_index, a.device_index) == (position, i)
            ),
            None,
        )
        if at is None or allocations[at].gpu_uuid != dev.uuid:
            raise HamiError(
                f"container {container.get('name', '')!r}: no MIG reservation of GPU {dev.uuid} "
                f"for its device {i} in {MIG_KEY}"
            )
        node_device = by_uuid.get(dev.uuid)
        if node_device is None:
            raise HamiError(f"GPU {dev.uuid} is not a GPU of this node")
        slot = allocations[at].slot
        if ON_NODE not in node_device.node_local:
            # hami simulate: the inventory, no GPU; the UUID exists only once created
            # (an instance device of the single strategy is named by its MIG UUID)
            uuids.append(
                dev.uuid
                if is_instance(node_device)
                else f"MIG-of-{dev.uuid}:{slot.profile}@{slot.placement.start}"
            )
            continue
        made = manager.realise(node_device, slot, dynamic=dynamic, pod=pod, position=(position, i))
        if is_instance(node_device) and made.mig_uuid != node_device.uuid:
            raise HamiError(
                f"MIG instance {node_device.uuid}: the instance at slice "
                f"{slot.placement.start} is now {made.mig_uuid or 'without a compute instance'} "
                "(recreated since the node published it)"
            )
        allocations[at] = attrs.evolve(
            allocations[at],
            mig_uuid=made.mig_uuid,
            gpu_instance_id=made.gpu_instance_id,
            compute_instance_id=made.compute_instance_id,
        )
        uuids.append(made.mig_uuid)
    realised = any(a.realised for a in allocations)
    return ContainerAllocation(
        envs={"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)},
        pod_annotations={MIG_KEY: encode_mig_allocations(allocations)} if realised else {},
    )


__all__ = [
    "MigAllocation",
    "MigManager",
    "check_allowlist",
    "instance_devices",
    "is_instance",
    "mig_allocation",
    "mig_device",
]
