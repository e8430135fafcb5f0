"""Namespace quotas on device resources (PROTOCOL.md §8), for every vendor.

``ResourceQuota`` keys ``limits.<resource>`` and the handbook's bare ``<resource>``
(``nvidia.com/gpumem``, ``nvidia.com/gpucores``, ``nvidia.com/cores``, ``nvidia.com/gpu``)
are enforced by the webhook and by fit. A pod's charge is count x per-device value,
summed over app containers, max'ed with the largest init container while one may still
run (``hami_core.model.charge``). Usage is the charge of the namespace's live pods that
hold an allocation.

Trust rule (PROTOCOL.md §6, the same as device usage in ``usage.pod_holdings``): a pod's
allocation counts only when our scheduler placed it (``placed_by_us``) and its spec asks
for that vendor. A pod of another scheduler, or a non-GPU pod, that carries a forged
``-allocated`` list neither consumes nor frees quota; an unreadable list on a pod we
placed keeps the quota full while it lives (fail closed).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import attrs

from hami_core.backend.requests import resource_names
from hami_core.errors import AnnotationError, QuantityError
from hami_core.model import (
    Charge,
    DeviceTypeInfo,
    PodDevices,
    collapse,
    init_containers_finished,
    init_flags,
)
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import decode_pod_devices
from hami_core.protocol.pods import is_live
from hami_core.protocol.quantity import parse_quantity_int

from .usage import default_requested_vendors


class Measure(enum.StrEnum):
    """What a quota limits of one vendor: memory (MiB), cores (the cores resource's
    unit) or count (devices); each is one field of a ``Charge``."""

    MEMORY = "memory"
    CORES = "cores"
    COUNT = "count"

    def of(self, charge: Charge) -> int:
        """This measure's field of ``charge``."""
        if self is Measure.MEMORY:
            return charge.memory_mib
        if self is Measure.CORES:
            return charge.cores_pct
        return charge.count


MEMORY, CORES, COUNT = Measure.MEMORY, Measure.CORES, Measure.COUNT


def _nonzero(by_vendor: Mapping[str, Charge]) -> dict[str, Charge]:
    return {v: c for v, c in by_vendor.items() if c != _ZERO}


_ZERO = Charge()


@attrs.frozen
class QuotaCharge:
    """What a pod, or a namespace's pods together, count against quotas: per vendor key
    a ``Charge`` (``memory_mib`` in MiB, ``cores_pct`` in the vendor's cores quota unit
    (``DeviceTypeInfo.resource_cores_unit``: percent for most vendors), ``count`` in
    devices). A vendor whose charge is all zero is left out, so equal charges compare
    equal however they were summed."""

    by_vendor: Mapping[str, Charge] = attrs.field(factory=dict, converter=_nonzero)

    def of(self, vendor: str, measure: Measure) -> int:
        """The charge of ``vendor`` in ``measure`` (0 when none)."""
        return measure.of(self.by_vendor.get(vendor, _ZERO))

    def plus(self, other: QuotaCharge) -> QuotaCharge:
        """Both charges together (two pods of one namespace)."""
        out = dict(self.by_vendor)
        for vendor, c in other.by_vendor.items():
            out[vendor] = out[vendor].plus(c) if vendor in out else c
        return QuotaCharge(out)

    def minus(self, other: QuotaCharge) -> QuotaCharge:
        """This charge less ``other`` (a pod that no longer counts)."""
        out = dict(self.by_vendor)
        for vendor, c in other.by_vendor.items():
            held = out.get(vendor, _ZERO)
            out[vendor] = Charge(
                held.memory_mib - c.memory_mib, held.cores_pct - c.cores_pct, held.count - c.count
            )
        return QuotaCharge(out)

    def __bool__(self) -> bool:
        return bool(self.by_vendor)


#: A pod that counts nothing against quotas.
NO_CHARGE = QuotaCharge()


def pod_charge(
    containers: Iterable[tuple[bool, Mapping[str, Charge]]], *, init_finished: bool = False
) -> QuotaCharge:
    """What one pod counts against its namespace's quotas: the one place it is decided,
    for the filter (from the allocation fitted: ``allocation_charge``), for the pods that
    hold quota (``pod_quota_charge``) and for the webhook (from the requests at admission).

    Args:
        containers: per container in wire order (init containers first, PROTOCOL.md
            §3), ``(is_plain_init, {vendor key: what the container holds of that vendor})``
            (memory MiB and cores in the quota's unit summed over its devices, count =
            devices).
        init_finished: every plain init container has terminated with exit code 0
            (``hami_core.model.init_containers_finished``): they count for nothing then.

    Returns:
        The charge under Kubernetes' init-container rule (``hami_core.model.collapse``).
    """
    return QuotaCharge(collapse(containers, init_finished=init_finished))


