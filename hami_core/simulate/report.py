"""What ``hami simulate`` prints: the report (text or JSON) and one pod's explanation.

The JSON form is the data the text is rendered from, so both always say the same.
Keys are stable; memory is in MiB, scores 0..100. Compute is in the vendor's unit
(``DeviceTypeInfo.cores_unit``, ``hami_core.model.cores``), named by the ``coresUnit``
beside it: ``percent`` of one device for most vendors, ``compute-units`` (AMD devices;
AMD requests are ``percent``), ``neuroncore-mask`` (AWS Neuron devices: their core masks
are given as core counts) and ``neuroncores`` (AWS Neuron requests), ``sgpu-cores``
(Moore Threads, 16 to a GPU), ``none`` (count-only vendors); the keys keep their
historical ``Pct`` names so readers of earlier reports keep working.

Report (``build_report``)::

    {
      "schema": "hami.simulate/v1",
      "cluster": {"source": str, "form": "simple" | "snapshot", "nodes": int, "gpus": int,
                  "existingPods": int},          # pods of a snapshot holding devices
      "workloads": {"sources": [str], "pods": int},
      "policies": {"node": "binpack" | "spread",
                   "gpu": str},              # one policy, or a list: "mutex,spread"
      "pods": [                                  # in submission order
        {"namespace": str, "name": str, "source": str,
         "status": "placed" | "unschedulable" | "denied" | "error"
                   | "other-scheduler"           # schedulerName names another scheduler
                   | "unmanaged",                # asks resources no installed backend has
         "node": str | null,
         "message": str,                         # the denial, error or reason, else ""
         "deniedBy": "webhook" | "kube-apiserver" | null,   # who denied it (denied only)
         "schedulerName": str,                   # after the webhook
         "admission": [RFC 6902 op],             # what the webhook changed (defaults,
                                                 # schedulerName), [] when nothing
         "containers": [                         # the device plugin's answer per container
           {"name": str, "env": {str: str},      # (placed pods with devices only)
            "mounts": [{"containerPath": str, "hostPath": str, "readOnly": bool}],
            "devices": [{"containerPath": str, "hostPath": str, "permissions": str}],
            "cdiDevices": [str]}],
         "request": [                            # one entry per container and vendor
           {"container": str, "init": bool,      # init: one of the init containers run
                                                 # one after another (not a sidecar)
            "vendor": str, "count": int,
            "memoryMiB": int, "memoryPct": int, "coresPct": int,   # memory: one of the two
            "coresUnit": str,                    # the cores resource's unit (AMD: percent)
            "migProfile": str}],                 # only when it names a MIG profile (N instances)
         "devices": [                            # what it got, containers in wire order
           {"container": str, "init": bool, "vendor": str, "uuid": str, "index": int,
            "model": str, "mode": str,           # the device's mode: hami-core | mig | mps
            "migProfile": str | null,            # on a mig GPU: the instance's profile
            "migPlacement": {"start": int, "size": int} | null,   # and its slices
            "memoryMiB": int, "coresPct": int, "coresUnit": str}],
         "wholeCardGpus": int,                   # GPUs it would hold without sharing
         "notModelled": [str],                   # what kube-scheduler weighs for it and
                                                 # the run did not (preferred affinity,
                                                 # ScheduleAnyway spread, volumes, ...)
         "preempted": [str],                     # pods evicted to make room for it
         "preemption": str | null,               # what preemption did, or why not
         "explanation": null | [                 # unschedulable pods only: one per node
           {"node": str, "reason": str,          # "2/4 CardInsufficientMemory, ..."
            "container": str | null, "vendor": str | null,   # the container that failed
            "largestMemoryMiB": int | null,      # when memory is short (the reason says so
            "largestCoresPct": int | null,       # or the request asks more): the most per
                                                 # device a request of that count would get
            "coresUnit": str | null,             # largestCoresPct's unit (the request's)
            "devices": [{"uuid": str, "index": int, "model": str, "reason": str}]}]}],
      "gpus": [                                  # every device, by node then index
        {"node": str, "uuid": str, "index": int, "vendor": str, "model": str, "mode": str,
         "migInstance": str | null,             # a MIG instance as a device (the single
                                                 # strategy): its profile
         "memoryMiB": int, "usedMemoryMiB": int, "coresPct": int, "usedCoresPct": int,
         "freeMemoryMiB": int,                   # what pods can still be given (a MIG GPU:
                                                 # what further instances could hold)
         "coresUnit": str, "splitCount": int, "sharers": int,      # containers sharing it
         "pods": [str],                          # "namespace/name" of the pods on it
         "healthy": bool, "cordoned": bool}],
      "summary": {"pods": int, "placed": int, "placedWithDevices": int,
                  "withoutDevices": int, "unschedulable": int, "denied": int, "errors": int,
                  "otherScheduler": int, "unmanaged": int,
                  "gpusUsed": int,               # distinct GPUs the placed pods hold
                  "wholeCardGpus": int,          # sum of wholeCardGpus of placed pods
                  "existingPods": int,
                  "line": str},                  # "23 pods on 6 GPUs; one GPU per pod would need 31"
      "groups": [                                # gang groups, in order of first member
        {"group": str,                           # "namespace/name"
         "minMember": int | null,
         "members": [str],                       # "namespace/name" of its pods
         "bound": int,                           # members placed
         "status": "placed" | "refused",         # as a whole
         "why": str}],                           # the GroupDoesNotFit reason, else ""
      "warnings": [str]
    }

Explanation (``build_explanation``, ``--explain POD``)::

    {
      "schema": "hami.simulate.explain/v1",
      "namespace": str, "name": str, "source": str, "status": str, "message": str,
      "admission": {"allowed": bool, "message": str},
      "request": [...as above...],
      "policies": null | {"node": str, "nodeFrom": str, "gpu": str, "gpuFrom": str},
                                                 # From: "pod annotation" | "command line" | "config"
      "nodes": [
        {"node": str, "fits": bool, "reason": str, "score": float | null,
         "extenderScore": int | null,            # 0..10, what kube-scheduler receives
         "container": str | null, "vendor": str | null,
         "largestMemoryMiB": int | null, "largestCoresPct": int | null,
         "coresUnit": str | null,                # largestCoresPct's unit
         "devices": [
           {"uuid": str, "index": int, "vendor": str, "model": str,
            "memoryMiB": int, "usedMemoryMiB": int | null, "coresPct": int,
            "usedCoresPct": int | null, "freeMemoryMiB": int | null, "coresUnit": str,
            "splitCount": int, "sharers": int | null,
            "reason": str | null,                # why it was rejected, null if usable
            "takes": null | {"memoryMiB": int, "coresPct": int}}]}],   # on a fitting node
                                                 # (coresPct in the device's coresUnit)
      "chosen": null | {"node": str, "devices": [...as the report's devices...]},
      "preempted": [str], "preemption": str | null   # as in the report
    }
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.errors import AnnotationError, InvalidInputError
from hami_core.facts.usage import pod_allocation
from hami_core.model import (
    CORES_UNITS,
    MIG_PROFILE_INFO,
    PERCENT,
    Allocation,
    Charge,
    CoresUnit,
    DeviceInfo,
    DeviceRequest,
    DeviceTypeInfo,
    DeviceUsage,
    NodeInfo,
    PodRequest,
    ReasonCode,
    collapse,
)
from hami_core.model.migusage import held_cores_pct, usable_free_memory_mib
from hami_core.protocol.annotations import GPU_SCHEDULER_POLICY, NODE_SCHEDULER_POLICY
from hami_core.protocol.documents import printable
from hami_core.protocol.pods import is_live
from hami_core.scheduling.fitting import NodeFit
from hami_core.scheduling.gangs import group_of
from hami_core.scheduling.scheduler import FilterResult
from hami_core.scheduling.scoring import extender_score

from .runner import PodRun, Simulation

SCHEMA = "hami.simulate/v1"
EXPLAIN_SCHEMA = "hami.simulate.explain/v1"
BAR_WIDTH = 10

PLACED, UNSCHEDULABLE, DENIED, ERROR = "placed", "unschedulable", "denied", "error"
OTHER_SCHEDULER, UNMANAGED = "other-scheduler", "unmanaged"

#: Vendor key -> its ``DeviceTypeInfo`` (what names each vendor's compute unit).
DeviceTypes = Mapping[str, DeviceTypeInfo]


def device_types(sim: Simulation) -> dict[str, DeviceTypeInfo]:
    """The simulation's device types by vendor key."""
    return {t.vendor: t for t in sim.manager.device_types()}


