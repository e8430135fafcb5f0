"""Device usage recomputed from the allocations of live pods (never a drifting counter).

A pod's charge per device follows the init-container rule of ``hami_core.model.charge``.

Trust rule (PROTOCOL.md §6): a pod's allocation annotations count only when the pod was
bound to the node by our scheduler and its spec asks for that vendor; an unreadable
allocation on such a pod holds the devices it may use whole (fail closed). The same holds
for the MIG instances of ``hami.io/vgpu-mig-allocations``: they count only on the GPUs of
the pod's own device list, and a GPU in mig mode that the pod's list names without a
readable instance for every entry is held whole.
``pod_holdings`` is that rule for one pod; every usage reader goes through it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import attrs

from hami_core.errors import AnnotationError, HamiError
from hami_core.model import (
    Charge,
    DeviceTypeInfo,
    DeviceUsage,
    MigSlot,
    NodeInfo,
    PodDevices,
    device_charges,
)
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.migallocations import decode_mig_allocations
from hami_core.protocol.pods import is_live, pod_ref

from .podrequest import read_pod_request


@attrs.frozen(kw_only=True)
class PodHoldings:
    """What one pod holds on one node (the answer of ``pod_holdings``).

    Attributes:
        charges: device uuid -> ``Charge`` (only devices of the node given).
        whole: devices the pod holds whole (every sharer slot, all memory, all compute)
            because its allocation could not be read.
        problem: why (part of) the allocation could not be read, for the log; None when
            all was readable.
        annotations: the pod's annotations (what ``DeviceUsage.holders`` lists).
        mig: device uuid -> the MIG instances the pod holds there.
    """

    charges: Mapping[str, Charge] = attrs.field(factory=dict)
    mig: Mapping[str, tuple[MigSlot, ...]] = attrs.field(factory=dict)
    whole: frozenset[str] = frozenset()
    problem: str | None = None
    annotations: Mapping[str, str] = attrs.field(factory=dict, eq=False, repr=False)


NO_HOLDINGS = PodHoldings()


def requested_resources(pod: Mapping[str, Any]) -> frozenset[str]:
    """Every resource name in any container's ``limits`` or ``requests`` (init included)."""
    names: set[str] = set()
    spec = pod.get("spec") or {}
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            res = (c.get("resources") if isinstance(c, Mapping) else None) or {}
            for part in ("limits", "requests"):
                value = res.get(part) if isinstance(res, Mapping) else None
                if isinstance(value, Mapping):
                    names.update(str(k) for k in value)
    return frozenset(names)


def default_vendor_resources(
    device_types: Iterable[DeviceTypeInfo],
) -> dict[str, frozenset[str]]:
    """Vendor key -> the backend's default resource names (cores alias included)."""
    return {
        t.vendor: frozenset(n for n in (*t.resources.all(), t.resources.cores_alias) if n)
        for t in device_types
    }


def requested_vendors(pod: Mapping[str, Any], manager: BackendManager) -> frozenset[str] | None:
    """Vendor keys the pod's containers ask for, as the backends parse them (configured
    resource names included); None when a quantity cannot be parsed (then every vendor
    whose allocation the pod carries counts, fail closed)."""
    try:
        request = read_pod_request(pod, manager)
    except HamiError:
        return None
    return frozenset(d.vendor for c in request.containers for d in c.devices)


def default_requested_vendors(
    pod: Mapping[str, Any], device_types: Iterable[DeviceTypeInfo]
) -> frozenset[str]:
    """Vendor keys whose default resource names a container of the pod names (for callers
    without a ``BackendManager``)."""
    names = requested_resources(pod)
    return frozenset(
        v for v, rs in default_vendor_resources(device_types).items() if names.intersection(rs)
    )


def bound_here(pod: Mapping[str, Any], node: str, *, scheduler_name: str) -> bool:
    """True when ``pod`` was placed on ``node`` by our scheduler: ``spec.schedulerName`` is
    ours and ``spec.nodeName`` is the node, or the bind is in flight (no ``nodeName`` yet,
    ``hami.io/vgpu-node`` names the node, which only our scheduler may write: §6)."""
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") != scheduler_name:
        return False
    bound = spec.get("nodeName")
    if bound:
        return bool(bound == node)
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return bool(ann.get(keys.VGPU_NODE) == node)