def allocation_charge(
    pod: Mapping[str, Any],
    devices: Mapping[str, PodDevices],
    device_type: Callable[[str], DeviceTypeInfo | None],
) -> QuotaCharge:
    """What ``pod`` counts against its namespace's quotas when it holds ``devices``
    (vendor key -> its device list, one entry per container, init containers first), by
    ``pod_charge``; ``device_type`` (vendor key -> its ``DeviceTypeInfo``) converts each
    vendor's cores to its quota unit (``quota_units``)."""
    plain = init_flags(pod)
    per_container: list[tuple[bool, dict[str, Charge]]] = []
    for vendor, listed in devices.items():
        for pos, container in enumerate(quota_units(pod, listed, device_type(vendor))):
            while len(per_container) <= pos:
                n = len(per_container)
                per_container.append((n < len(plain) and plain[n], {}))
            per_container[pos][1][vendor] = Charge(
                sum(d.memory_mib for d in container),
                sum(d.cores_pct for d in container),
                len(container),
            )
    return pod_charge(per_container, init_finished=init_containers_finished(pod))


@attrs.frozen
class QuotaLimit:
    """One enforced quota: the quota's key, what it measures, its hard limit (in MiB for
    memory, whatever the resource's unit; the cores resource's unit for cores
    (``DeviceTypeInfo.resource_cores_unit``: percent for most vendors); devices for counts)."""

    quota: str
    key: str
    vendor: str
    measure: Measure
    hard: int


def quota_device_types(manager: BackendManager) -> tuple[DeviceTypeInfo, ...]:
    """Every device type with the resource names in force, for reading quota keys: a
    backend of one device type whose section renames a resource (``resourceCountName``,
    ``resourceMemoryName``, ``resourceMemoryPercentageName``, ``resourceCoreName``, HAMi's
    ``device-config.yaml`` keys) is quoted under the new name, as its pods request it
    (``hami_core.backend.requests.resource_names``); a backend of several device types
    that renames each type's resources in its own options (Ascend's
    ``vnpus.<model>.resourceName``) says so by ``DeviceTypeInfo.configured_resources``,
    already in force in ``BackendManager.device_types``.
    """
    out = []
    for t in manager.device_types():
        backend = manager.backend_of(t.vendor)
        if len(manager.infos[backend].device_types) == 1:
            named = resource_names(t.resources, manager.vendor_config(backend))
            t = attrs.evolve(t, resources=named)
        out.append(t)
    return tuple(out)


def quota_limits(
    quotas: Iterable[Mapping[str, Any]], device_types: Iterable[DeviceTypeInfo]
) -> list[QuotaLimit]:
    """The device limits stated by ``quotas`` (unparseable values are skipped)."""
    # resource name -> (vendor, measure, MiB per unit): a memory quota is written in the
    # resource's own unit (256 MiB for Cambricon) and compared in MiB.
    by_resource: dict[str, tuple[str, Measure, int]] = {}
    for t in device_types:
        r = t.resources
        for name, measure, unit in (
            (r.memory, MEMORY, r.memory_unit_mib),
            (r.cores, CORES, 1),
            (r.cores_alias, CORES, 1),
            (r.count, COUNT, 1),
        ):
            if name:
                by_resource[name] = (t.vendor, measure, unit)
    out = []
    for q in quotas:
        qname = str((q.get("metadata") or {}).get("name", ""))
        for key, value in ((q.get("spec") or {}).get("hard") or {}).items():
            resource = key.removeprefix("limits.").removeprefix("requests.")
            if resource not in by_resource:
                continue
            vendor, measure, unit = by_resource[resource]
            try:
                hard = parse_quantity_int(value, resource=key, maximum=2**62) * unit
            except QuantityError:
                continue
            out.append(QuotaLimit(quota=qname, key=key, vendor=vendor, measure=measure, hard=hard))
    return out


def quota_units(
    pod: Mapping[str, Any], devices: PodDevices, dtype: DeviceTypeInfo | None
) -> PodDevices:
    """``devices`` with each slice's ``cores_pct`` in the cores quota's unit, by the
    vendor's ``quota_slice_cores`` (core masks -> cores, compute units -> percent); as
    given for a vendor without one. Entry ``i`` of a device list is the pod's ``i``-th
    container, init containers first (PROTOCOL.md §3)."""
    convert = dtype.quota_slice_cores if dtype is not None else None
    if convert is None:
        return devices
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return tuple(
        tuple(
            attrs.evolve(
                d,
                cores_pct=max(0, convert(d, containers[pos] if pos < len(containers) else {})),
            )
            for d in slices
        )
        for pos, slices in enumerate(devices)
    )


#: What an unreadable allocation counts against its namespace's quota, per measure: more
#: than any quota allows, so a pod whose ``-allocated`` was rewritten or damaged cannot
#: free quota for more pods (fail closed, issue #12 item 2) while it lives.
UNREADABLE_CHARGE = 2**62
_UNREADABLE = Charge(UNREADABLE_CHARGE, UNREADABLE_CHARGE, UNREADABLE_CHARGE)