def _cores_unit(types: DeviceTypes, vendor: str) -> CoresUnit:
    """What ``vendor``'s devices and slices count compute in (percent when unknown)."""
    t = types.get(vendor)
    return t.cores_unit if t is not None else PERCENT


def _capacity(types: DeviceTypes, usage: DeviceUsage) -> int:
    """A device's compute, as stored, as its vendor reads it (``DeviceTypeInfo.cores_capacity``)."""
    t = types.get(usage.device.vendor)
    return t.cores_capacity(usage) if t is not None else usage.device.cores_pct


def unit_named(name: str | None) -> CoresUnit:
    """The ``CoresUnit`` of a report's ``coresUnit`` (percent for reports without one)."""
    return CORES_UNITS.get(name or "", PERCENT)


# -- data ----------------------------------------------------------------------------


def build_report(sim: Simulation) -> dict[str, Any]:
    """The whole report as JSON-ready data (the shape is in the module docstring)."""
    infos = _node_infos(sim)
    types = device_types(sim)
    devices = {d.uuid: d for info in infos.values() for d in info.devices}
    pods = [_pod_entry(run, devices, types) for run in sim.runs]
    gpus = _gpu_entries(sim, infos, types)
    return {
        "schema": SCHEMA,
        "cluster": {
            "source": sim.cluster.source,
            "form": sim.cluster.form,
            "nodes": len(infos),
            "gpus": len(devices),
            "existingPods": len(sim.cluster.pods),
        },
        "workloads": {"sources": list(sim.workloads.sources), "pods": len(sim.runs)},
        "policies": {"node": sim.node_policy.value, "gpu": str(sim.device_policy)},
        "pods": pods,
        "gpus": gpus,
        "summary": _summary(pods, existing=len(sim.cluster.pods)),
        "groups": group_entries(sim),
        "warnings": [*sim.warnings, *unmanaged_warnings(sim)],
    }


#: How a gang member's filter answer starts when its group is refused as a whole.
GROUP_REFUSED = ReasonCode.GROUP_DOES_NOT_FIT.value


