"""Rows of ``hami top``: one per device and one per node, from a cluster store."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from hami_core.cluster.base import ClusterStore
from hami_core.errors import InvalidInputError, NotFoundError
from hami_core.facts.groups import group_name
from hami_core.facts.holdings import HoldingsReader, ProblemLog
from hami_core.facts.nodes import read_node
from hami_core.facts.priority import pod_priority
from hami_core.facts.usage import PodHoldings, usage_from_holdings
from hami_core.model import CORES_UNITS, PERCENT, CoresUnit, DeviceInfo
from hami_core.model.migusage import held_cores_pct, is_mig_gpu, usable_free_memory_mib
from hami_core.plugin import BackendManager
from hami_core.protocol.pods import pod_ref

log = logging.getLogger(__name__)

SORT_KEYS = ("node", "memory", "free", "cores", "used", "sharers")


@attrs.frozen(kw_only=True)
class DeviceUse:
    """What a device is doing, from the node monitor (NVML).

    Attributes:
        memory_used_mib: device memory in use by every process, MiB.
        utilization_pct: share of time a kernel ran, 0..100.
    """

    memory_used_mib: float
    utilization_pct: float


@attrs.frozen(kw_only=True)
class PodUse:
    """What one pod uses of one GPU (its containers summed), from the node monitor.

    Attributes:
        memory_used_mib: device memory its processes hold, MiB.
        utilization_pct: share of wall time its kernels ran since the monitor's previous
            scan, 0..100; None when not measured.
    """

    memory_used_mib: float
    utilization_pct: float | None = None


#: How ``hami top`` names a device's mode (``DeviceInfo.mode``): who enforces the share.
MODE_NAMES = {"hami-core": "shim", "mps": "mps", "mig": "mig"}


@attrs.frozen(kw_only=True)
class PodSlice:
    """What one pod holds of one device.

    Attributes:
        pod: ``namespace/name``.
        memory_mib / cores_pct: the slice (MiB; percent of the device, as ``Charge``).
        mig_profiles: the MIG instances it holds there (``1g.10gb``), on a ``mig`` GPU.
        whole: True when its allocation could not be read and it holds the device whole
            (PROTOCOL.md §6, fail closed).
        priority: the pod's ``spec.priority``; priority_class: its
            ``spec.priorityClassName`` ("" when none).
        group: its gang group, ``namespace/name`` (``scheduling.gangs.group_of``), or None.
        memory_used_mib / utilization_pct: what it uses of the device as the node monitor
            measures it (``measured.PodUse``); None when not known.
    """

    pod: str
    memory_mib: int = 0
    cores_pct: int = 0
    mig_profiles: tuple[str, ...] = ()
    whole: bool = False
    priority: int = 0
    priority_class: str = ""
    group: str | None = None
    memory_used_mib: float | None = None
    utilization_pct: float | None = None

    def show(self, unit: CoresUnit) -> str:
        """``ns/pod(20000MiB,30%)``, ``ns/pod(mig 1g.10gb)``, ``ns/pod(whole)``."""
        if self.whole:
            return f"{self.pod}(whole)"
        if self.mig_profiles:
            return f"{self.pod}(mig {'+'.join(self.mig_profiles)})"
        if not unit.accounted:
            return f"{self.pod}({self.memory_mib}MiB)"
        return f"{self.pod}({self.memory_mib}MiB,{unit.show(unit.amount(self.cores_pct))})"


@attrs.frozen(kw_only=True)
class DeviceRow:
    """One device.

    Attributes:
        memory_total_mib / memory_allocated_mib: schedulable and allocated memory, MiB.
        cores_total_pct / cores_allocated_pct: schedulable and allocated compute in
            ``cores_unit`` (percent for most vendors; the names are historical).
        cores_unit: the vendor's compute unit (``DeviceTypeInfo.cores_unit`` name:
            ``percent``, ``compute-units``, ``neuroncores``, ``sgpu-cores``, ``none``).
        sharers / split_count: containers sharing it now / at most.
        pods: ``namespace/name`` of the pods holding it, sorted.
        memory_used_mib, utilization_pct: from the monitor, None when not known.
        memory_usable_mib: on a device that cannot hand out all the memory it has left
            (a MIG GPU: ``hami_core.model.migusage``), what it can, MiB; None: all of it.
        mode: the device's mode (``DeviceInfo.mode``: ``hami-core``, ``mps``, ``mig``).
        mig_instances: on a ``mig`` GPU, the profiles of the instances live pods hold.
        slices: what each holder has of it, in ``pods`` order.
        shim: whether the vendor's share in ``hami-core`` mode is held by a limiter
            preloaded into the container (``libvgpu.so`` for NVIDIA, HAMi's vNPU core for
            Ascend on a node running it: the device type protects ``/etc/ld.so.preload``
            and no ``WITHOUT_SHIM`` fact says otherwise); False: by the vendor's own
            driver or runtime (shown ``vendor``; Ascend's hardware vNPU templates).
    """

    node: str
    index: int
    uuid: str
    vendor: str
    model: str
    healthy: bool
    cordoned: bool
    memory_total_mib: int
    memory_allocated_mib: int
    cores_total_pct: int
    cores_allocated_pct: int
    sharers: int
    split_count: int
    pods: tuple[str, ...]
    memory_used_mib: float | None = None
    utilization_pct: float | None = None
    cores_unit: str = PERCENT.name
    memory_usable_mib: int | None = None
    mode: str = "hami-core"
    mig_instances: tuple[str, ...] = ()
    slices: tuple[PodSlice, ...] = ()
    shim: bool = True

    @property
    def mode_name(self) -> str:
        """Who holds the share: ``shim``, ``vendor`` (the vendor's own driver or
        runtime, in ``hami-core`` mode), ``mps``, ``mig`` or the inventory's own word
        for another mode."""
        if self.mode == "hami-core" and not self.shim:
            return "vendor"
        return MODE_NAMES.get(self.mode, self.mode)

    def slice_mode(self, held: PodSlice) -> str:
        """The mode of one pod's slice: ``mig 1g.10gb`` (its instances) on a MIG GPU,
        else the device's ``mode_name``."""
        if held.mig_profiles:
            return f"mig {'+'.join(held.mig_profiles)}"
        return self.mode_name

    @property
    def mode_shown(self) -> str:
        """``shim``, ``vendor``, ``mps``, ``mig`` or, with instances held,
        ``mig 1g.10gb x2,3g.40gb``."""
        name = self.mode_name
        if not self.mig_instances:
            return name
        counts: dict[str, int] = {}
        for profile in self.mig_instances:
            counts[profile] = counts.get(profile, 0) + 1
        held = ",".join(f"{p} x{n}" if n > 1 else p for p, n in counts.items())
        return f"{name} {held}"

    @property
    def unit(self) -> CoresUnit:
        """The ``CoresUnit`` of ``cores_unit``."""
        return CORES_UNITS.get(self.cores_unit, PERCENT)

    @property
    def cores_allocated_share_pct(self) -> int:
        """Compute allocated as a percentage of the device, whatever its unit (what
        ``--sort-by cores`` compares)."""
        return self.unit.share_pct(self.cores_allocated_pct, self.cores_total_pct)

    @property
    def memory_free_mib(self) -> int:
        """Schedulable memory not allocated, MiB (0 for an unhealthy or cordoned device:
        nothing new lands there)."""
        if not self.healthy or self.cordoned:
            return 0
        left = max(0, self.memory_total_mib - self.memory_allocated_mib)
        return left if self.memory_usable_mib is None else min(left, self.memory_usable_mib)

    def as_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["pods"] = list(self.pods)
        out["memory_free_mib"] = self.memory_free_mib
        out["mig_instances"] = list(self.mig_instances)
        out["slices"] = [
            {**attrs.asdict(s), "mig_profiles": list(s.mig_profiles)} for s in self.slices
        ]
        return out


@attrs.frozen(kw_only=True)
class NodeRow:
    """One node: its devices summed, and why its inventory is unusable, if it is.

    ``cores_total_pct`` / ``cores_allocated_pct`` sum the devices counted in percent;
    ``cores_by_unit`` sums every unit: unit name -> ``{"allocated": n, "total": n}``.
    """

    node: str
    devices: int
    unhealthy: int
    memory_total_mib: int
    memory_allocated_mib: int
    memory_free_mib: int
    cores_total_pct: int
    cores_allocated_pct: int
    memory_used_mib: float | None
    unregistered: Mapping[str, str]
    cores_by_unit: Mapping[str, Mapping[str, int]] = attrs.field(factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["unregistered"] = dict(self.unregistered)
        out["cores_by_unit"] = {k: dict(v) for k, v in self.cores_by_unit.items()}
        return out


def cores_by_unit(rows: Iterable[DeviceRow]) -> dict[str, dict[str, int]]:
    """Compute allocated and total per unit over ``rows`` (units that are not
    accounted left out), units in the order ``CORES_UNITS`` names them."""
    sums: dict[str, dict[str, int]] = {}
    for r in rows:
        if r.unit.accounted:
            s = sums.setdefault(r.cores_unit, {"allocated": 0, "total": 0})
            s["allocated"] += r.cores_allocated_pct
            s["total"] += r.cores_total_pct
    order = list(CORES_UNITS)
    return dict(sorted(sums.items(), key=lambda kv: order.index(kv[0])))


def _percent_rows(rows: Iterable[DeviceRow]) -> list[DeviceRow]:
    return [r for r in rows if r.unit.is_percent]


@attrs.frozen(kw_only=True)
class TopView:
    """Everything ``hami top`` shows, already filtered and sorted."""

    devices: tuple[DeviceRow, ...]
    nodes: tuple[NodeRow, ...]
    #: where used figures came from (``monitor``, ``prometheus``) or None; the endpoints
    #: that could not be read, one line each
    usage_source: str | None = None
    unreachable: tuple[str, ...] = ()

    def totals(self) -> dict[str, Any]:
        """Sums over the shown devices (free counts healthy, uncordoned devices only)."""
        return {
            "devices": len(self.devices),
            "unhealthy": sum(1 for d in self.devices if not d.healthy),
            "memory_total_mib": sum(d.memory_total_mib for d in self.devices),
            "memory_allocated_mib": sum(d.memory_allocated_mib for d in self.devices),
            "memory_free_mib": sum(d.memory_free_mib for d in self.devices),
            "cores_total_pct": sum(d.cores_total_pct for d in _percent_rows(self.devices)),
            "cores_allocated_pct": sum(d.cores_allocated_pct for d in _percent_rows(self.devices)),
            "cores_by_unit": cores_by_unit(self.devices),
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "devices": [d.as_json() for d in self.devices],
            "nodes": [n.as_json() for n in self.nodes],
            "totals": self.totals(),
            "usage": {"source": self.usage_source, "unreachable": list(self.unreachable)},
        }


def build_view(
    store: ClusterStore,
    manager: BackendManager,
    *,
    usage: Mapping[str, DeviceUse] | None = None,
    nodes: Sequence[str] = (),
    selector: Mapping[str, str] | None = None,
    vendor: str | None = None,
    namespace: str | None = None,
    sort_by: str = "node",
    pod_usage: Mapping[tuple[str, str], PodUse] | None = None,
    usage_source: str | None = None,
    unreachable: Sequence[str] = (),
) -> TopView:
    """The rows for ``store``.

    Args:
        usage: device UUID -> what the monitor measures (``usage_from_prometheus``,
            ``measured.Measured.devices``).
        pod_usage: ``("namespace/pod", device UUID)`` -> what the pod uses of it
            (``measured.Measured.pods``).
        usage_source / unreachable: where the figures came from and the endpoints that
            could not be read (``measured.Measured``), kept in the view as they are.
        nodes: only these nodes (all when empty).
        selector: only nodes whose labels equal these (``kubectl top -l`` style).
        vendor: only devices of this vendor key (e.g. ``NVIDIA``).
        namespace: only devices holding a pod of this namespace, each listing only that
            namespace's pods (its totals stay the device's: what is free is free to all).
        sort_by: one of ``SORT_KEYS``: node name (then index), allocated memory, free
            memory, allocated compute, used memory, sharers; all but ``node`` largest
            first.
    Raises:
        ValueError: ``sort_by`` is not one of ``SORT_KEYS``.
        NotFoundError: a name of ``nodes`` is no node of ``store`` (as ``kubectl top node
            <name>``, instead of an empty table).
    """
    if sort_by not in SORT_KEYS:
        raise ValueError(f"--sort-by must be one of {', '.join(SORT_KEYS)}, not {sort_by!r}")
    known = {str((n.get("metadata") or {}).get("name", "")) for n in store.list_nodes()}
    missing = sorted(set(nodes) - known)
    if missing:
        some = sorted(known)
        shown = ", ".join(some[:10]) + (", ..." if len(some) > 10 else "")
        raise NotFoundError(
            f"no node named {', '.join(repr(m) for m in missing)} (nodes: {shown or 'none'})"
        )
    types = manager.device_types()
    reader = HoldingsReader(manager, ProblemLog(log))
    now = dt.datetime.now(dt.UTC)
    by_vendor = {t.vendor: t for t in types}
    usage = usage or {}
    pod_usage = pod_usage or {}
    shims = {t.vendor: PRELOAD in t.protected_paths for t in types}
    wanted = set(nodes)
    device_rows: list[DeviceRow] = []
    node_rows: list[NodeRow] = []
    for node in sorted(store.list_nodes(), key=lambda n: str(n["metadata"]["name"])):
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        if wanted and name not in wanted:
            continue
        labels = meta.get("labels") or {}
        if selector and any(labels.get(k) != v for k, v in selector.items()):
            continue
        info = read_node(node, types, now=now, reader=manager.node_devices)
        holders: dict[str, list[PodSlice]] = {}
        held_all: list[PodHoldings] = []  # the usage below folds these: one reading a pod
        broken: list[str] = []
        for pod in store.pods_on_node(name):
            held = reader.holdings(pod, info)
            if held.problem:
                broken.append(held.problem)
            held_all.append(held)
            ref, priority, priority_class, group = _pod_facts(pod)
            for uuid in {*held.charges, *held.whole}:
                charge = held.charges.get(uuid)
                measured = pod_usage.get((ref, uuid))
                holders.setdefault(uuid, []).append(
                    PodSlice(
                        pod=ref,
                        memory_mib=charge.memory_mib if charge else 0,
                        cores_pct=charge.cores_pct if charge else 0,
                        mig_profiles=tuple(m.profile for m in held.mig.get(uuid, ())),
                        whole=uuid in held.whole,
                        priority=priority,
                        priority_class=priority_class,
                        group=group,
                        memory_used_mib=measured.memory_used_mib if measured else None,
                        utilization_pct=measured.utilization_pct if measured else None,
                    )
                )
        rows = []
        reader.problems.report(broken)
        for uuid, u in usage_from_holdings(info, held_all).items():
            d = u.device
            if vendor and d.vendor != vendor:
                continue
            use = usage.get(uuid)
            dtype = by_vendor.get(d.vendor)
            unit = dtype.cores_unit if dtype is not None else PERCENT
            capacity = dtype.cores_capacity(u) if dtype is not None else d.cores_pct
            slices = tuple(sorted(holders.get(uuid, []), key=lambda h: h.pod))
            if namespace is not None:
                slices = tuple(h for h in slices if h.pod.split("/", 1)[0] == namespace)
                if not slices:
                    continue
            rows.append(
                DeviceRow(
                    node=name,
                    index=d.index,
                    uuid=uuid,
                    vendor=d.vendor,
                    model=d.model,
                    healthy=d.healthy,
                    cordoned=u.cordoned,
                    memory_total_mib=d.memory_mib,
                    memory_allocated_mib=u.used_memory_mib,
                    cores_total_pct=unit.amount(capacity),
                    cores_allocated_pct=unit.amount(held_cores_pct(u)),
                    cores_unit=unit.name,
                    sharers=u.used_count,
                    split_count=d.split_count,
                    pods=tuple(h.pod for h in slices),
                    slices=slices,
                    mode=d.mode,
                    mig_instances=tuple(sorted(m.profile for m in u.mig_in_use)),
                    memory_used_mib=use.memory_used_mib if use else None,
                    utilization_pct=use.utilization_pct if use else None,
                    memory_usable_mib=usable_free_memory_mib(u) if is_mig_gpu(d) else None,
                    shim=_shim(d, shims.get(d.vendor, True)),
                )
            )
        if not rows and (namespace is not None or not info.unregistered):
            continue  # a node without accelerators (or without the namespace's pods)
        device_rows.extend(rows)
        node_rows.append(_node_row(name, rows, info.unregistered))
    return TopView(
        devices=tuple(_sorted(device_rows, sort_by)),
        nodes=tuple(_sorted_nodes(node_rows, sort_by)),
        usage_source=usage_source,
        unreachable=tuple(unreachable),
    )


#: A device type protecting this path preloads a limiter into its containers (``shim``).
PRELOAD = "/etc/ld.so.preload"
#: ``DeviceInfo.custom`` facts by which a backend says a device of such a type serves its
#: shares without the limiter: an Ascend chip of a node not running HAMi's vNPU core
#: serves hardware vNPU templates (``hami_ascend.inventory.HAMI_CORE_NODE``).
WITHOUT_SHIM = (("hamiVnpuCore", "false"),)


def _shim(device: DeviceInfo, preloads: bool) -> bool:
    """Whether ``device``'s shares are held by its type's preloaded limiter."""
    return preloads and not any(device.info(k) == v for k, v in WITHOUT_SHIM)


def _pod_facts(pod: Mapping[str, Any]) -> tuple[str, int, str, str | None]:
    """``namespace/name``, priority, PriorityClass name and gang group of ``pod`` (a
    group name that cannot be read shows as none: top is no place to refuse a pod)."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    try:
        group = group_name(pod)
    except InvalidInputError:
        group = None
    return (
        pod_ref(pod),
        pod_priority(pod),
        str(spec.get("priorityClassName") or ""),
        f"{meta.get('namespace') or 'default'}/{group}" if group is not None else None,
    )


def _node_row(name: str, rows: Iterable[DeviceRow], unregistered: Mapping[str, str]) -> NodeRow:
    rows = list(rows)
    used = [r.memory_used_mib for r in rows if r.memory_used_mib is not None]
    return NodeRow(
        node=name,
        devices=len(rows),
        unhealthy=sum(1 for r in rows if not r.healthy),
        memory_total_mib=sum(r.memory_total_mib for r in rows),
        memory_allocated_mib=sum(r.memory_allocated_mib for r in rows),
        memory_free_mib=sum(r.memory_free_mib for r in rows),
        cores_total_pct=sum(r.cores_total_pct for r in _percent_rows(rows)),
        cores_allocated_pct=sum(r.cores_allocated_pct for r in _percent_rows(rows)),
        memory_used_mib=sum(used) if used else None,
        unregistered=dict(unregistered),
        cores_by_unit=cores_by_unit(rows),
    )


def _sorted(rows: list[DeviceRow], key: str) -> list[DeviceRow]:
    by_name = sorted(rows, key=lambda r: (r.node, r.index, r.uuid))
    if key == "node":
        return by_name
    value = {
        "memory": lambda r: r.memory_allocated_mib,
        "free": lambda r: r.memory_free_mib,
        "cores": lambda r: r.cores_allocated_share_pct,
        "used": lambda r: r.memory_used_mib or 0.0,
        "sharers": lambda r: r.sharers,
    }[key]
    return sorted(by_name, key=value, reverse=True)  # stable: ties stay in name order


def _sorted_nodes(rows: list[NodeRow], key: str) -> list[NodeRow]:
    by_name = sorted(rows, key=lambda r: r.node)
    value = {
        "node": None,
        "memory": lambda r: r.memory_allocated_mib,
        "free": lambda r: r.memory_free_mib,
        "cores": lambda r: r.cores_allocated_pct,
        "used": lambda r: r.memory_used_mib or 0.0,
        "sharers": lambda r: r.devices,
    }[key]
    return by_name if value is None else sorted(by_name, key=value, reverse=True)