def placed_by_us(pod: Mapping[str, Any], *, scheduler_name: str) -> bool:
    """True when our scheduler placed ``pod``: ``spec.schedulerName`` is ours and the pod
    is bound (``spec.nodeName``) or its bind is in flight (``hami.io/vgpu-node``, which
    only our scheduler may write: PROTOCOL.md §6). The node itself does not matter for
    quota, only that the placement is ours."""
    spec = pod.get("spec") or {}
    if spec.get("schedulerName") != scheduler_name:
        return False
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return bool(spec.get("nodeName") or ann.get(keys.VGPU_NODE))


def pod_quota_charge(
    pod: Mapping[str, Any],
    device_types: Iterable[DeviceTypeInfo],
    *,
    scheduler_name: str,
    requested_vendors: Collection[str] | None,
) -> QuotaCharge:
    """What one pod that may hold an allocation counts against its namespace's quotas.

    Nothing for a finished pod or one our scheduler did not place (``placed_by_us``);
    else its allocation's charge (``allocation_charge``) for each vendor its spec asks
    for. A requested vendor's list that is missing or cannot be read counts
    ``UNREADABLE_CHARGE`` for each measure (fail closed: deleting or rewriting one's own
    ``-allocated`` never frees quota).

    Args:
        scheduler_name: our ``schedulerName`` (``HamiConfig.scheduler_name``).
        requested_vendors: the vendor keys the pod's spec asks for (``usage.requested_vendors``
            or ``usage.default_requested_vendors``); None when they cannot be known: every
            vendor whose allocation the pod carries then counts (as ``usage.pod_holdings``).
    """
    if not is_live(pod) or not placed_by_us(pod, scheduler_name=scheduler_name):
        return NO_CHARGE
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    types: dict[str, DeviceTypeInfo] = {}
    held: dict[str, PodDevices] = {}
    unreadable: dict[str, Charge] = {}
    for dtype in device_types:
        value = ann.get(dtype.allocated_annotation)
        if requested_vendors is None:
            if value is None:
                continue
        elif dtype.vendor not in requested_vendors:
            continue
        try:
            if not isinstance(value, str):
                raise AnnotationError("missing")
            held[dtype.vendor] = decode_pod_devices(value)
            types[dtype.vendor] = dtype
        except AnnotationError:
            unreadable[dtype.vendor] = _UNREADABLE
    charge = allocation_charge(pod, held, types.get)
    return QuotaCharge({**charge.by_vendor, **unreadable}) if unreadable else charge


def namespace_usage(
    pods: Iterable[Mapping[str, Any]],
    device_types: Iterable[DeviceTypeInfo],
    *,
    scheduler_name: str,
    requested: Callable[[Mapping[str, Any]], Collection[str] | None] | None = None,
    exclude_uid: str | None = None,
) -> QuotaCharge:
    """The total charge of the given pods under ``pod_quota_charge``'s rule
    (``ClusterState`` keeps the same numbers incrementally).

    Args:
        requested: pod -> the vendors it asks for; default ``default_requested_vendors``.
        exclude_uid: a pod whose own charge must not count (re-fitting it).
    """
    types = tuple(device_types)
    out = NO_CHARGE
    for pod in pods:
        if exclude_uid is not None and (pod.get("metadata") or {}).get("uid") == exclude_uid:
            continue
        vendors = default_requested_vendors(pod, types) if requested is None else requested(pod)
        charge = pod_quota_charge(
            pod, types, scheduler_name=scheduler_name, requested_vendors=vendors
        )
        if charge:
            out = out.plus(charge)
    return out


@attrs.frozen
class QuotaView:
    """One namespace's device quotas and what its pods already count against them:
    answers whether one more pod's charge violates them.

    Attributes:
        limits: the namespace's enforced limits (``quota_limits``).
        used: the charge of its pods that hold quota (``namespace_usage``), the pod being
            judged left out.
    """

    limits: tuple[QuotaLimit, ...] = ()
    used: QuotaCharge = NO_CHARGE

    def violation(self, charge: QuotaCharge) -> str | None:
        """A message naming the quota and the amounts when ``charge`` does not fit, else
        None.

        Example: ``quota gpu-quota: limits.nvidia.com/gpumem 24000, used 0, this pod 32000``.
        """
        for limit in self.limits:
            want = charge.of(limit.vendor, limit.measure)
            if not want:
                continue
            have = self.used.of(limit.vendor, limit.measure)
            if have + want > limit.hard:
                shown = (
                    "unknown (a pod's allocation is unreadable)"
                    if have >= UNREADABLE_CHARGE
                    else have
                )
                return (
                    f"quota {limit.quota}: {limit.key} {limit.hard}, used {shown}, this pod {want}"
                )
        return None

    def __bool__(self) -> bool:
        return bool(self.limits)


#: A namespace without device quotas.
NO_QUOTA = QuotaView()