def group_entries(sim: Simulation) -> list[dict[str, Any]]:
    """Each gang group of the workloads (``gangs.group_of``), placed or refused as a
    whole: its members, how many were bound, the reason when refused."""
    out: dict[str, dict[str, Any]] = {}
    for run in sim.runs:
        try:
            group = group_of(run.workload.pod)
        except InvalidInputError:
            continue
        if group is None:
            continue
        key = f"{run.outcome.namespace}/{group.name}"
        entry = out.setdefault(
            key,
            {"group": key, "minMember": None, "members": [], "bound": 0, "status": "", "why": ""},
        )
        if group.min_member:
            entry["minMember"] = max(entry["minMember"] or 0, group.min_member)
        entry["members"].append(run.key)
        if run.outcome.scheduled:
            entry["bound"] += 1
        elif run.outcome.filter is not None:
            why = [r for r in run.outcome.filter.failed.values() if r.startswith(GROUP_REFUSED)]
            if why:
                entry["why"] = why[0]
    for entry in out.values():
        placed = entry["bound"] and entry["bound"] >= (entry["minMember"] or 0)
        entry["status"] = "placed" if placed else "refused"
        if placed:
            entry["why"] = ""
    return list(out.values())


def _node_infos(sim: Simulation) -> dict[str, NodeInfo]:
    sched = sim.pipeline.scheduler
    return {
        info.name: info for info in (sched.node_info(n) for n in sim.pipeline.cluster.list_nodes())
    }


def status_of(run: PodRun) -> str:
    """``placed``, ``unschedulable``, ``denied``, ``error``, ``other-scheduler`` or
    ``unmanaged``."""
    out = run.outcome
    if out.denied:
        return DENIED
    if out.left_to:
        return OTHER_SCHEDULER
    if out.unmanaged:
        return UNMANAGED
    if out.error:
        return ERROR
    return PLACED if out.scheduled else UNSCHEDULABLE


def request_entries(
    request: PodRequest | None, types: DeviceTypes | None = None
) -> list[dict[str, Any]]:
    """One entry per container and vendor asked for (containers without devices left
    out), init containers first; compute per device in the vendor's cores resource unit
    (``DeviceTypeInfo.requested_cores``; percent for a vendor not in ``types``)."""
    if request is None:
        return []
    types = types or {}
    out = []
    for c in request.containers:
        for r in c.devices:
            t = types.get(r.vendor)
            out.append(
                {
                    "container": c.name,
                    "init": c.init,
                    "vendor": r.vendor,
                    "count": r.count,
                    "memoryMiB": r.memory_mib,
                    "memoryPct": r.memory_pct,
                    "coresPct": t.requested_cores(r) if t is not None else r.cores_pct,
                    "coresUnit": (t.resource_cores_unit if t is not None else PERCENT).name,
                }
            )
            if r.info(MIG_PROFILE_INFO):  # N instances of the profile, not N GPUs
                out[-1]["migProfile"] = r.info(MIG_PROFILE_INFO)
    return out


def whole_card_gpus(request: PodRequest | None) -> int:
    """Devices the pod would hold if each device were given whole: the larger of the
    largest init container and the sum of the app containers (Kubernetes' rule for a
    pod's effective request; ``hami_core.model.collapse``)."""
    if request is None:
        return 0
    charged = collapse(
        (c.init, {"devices": Charge(count=sum(r.count for r in c.devices))})
        for c in request.containers
    )
    return charged["devices"].count if "devices" in charged else 0


def device_entries(
    allocation: Allocation | None,
    request: PodRequest | None,
    devices: Mapping[str, DeviceInfo],
    types: DeviceTypes | None = None,
) -> list[dict[str, Any]]:
    """The slices of an allocation with their device's index and model, containers in
    wire order (init containers first); compute in the vendor's ``cores_unit`` (percent
    for a vendor not in ``types``)."""
    if allocation is None:
        return []
    types = types or {}
    containers = request.containers if request is not None else ()
    out = []
    for vendor, per_container in allocation.devices.items():
        unit = _cores_unit(types, vendor)
        for pos, slices in enumerate(per_container):
            c = containers[pos] if pos < len(containers) else None
            for s in slices:
                info = devices.get(s.uuid)
                out.append(
                    {
                        "container": c.name if c is not None else f"#{pos}",
                        "init": c.init if c is not None else False,
                        "vendor": vendor,
                        "uuid": s.uuid,
                        "index": info.index if info is not None else -1,
                        "model": info.model if info is not None else "",
                        "mode": info.mode if info is not None else "",
                        "migProfile": s.mig.profile if s.mig is not None else None,
                        "migPlacement": (
                            {"start": s.mig.placement.start, "size": s.mig.placement.size}
                            if s.mig is not None
                            else None
                        ),
                        "memoryMiB": s.memory_mib,
                        "coresPct": unit.amount(s.cores_pct),
                        "coresUnit": unit.name,
                    }
                )
    return out


def _pod_entry(
    run: PodRun, devices: Mapping[str, DeviceInfo], types: DeviceTypes
) -> dict[str, Any]:
    out = run.outcome
    status = status_of(run)
    return {
        "namespace": out.namespace,
        "name": out.name,
        "source": run.workload.source,
        "status": status,
        "node": out.node,
        "message": out.denied or out.error or _why(run),
        "deniedBy": out.denied_by if out.denied else None,
        "schedulerName": _scheduler_name(run),
        "admission": [dict(op) for op in out.admission_patch],
        "containers": _container_answers(run),
        "request": request_entries(run.request, types),
        "devices": device_entries(out.allocation, run.request, devices, types),
        "wholeCardGpus": whole_card_gpus(run.request) if status == PLACED else 0,
        "explanation": _explanation(run, devices, types) if status == UNSCHEDULABLE else None,
        "notModelled": list(run.not_modelled),
        "preempted": list(out.preempted),
        "preemption": out.preemption or None,
    }