def pod_holdings(
    pod: Mapping[str, Any],
    node: NodeInfo,
    device_types: Iterable[DeviceTypeInfo],
    *,
    scheduler_name: str,
    requested_vendors: Collection[str] | None,
) -> PodHoldings:
    """What ``pod`` holds of ``node``'s devices, under the trust rule (PROTOCOL.md §6).

    - A finished pod, or one not bound to ``node`` by our scheduler (``bound_here``),
      holds nothing, whatever its annotations say (another scheduler's pod that forged
      ``-allocated`` does not fill a GPU).
    - A vendor's allocation counts only when the pod's spec asks for that vendor
      (``requested_vendors``): a non-GPU pod's forged list is ignored.
    - A requested vendor whose ``*-devices-allocated`` is missing or malformed holds
      whole the node's devices of that vendor that its annotations name, or all of them
      when none is named (fail closed; ``problem`` says why, for the log).

    Args:
        pod: a Pod object (read only).
        node: the node's inventory (only its devices are charged).
        scheduler_name: our ``schedulerName`` (``HamiConfig.scheduler_name``).
        requested_vendors: the vendor keys the pod's spec asks for (``requested_vendors``
            or ``default_requested_vendors``); None when they cannot be known: every
            vendor whose allocation the pod carries then counts.

    Returns:
        ``PodHoldings``; never raises for bad annotations.
    """
    if not is_live(pod) or not bound_here(pod, node.name, scheduler_name=scheduler_name):
        return NO_HOLDINGS
    ann: Mapping[str, Any] = (pod.get("metadata") or {}).get("annotations") or {}
    types = tuple(device_types)
    if requested_vendors is None:
        wanted = {t.vendor for t in types if t.allocated_annotation in ann}
    else:
        wanted = set(requested_vendors)
    charges: dict[str, Charge] = {}
    whole: set[str] = set()
    mig: dict[str, tuple[MigSlot, ...]] = {}
    problems: list[str] = []
    for dtype in types:
        if dtype.vendor not in wanted:
            continue
        value = ann.get(dtype.allocated_annotation)
        try:
            if not isinstance(value, str):
                raise AnnotationError("missing")
            devices = decode_pod_devices(value)
        except AnnotationError as exc:
            own = node.devices_of(dtype.vendor)
            text = " ".join(str(v) for v in ann.values())
            named = [d for d in own if d.uuid in text] or list(own)
            whole.update(d.uuid for d in named)
            if named:
                problems.append(
                    f"pod {pod_ref(pod)}: {dtype.allocated_annotation}: {exc}; holding "
                    f"{', '.join(d.uuid for d in named)} whole"
                )
            continue
        for uuid, charge in device_charges(pod, devices).items():
            charges[uuid] = charges.get(uuid, Charge()).plus(charge)
        if dtype.mig_annotation:
            slots, unread = _mig_holdings(pod, node, dtype.vendor, dtype.mig_annotation, devices)
            mig.update(slots)
            if unread:
                whole.update(unread)
                problems.append(
                    f"pod {pod_ref(pod)}: {dtype.mig_annotation}: no readable MIG instance "
                    f"for every device on {', '.join(sorted(unread))}; holding them whole"
                )
    return PodHoldings(
        charges={u: c for u, c in charges.items() if u not in whole},
        whole=frozenset(whole),
        problem="; ".join(problems) or None,
        annotations=ann,
        mig={u: m for u, m in mig.items() if u not in whole},
    )


def _mig_holdings(
    pod: Mapping[str, Any],
    node: NodeInfo,
    vendor: str,
    key: str,
    devices: PodDevices,
) -> tuple[dict[str, tuple[MigSlot, ...]], set[str]]:
    """The MIG instances ``pod`` holds per GPU, and the mig-mode GPUs its device list names
    without a readable instance for each entry (to be held whole). Instances are taken
    at the positions of the device list that name that GPU (a forged entry for another
    GPU counts nothing), and, failing closed, every further well-formed reservation of a
    GPU the list names (HAMi 2.10 ``getNodesUsage`` holds a GPU's reservations beyond
    its list entries too: ``pkg/scheduler/mig_allocation_test.go``
    ``TestGetNodesUsageRestoresUnconsumedMigReservations``)."""
    mig_gpus = {d.uuid for d in node.devices_of(vendor) if d.mode == "mig"}
    listed = [
        (c, i, dev.uuid)
        for c, ctr in enumerate(devices)
        for i, dev in enumerate(ctr)
        if dev.uuid in mig_gpus
    ]
    if not listed:
        return {}, set()
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        allocations = decode_mig_allocations(str(ann.get(key) or ""))
    except AnnotationError:
        return {}, {u for _, _, u in listed}
    at = {(a.container_index, a.device_index): a for a in allocations}
    slots: dict[str, tuple[MigSlot, ...]] = {}
    unread: set[str] = set()
    for c, i, uuid in listed:
        a = at.pop((c, i), None)
        if a is None or a.gpu_uuid != uuid:
            unread.add(uuid)
            continue
        slots[uuid] = (*slots.get(uuid, ()), a.slot)
    named = {u for _, _, u in listed}
    for a in at.values():
        if a.gpu_uuid in named and a.slot not in slots.get(a.gpu_uuid, ()):
            slots[a.gpu_uuid] = (*slots.get(a.gpu_uuid, ()), a.slot)
    return slots, unread