def _why(run: PodRun) -> str:
    out = run.outcome
    if out.left_to:
        return f"left to scheduler {out.left_to!r}: given nothing here"
    if out.unmanaged:
        return f"asks {', '.join(out.unmanaged)}, which no installed backend manages: not placed"
    return ""


def _scheduler_name(run: PodRun) -> str:
    spec = run.workload.pod.get("spec") or {}
    name = str(spec.get("schedulerName") or "default-scheduler")
    for op in run.outcome.admission_patch:
        if op.get("path") == "/spec/schedulerName" and op.get("op") in ("add", "replace"):
            name = str(op.get("value"))
    return name


def _container_answers(run: PodRun) -> list[dict[str, Any]]:
    return [
        {
            "name": cname,
            "env": dict(sorted(a.envs.items())),
            "mounts": [
                {
                    "containerPath": m.container_path,
                    "hostPath": m.host_path,
                    "readOnly": m.read_only,
                }
                for m in a.mounts
            ],
            "devices": [
                {
                    "containerPath": d.container_path,
                    "hostPath": d.host_path,
                    "permissions": d.permissions,
                }
                for d in a.device_nodes
            ],
            "cdiDevices": list(a.cdi_devices),
        }
        for cname, a in run.outcome.allocations.items()
    ]


def unmanaged_warnings(sim: Simulation) -> list[str]:
    """One warning per pod asking resources no installed backend manages."""
    return [
        f"pod {run.key} asks {', '.join(run.outcome.unmanaged)}, which no installed backend "
        "manages (a misspelt name, or a vendor whose hami backend is not installed) and no "
        "node states: the cluster leaves it Pending; reported unmanaged, not placed"
        for run in sim.runs
        if run.outcome.unmanaged
    ]


def _explanation(
    run: PodRun, devices: Mapping[str, DeviceInfo], types: DeviceTypes
) -> list[dict[str, Any]]:
    result = run.outcome.filter
    if result is None:
        return []
    out = []
    for node, reason in result.failed.items():
        fit = result.fits.get(node)
        out.append(
            {"node": node, "reason": reason, **_miss(fit, reason, devices, run.request, types)}
        )
    return out


def _wanted(request: PodRequest | None, container: str, vendor: str) -> DeviceRequest | None:
    """The failing container's request of ``vendor``."""
    for c in request.containers if request is not None else ():
        if c.name == container:
            return next((r for r in c.devices if r.vendor == vendor), None)
    return None


def _miss(
    fit: NodeFit | None,
    reason: str,
    devices: Mapping[str, DeviceInfo],
    request: PodRequest | None = None,
    types: DeviceTypes | None = None,
) -> dict[str, Any]:
    """The failing container, the largest memory / cores per device that would fit
    (given when the node reports that shortfall, or the request asks more than it, cores
    in the request's unit), and the rejected devices with their reason codes."""
    miss = fit.miss if fit is not None else None
    if miss is None:
        return {
            "container": None,
            "vendor": None,
            "largestMemoryMiB": None,
            "largestCoresPct": None,
            "coresUnit": None,
            "devices": [],
        }
    t = (types or {}).get(miss.vendor)
    res = miss.result
    wanted = _wanted(request, miss.container, miss.vendor)
    memory_short = ReasonCode.CARD_INSUFFICIENT_MEMORY.value in reason or (
        wanted is not None
        and res.largest_memory_mib is not None
        and wanted.memory_mib > res.largest_memory_mib
    )
    cores_short = ReasonCode.CARD_INSUFFICIENT_CORE.value in reason or (
        wanted is not None
        and res.largest_cores_pct is not None
        and wanted.cores_pct > res.largest_cores_pct
    )
    rejected = []
    for uuid, code in res.device_reasons.items():
        info = devices.get(uuid)
        rejected.append(
            {
                "uuid": uuid,
                "index": info.index if info is not None else -1,
                "model": info.model if info is not None else "",
                "reason": code.value,
            }
        )
    rejected.sort(key=lambda d: (d["index"], d["uuid"]))
    return {
        "container": miss.container,
        "vendor": miss.vendor,
        "largestMemoryMiB": res.largest_memory_mib if memory_short else None,
        "largestCoresPct": res.largest_cores_pct if cores_short else None,
        "coresUnit": (t.resource_cores_unit if t is not None else PERCENT).name,
        "devices": rejected,
    }


def _gpu_entries(
    sim: Simulation, infos: Mapping[str, NodeInfo], types: DeviceTypes
) -> list[dict[str, Any]]:
    sched = sim.pipeline.scheduler
    holders: dict[str, list[str]] = {}
    for pod in sim.pipeline.cluster.list_pods():
        if not is_live(pod):
            continue
        meta = pod["metadata"]
        try:
            allocation = pod_allocation(pod, tuple(types.values()))
        except AnnotationError:
            continue
        uuids = {d.uuid for per_pod in allocation.values() for c in per_pod for d in c}
        for uuid in sorted(uuids):
            holders.setdefault(uuid, []).append(f"{meta['namespace']}/{meta['name']}")
    out = []
    for name, info in infos.items():
        usage = sched.node_usage(info)
        for d in sorted(info.devices, key=lambda d: (d.vendor, d.index, d.uuid)):
            u = usage.get(d.uuid) or DeviceUsage(device=d)
            unit = _cores_unit(types, d.vendor)
            out.append(
                {
                    "node": name,
                    "uuid": d.uuid,
                    "index": d.index,
                    "vendor": d.vendor,
                    "model": d.model,
                    "mode": d.mode,
                    "migInstance": _instance_profile(d),
                    "memoryMiB": d.memory_mib,
                    "usedMemoryMiB": u.used_memory_mib,
                    "coresPct": unit.amount(_capacity(types, u)),
                    "usedCoresPct": unit.amount(held_cores_pct(u)),
                    "freeMemoryMiB": usable_free_memory_mib(u),
                    "coresUnit": unit.name,
                    "splitCount": d.split_count,
                    "sharers": u.used_count,
                    "pods": holders.get(d.uuid, []),
                    "healthy": d.healthy,
                    "cordoned": u.cordoned,
                }
            )
    return out


def _instance_profile(device: DeviceInfo) -> str | None:
    """The profile of a device that is one MIG instance (one sharer, one profile at one
    placement: what a device plugin under the ``single`` MIG strategy publishes), else
    None."""
    profiles = device.mig_profiles
    if device.split_count == 1 and len(profiles) == 1 and len(profiles[0].placements) == 1:
        return profiles[0].name
    return None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _summary(pods: Sequence[Mapping[str, Any]], *, existing: int) -> dict[str, Any]:
    placed = [p for p in pods if p["status"] == PLACED]
    with_devices = [p for p in placed if p["devices"]]
    used = {d["uuid"] for p in with_devices for d in p["devices"]}
    whole = sum(p["wholeCardGpus"] for p in placed)
    line = (
        f"{_plural(len(with_devices), 'pod')} on {_plural(len(used), 'GPU')}; "
        f"one GPU per pod would need {whole}"
    )
    return {
        "pods": len(pods),
        "placed": len(placed),
        "placedWithDevices": len(with_devices),
        "withoutDevices": len(placed) - len(with_devices),
        "unschedulable": sum(1 for p in pods if p["status"] == UNSCHEDULABLE),
        "denied": sum(1 for p in pods if p["status"] == DENIED),
        "errors": sum(1 for p in pods if p["status"] == ERROR),
        "otherScheduler": sum(1 for p in pods if p["status"] == OTHER_SCHEDULER),
        "unmanaged": sum(1 for p in pods if p["status"] == UNMANAGED),
        "gpusUsed": len(used),
        "wholeCardGpus": whole,
        "existingPods": existing,
        "line": line,
    }


def build_explanation(sim: Simulation, pod: str) -> dict[str, Any]:
    """One pod's reasoning as data (the shape is in the module docstring).

    Args:
        pod: ``namespace/name`` or a name unique across namespaces.

    Raises:
        InvalidInputError: no such pod among the workloads, or ambiguous.
    """
    run = sim.find(pod)
    out = run.outcome
    infos = run.observed.nodes if run.observed is not None else _node_infos(sim)
    usage = run.observed.usage if run.observed is not None else {}
    devices = {d.uuid: d for info in infos.values() for d in info.devices}
    types = device_types(sim)
    result = out.filter
    nodes = []
    if result is not None:
        for name, info in infos.items():
            fit = result.fits.get(name)
            if fit is None and name not in result.failed and name not in result.feasible:
                continue
            nodes.append(
                explain_node(info, fit, result, usage.get(name, {}), devices, run.request, types)
            )
    chosen = None
    if out.node is not None:
        chosen = {
            "node": out.node,
            "devices": device_entries(out.allocation, run.request, devices, types),
        }
    return {
        "schema": EXPLAIN_SCHEMA,
        "namespace": out.namespace,
        "name": out.name,
        "source": run.workload.source,
        "status": status_of(run),
        "message": out.denied or out.error,
        "admission": {"allowed": not out.denied, "message": out.denied},
        "request": request_entries(run.request, types),
        "policies": _policies(sim, run),
        "nodes": nodes,
        "chosen": chosen,
        "preempted": list(out.preempted),
        "preemption": out.preemption or None,
    }


def _policies(sim: Simulation, run: PodRun) -> dict[str, str] | None:
    result = run.outcome.filter
    if result is None:
        return None
    ann = (run.workload.pod.get("metadata") or {}).get("annotations") or {}

    def origin(key: str, overridden: bool) -> str:
        if key in ann:
            return "pod annotation"
        return "command line" if overridden else "config"

    return {
        "node": result.policies.node.value,
        "nodeFrom": origin(NODE_SCHEDULER_POLICY, sim.node_policy_overridden),
        "gpu": str(result.policies.device_chain),
        "gpuFrom": origin(GPU_SCHEDULER_POLICY, sim.device_policy_overridden),
    }