def pod_allocation(
    pod: Mapping[str, Any], device_types: Iterable[DeviceTypeInfo]
) -> dict[str, PodDevices]:
    """Vendor key -> the pod's device list, from its ``*-devices-allocated`` annotations.

    Raises:
        AnnotationError: a device list is malformed (names the pod and the key).
    """
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") or {}
    out = {}
    for dtype in device_types:
        value = ann.get(dtype.allocated_annotation)
        if value is None:
            continue
        try:
            out[dtype.vendor] = decode_pod_devices(value)
        except AnnotationError as exc:
            raise AnnotationError(
                f"pod {meta.get('namespace')}/{meta.get('name')}: {dtype.allocated_annotation}: {exc}"
            ) from None
    return out


def node_usage(
    node: NodeInfo,
    pods: Iterable[Mapping[str, Any]],
    device_types: Iterable[DeviceTypeInfo],
    *,
    scheduler_name: str,
    requested: Callable[[Mapping[str, Any]], Collection[str] | None] | None = None,
    exclude_uid: str | None = None,
    broken: list[str] | None = None,
) -> dict[str, DeviceUsage]:
    """Usage of every device of ``node`` by the live pods given, under ``pod_holdings``.

    Args:
        pods: candidate pods (those not bound to the node by our scheduler count nothing).
        scheduler_name: our ``schedulerName``.
        requested: pod -> the vendors it asks for (see ``pod_holdings``); default
            ``default_requested_vendors``.
        exclude_uid: a pod whose own allocation must not count (re-fitting at bind).
        broken: when given, messages about pods whose allocation could not be read
            (and whose devices are therefore held whole) are appended.

    Returns:
        uuid -> ``DeviceUsage``, for every device of the node.
    """
    types = tuple(device_types)
    held: list[PodHoldings] = []
    for pod in pods:
        if (pod.get("metadata") or {}).get("uid") == exclude_uid and exclude_uid is not None:
            continue
        vendors = default_requested_vendors(pod, types) if requested is None else requested(pod)
        h = pod_holdings(pod, node, types, scheduler_name=scheduler_name, requested_vendors=vendors)
        if h.problem and broken is not None:
            broken.append(h.problem)
        held.append(h)
    return usage_from_holdings(node, held)


def usage_from_holdings(node: NodeInfo, holdings: Iterable[PodHoldings]) -> dict[str, DeviceUsage]:
    """uuid -> ``DeviceUsage`` of every device of ``node`` given what each pod holds there:
    the one fold every usage reader shares (``node_usage`` from scratch, ``ClusterState``
    incrementally)."""
    usage = {
        d.uuid: DeviceUsage(device=d, cordoned=d.uuid in node.cordoned_uuids) for d in node.devices
    }
    holders: dict[str, list[Mapping[str, str]]] = {}
    for held in holdings:
        for uuid, charge in held.charges.items():
            u = usage.get(uuid)
            if u is not None:
                usage[uuid] = add_charge(u, charge)
                holders.setdefault(uuid, []).append(held.annotations)
        for uuid, slots in held.mig.items():
            u = usage.get(uuid)
            if u is not None:
                usage[uuid] = attrs.evolve(u, mig_in_use=u.mig_in_use + slots)
        for uuid in held.whole:
            u = usage.get(uuid)
            if u is not None:
                usage[uuid] = hold_whole(u)
                holders.setdefault(uuid, []).append(held.annotations)
    for uuid, pods in holders.items():
        usage[uuid] = attrs.evolve(usage[uuid], holders=tuple(pods))
    return usage


def add_charge(u: DeviceUsage, charge: Charge) -> DeviceUsage:
    """``u`` plus one pod's ``charge``."""
    return attrs.evolve(
        u,
        used_count=u.used_count + charge.count,
        used_memory_mib=u.used_memory_mib + charge.memory_mib,
        used_cores_pct=u.used_cores_pct + charge.cores_pct,
    )


def hold_whole(u: DeviceUsage) -> DeviceUsage:
    """``u`` with one pod holding the device whole: every slot, all MiB and all compute
    (the device's own ``cores_pct`` in its vendor's unit, e.g. 304 CUs or 16 sGPU cores;
    100 for a device that states none)."""
    d = u.device
    return attrs.evolve(
        u,
        used_count=u.used_count + max(d.split_count, 1),
        used_memory_mib=u.used_memory_mib + d.memory_mib,
        used_cores_pct=u.used_cores_pct + (d.cores_pct or 100),
    )