def explain_node(
    info: NodeInfo,
    fit: NodeFit | None,
    result: FilterResult,
    usage: Mapping[str, DeviceUsage],
    devices: Mapping[str, DeviceInfo],
    request: PodRequest | None,
    types: DeviceTypes,
) -> dict[str, Any]:
    """One node of an explanation (``nodes[]`` in the module docstring): whether the pod
    fits, the filter's reason, per device its reason code or what the pod takes there,
    and the largest memory / compute per device that would fit. ``usage``: the node's
    devices' usage (uuid -> ``DeviceUsage``) as the filter saw it; ``devices``: every
    device by uuid (for the rejected ones' index and model)."""
    fits = info.name in result.feasible
    reason = "" if fits else str(result.failed.get(info.name, ""))
    miss = _miss(fit if not fits else None, reason, devices, request, types)
    codes = {d["uuid"]: d["reason"] for d in miss["devices"]}
    takes: dict[str, dict[str, int]] = {}
    if fits and fit is not None and fit.allocation is not None:
        for s in fit.allocation.all_devices():
            t = takes.setdefault(s.uuid, {"memoryMiB": 0, "coresPct": 0})
            t["memoryMiB"] += s.memory_mib
            t["coresPct"] += _cores_unit(types, s.vendor).amount(s.cores_pct)
    score = result.scores.get(info.name) if fits else None
    rows = []
    for d in sorted(info.devices, key=lambda d: (d.vendor, d.index, d.uuid)):
        u = usage.get(d.uuid)
        unit = _cores_unit(types, d.vendor)
        rows.append(
            {
                "uuid": d.uuid,
                "index": d.index,
                "vendor": d.vendor,
                "model": d.model,
                "memoryMiB": d.memory_mib,
                "usedMemoryMiB": u.used_memory_mib if u is not None else None,
                "coresPct": unit.amount(_capacity(types, u or DeviceUsage(device=d))),
                "usedCoresPct": unit.amount(held_cores_pct(u)) if u is not None else None,
                "freeMemoryMiB": usable_free_memory_mib(u) if u is not None else None,
                "coresUnit": unit.name,
                "splitCount": d.split_count,
                "sharers": u.used_count if u is not None else None,
                "reason": codes.get(d.uuid),
                "takes": takes.get(d.uuid),
            }
        )
    return {
        "node": info.name,
        "fits": fits,
        "reason": reason,
        "score": round(score, 3) if score is not None else None,
        "extenderScore": extender_score(score) if score is not None else None,
        "container": miss["container"],
        "vendor": miss["vendor"],
        "largestMemoryMiB": miss["largestMemoryMiB"],
        "largestCoresPct": miss["largestCoresPct"],
        "coresUnit": miss["coresUnit"],
        "devices": rows,
    }


# -- text ----------------------------------------------------------------------------


def _table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        (indent + "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True))).rstrip()
        for r in rows
    ]


def _memory(entry: Mapping[str, Any]) -> str:
    if entry["memoryPct"]:
        return f"{entry['memoryPct']}% of memory"
    return f"{entry['memoryMiB']} MiB"


def _cores(entry: Mapping[str, Any], key: str = "coresPct") -> str:
    """An entry's compute with its unit: ``30%``, ``76 CU``, ``-``."""
    return unit_named(entry.get("coresUnit")).show(entry[key])


def _cores_ratio(entry: Mapping[str, Any], *, lead: bool = False) -> str:
    """A device's compute held of its total: ``30/100% cores`` (``lead``: ``cores
    30/100%``), ``76/304 CU``, ``1/2 NeuronCores``; ``no compute`` (``lead``: ``cores -``)
    for a vendor that does not account it."""
    unit = unit_named(entry.get("coresUnit"))
    ratio = unit.show_ratio(entry["usedCoresPct"], entry["coresPct"])
    if unit.is_percent or not unit.accounted:
        if lead:
            return f"cores {ratio}"
        return f"{ratio} cores" if unit.accounted else "no compute"
    return ratio


def _cores_asked(entry: Mapping[str, Any], key: str = "coresPct") -> str:
    """A request's compute: ``30% cores``, ``76 CU``, ``1 NeuronCore``, ``no compute``."""
    unit = unit_named(entry.get("coresUnit"))
    if not unit.accounted:
        return "no compute"
    return unit.show(entry[key]) + (" cores" if unit.is_percent else "")


def describe_request(entries: Sequence[Mapping[str, Any]]) -> str:
    """``2 GPUs x 32000 MiB, 30% cores`` per container (joined with ``; ``), compute in
    the vendor's unit (``1 AWSNeuron x 100% of memory, 1 NeuronCore``), ``2 MIG instances
    of 1g.10gb`` for a request naming a MIG profile, or ``no devices``."""
    parts = []
    several = len({e["container"] for e in entries}) > 1
    for e in entries:
        what = "GPU" if e["vendor"] == "NVIDIA" else e["vendor"]
        profile = e.get("migProfile")
        if profile:  # N instances of the profile: its memory and cores, not a share
            text = f"{_plural(e['count'], 'MIG instance')} of {profile}"
        else:
            text = f"{_plural(e['count'], what)} x {_memory(e)}, {_cores_asked(e)}"
        if several or e["init"]:
            text = f"{e['container']}{' (init)' if e['init'] else ''}: {text}"
        parts.append(text)
    return "; ".join(parts) or "no devices"


def bar(used: int, total: int, width: int = BAR_WIDTH) -> str:
    """``[#######---]``: ``used / total`` in ``width`` cells, rounded down (but at least
    one cell when anything is used, so only a full device shows a full bar)."""
    if total <= 0:
        return "[" + "-" * width + "]"
    filled = min(width, used * width // total)
    if used > 0 and filled == 0:
        filled = 1  # something is there: show it
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def render_text(report: Mapping[str, Any], *, warnings: bool = True) -> str:
    """The report as text: placements, denied and unschedulable pods with their
    explanation, a bar per GPU, the summary line; ``warnings=False`` leaves the
    warnings out (``hami simulate`` prints them on stderr). Control and bidirectional
    characters of names a manifest or snapshot carries are escaped (``printable``)."""
    lines: list[str] = []
    c, pol, summary = report["cluster"], report["policies"], report["summary"]
    existing = f", {_plural(c['existingPods'], 'existing pod')}" if c["existingPods"] else ""
    lines.append(
        f"Cluster {c['source']} ({c['form']}): {_plural(c['nodes'], 'node')}, "
        f"{_plural(c['gpus'], 'GPU')}{existing}"
    )
    lines.append(
        f"Workloads: {_plural(report['workloads']['pods'], 'pod')} from "
        f"{_plural(len(report['workloads']['sources']), 'file')}; "
        f"policies: node {pol['node']}, GPU {pol['gpu']}"
    )
    for w in report["warnings"] if warnings else ():
        lines.append(f"warning: {w}")
    pods = report["pods"]
    placed = [p for p in pods if p["status"] == PLACED]
    lines += ["", f"Placed ({len(placed)})"]
    rows = [["POD", "NODE", "GPU", "MODEL", "MEMORY", "CORES", "CONTAINER"]]
    for p in placed:
        first = [f"{p['namespace']}/{p['name']}", p["node"] or ""]
        if not p["devices"]:
            rows.append([*first, "(no devices)", "", "", "", ""])
        several = len({d["container"] for d in p["devices"]}) > 1
        for i, d in enumerate(p["devices"]):
            rows.append(
                [
                    *(first if i == 0 else ["", ""]),
                    f"#{d['index']} {d['uuid']}",
                    _with_mode(d["model"], d["mode"], d.get("migProfile")),
                    f"{d['memoryMiB']} MiB",
                    _cores(d),
                    d["container"] if several else "",
                ]
            )
    if placed:
        if not any(r[-1] for r in rows[1:]):
            rows = [r[:-1] for r in rows]  # no pod with several containers
        lines += _table(rows)
    preempting = [p for p in pods if p.get("preempted")]
    if preempting:
        lines += ["", f"Preempted for ({len(preempting)})"]
        for p in preempting:
            lines.append(f"  {_key(p)} evicted {', '.join(p['preempted'])}: {p['preemption']}")
    for who, title in (
        ("kube-apiserver", "Refused by kube-apiserver"),
        ("webhook", "Denied by the webhook"),
    ):
        denied = [p for p in pods if p["status"] == DENIED and p.get("deniedBy", "webhook") == who]
        if denied:
            lines += ["", f"{title} ({len(denied)})"]
            lines += [f"  {_key(p)}: {_message(p)}" for p in denied]
    errors = [p for p in pods if p["status"] == ERROR]
    if errors:
        lines += ["", f"Errors ({len(errors)})"]
        lines += [f"  {_key(p)}: {_message(p)}" for p in errors]
    for status, title in (
        (OTHER_SCHEDULER, "Left to another scheduler"),
        (UNMANAGED, "Unmanaged resources"),
    ):
        group = [p for p in pods if p["status"] == status]
        if group:
            lines += ["", f"{title} ({len(group)})"]
            lines += [f"  {_key(p)}: {p['message']}" for p in group]
    partial = [p for p in pods if p.get("notModelled")]
    if partial:
        lines += ["", f"Not modelled ({len(partial)}): the answer may differ for these pods"]
        lines += [f"  {_key(p)}: {line}" for p in partial for line in p["notModelled"]]
    groups = report.get("groups") or []
    if groups:
        lines += ["", f"Gang groups ({len(groups)})"]
        for g in groups:
            counted = f"{g['bound']} of minMember {g['minMember']} bound"
            if g["status"] == "placed":
                lines.append(f"  {g['group']}: placed as a whole, {counted}")
            else:
                lines.append(f"  {g['group']}: refused as a whole, {counted}: {g['why']}")
    unschedulable = [p for p in pods if p["status"] == UNSCHEDULABLE]
    if unschedulable:
        lines += ["", f"Unschedulable ({len(unschedulable)})"]
        for p in unschedulable:
            lines.append(f"  {p['namespace']}/{p['name']}: asks {describe_request(p['request'])}")
            lines += _explanation_lines(p["explanation"] or [])
        first = unschedulable[0]
        lines.append(
            f"  (add --explain {first['namespace']}/{first['name']} for the reason per GPU)"
        )
    lines += ["", "GPUs"]
    lines += _gpu_lines(report["gpus"])
    counts = [
        f"{summary[k]} {label}"
        for k, label in (
            ("unschedulable", "unschedulable"),
            ("denied", "denied"),
            ("errors", "failed"),
            ("otherScheduler", "left to another scheduler"),
            ("unmanaged", "unmanaged"),
        )
        if summary[k]
    ]
    if summary["withoutDevices"]:
        counts.append(f"{_plural(summary['withoutDevices'], 'pod')} without GPUs")
    tail = f" ({', '.join(counts)})" if counts else ""
    lines += ["", f"Summary: {summary['line']}{tail}"]
    return printable("\n".join(lines) + "\n", keep_newlines=True)


def _key(pod: Mapping[str, Any]) -> str:
    return f"{pod['namespace']}/{pod['name']}"


def _message(pod: Mapping[str, Any]) -> str:
    """The message without a leading ``pod <ns>/<name>:`` (the line already names it)."""
    return str(pod["message"]).removeprefix(f"pod {_key(pod)}: ")


def _explanation_lines(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    if not entries:
        return ["    no node to try"]
    width = max(len(e["node"]) for e in entries) + 1
    out = []
    for e in entries:
        hint = []
        if e["largestMemoryMiB"] is not None:
            hint.append(f"{e['largestMemoryMiB']} MiB")
        if e["largestCoresPct"] is not None:
            hint.append(_cores_asked(e, "largestCoresPct"))
        extra = f"; largest that fits: {', '.join(hint)} per GPU" if hint else ""
        out.append(f"    {(e['node'] + ':').ljust(width)} {e['reason']}{extra}")
    return out


def _with_mode(model: str, mode: str, mig_profile: str | None = None) -> str:
    """The model, with the device's mode when it is not the shim's (``... (mps)``), and
    the MIG instance's profile on a MIG GPU (``... (mig 3g.40gb)``)."""
    if mig_profile:
        return f"{model} ({mode} {mig_profile})"
    return f"{model} ({mode})" if mode and mode != "hami-core" else model


def _memory_ratio(g: Mapping[str, Any]) -> str:
    """``used/total MiB``, and what can still be given where that is less than the rest
    (a MIG GPU: ``68992/81920 MiB, 0 MiB usable``)."""
    text = f"{g['usedMemoryMiB']}/{g['memoryMiB']} MiB"
    free = g.get("freeMemoryMiB")
    if free is not None and free < max(0, g["memoryMiB"] - g["usedMemoryMiB"]):
        text += f", {free} MiB usable"
    return text


def _gpu_lines(gpus: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = []
    for g in gpus:
        flags = ("" if g["healthy"] else " unhealthy") + (" cordoned" if g["cordoned"] else "")
        rows.append(
            [
                g["node"],
                f"#{g['index']}",
                _with_mode(g["model"], g["mode"], g["migInstance"]),
                bar(g["usedMemoryMiB"], g["memoryMiB"]),
                _memory_ratio(g),
                _cores_ratio(g, lead=True),
                _plural(len(g["pods"]), "pod") + flags,
            ]
        )
    if not rows:
        return ["  no GPUs"]
    # the node name only on its first GPU
    last = None
    for r in rows:
        if r[0] == last:
            r[0] = ""
        else:
            last = r[0]
    return _table(rows)


def render_explanation(data: Mapping[str, Any]) -> str:
    """One pod's reasoning as text: request, policies, per node the outcome and per
    device the reason code, the node scores and the chosen devices."""
    lines = [f"Pod {data['namespace']}/{data['name']} ({data['source']}): {data['status']}"]
    adm = data["admission"]
    lines.append(f"  admission: {'allowed' if adm['allowed'] else 'denied: ' + adm['message']}")
    if data["status"] == ERROR:
        lines.append(f"  error: {data['message']}")
    if not adm["allowed"]:
        return printable("\n".join(lines) + "\n", keep_newlines=True)
    lines.append(f"  request: {describe_request(data['request'])}")
    pol = data["policies"]
    if pol is not None:
        lines.append(
            f"  policies: node {pol['node']} ({pol['nodeFrom']}), GPU {pol['gpu']} ({pol['gpuFrom']})"
        )
    if data["nodes"]:
        lines.append("  nodes:")
    wanted = {r["vendor"] for r in data["request"]}
    for n in data["nodes"]:
        if n["fits"]:
            head = f"fits, score {n['score']:.1f}/100 (extender {n['extenderScore']}/10)"
        else:
            who = f" (container {n['container']})" if n["container"] else ""
            head = f"does not fit: {n['reason']}{who}"
        lines.append(f"    {n['node']}: {head}")
        rows = []
        for d in n["devices"]:
            if d["usedMemoryMiB"] is None:
                used = [f"{d['memoryMiB']} MiB", _cores_asked(d), ""]
            else:
                used = [
                    f"used {_memory_ratio(d)}",
                    _cores_ratio(d),
                    f"{d['sharers']}/{d['splitCount']} sharers",
                ]
            if d["takes"] is not None:
                took = {**d["takes"], "coresUnit": d.get("coresUnit")}
                verdict = f"takes {d['takes']['memoryMiB']} MiB, {_cores(took)}"
            elif d["reason"] is not None:
                verdict = d["reason"]
            elif d["vendor"] not in wanted:
                verdict = "other vendor"  # a pod never lands on a vendor it did not ask
            else:
                verdict = "not chosen" if n["fits"] else "usable"
            rows.append([f"#{d['index']} {d['uuid']}", d["model"], *used, verdict])
        if rows:
            lines += _table(rows, indent="      ")
        hint = []
        if n["largestMemoryMiB"] is not None:
            hint.append(f"{n['largestMemoryMiB']} MiB")
        if n["largestCoresPct"] is not None:
            hint.append(_cores_asked(n, "largestCoresPct"))
        if hint:
            lines.append(f"      largest that fits: {', '.join(hint)} per GPU")
    if data.get("preemption"):
        evicted = ", ".join(data["preempted"]) or "nobody"
        lines.append(f"  preemption: evicted {evicted}: {data['preemption']}")
    chosen = data["chosen"]
    if chosen is None:
        lines.append("  chosen: none")
    else:
        how = ""
        if pol is not None and sum(1 for n in data["nodes"] if n["fits"]) > 1:
            how = f" (highest {pol['node']} score; ties go to the smallest name)"
        lines.append(f"  chosen: {chosen['node']}{how}")
        for d in chosen["devices"]:
            lines.append(
                f"    {d['container']}: #{d['index']} {d['uuid']} {d['model']}, "
                f"{d['memoryMiB']} MiB, {_cores_asked(d)}"
            )
    return printable("\n".join(lines) + "\n", keep_newlines=True)


__all__ = [
    "EXPLAIN_SCHEMA",
    "SCHEMA",
    "bar",
    "build_explanation",
    "build_report",
    "describe_request",
    "device_entries",
    "explain_node",
    "device_types",
    "render_explanation",
    "render_text",
    "request_entries",
    "status_of",
    "unit_named",
    "whole_card_gpus",
]
