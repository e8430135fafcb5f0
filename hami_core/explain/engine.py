"""One pod's answer as data, from one reading of the cluster (``sources.read``).

Shape (``-o json`` / ``-o yaml``; memory in MiB, compute in the ``coresUnit`` beside it)::

    {
      "schema": "hami.explain/v1",
      "namespace": str, "name": str,
      "status": "placed" | "pending" | "not-ours" | "finished" | "refused",
      "reason": str,                        # pending / not-ours / finished / refused: why,
                                            # one line
      # refused (a snapshot's Pod no API server could have stored, so nothing decides on
      # it): only schema, namespace, name, status and reason
      "schedulerName": str, "priority": int,
      "group": str | null,                  # gang group "namespace/name"
      "request": [...],                     # as hami simulate's report (webhook-resolved)
      # placed:
      "node": str | null, "bindPhase": str | null,
      "devices": [...],                     # as hami simulate's report's devices (mode,
                                            # MIG profile and placement per slice)
      # pending:
      "nodes": [...],                       # as hami simulate --explain's nodes: per node
                                            # the filter's reason, per GPU its reason code
      "largest": null | {"node": str, "memoryMiB": int | null, "coresPct": int | null,
                         "coresUnit": str},  # the largest per-GPU request that fits now
      "quota": [{"quota": str, "key": str, "used": int, "hard": int,
                 "thisPod": int,             # what its requests ask (a floor: module _quota)
                 "over": bool}],             # used + thisPod > hard
      "nodeLocks": [{"node": str, "holder": str, "since": str}],   # locks of other pods
      "preemption": null | {"victims": [{"pod": str, "priority": int}], "node": str | null,
                            "reason": str,
                            # a bounded dry run (engine._preemption), when it ran:
                            "nodesTried": int, "nodesWithLowerPriority": int,
                            "exact": bool},   # False: victims that work, maybe not fewest
      "consolidation": null | {"moves": [{"pod": str, "fromNode": str, "fromGpus": [str],
                                          "toNode": str, "toGpus": [str]}],
                               "node": str | null, "reason": str}
    }

Exit codes (``exit_code``): 0 placed, 3 pending (with its reason), 4 not ours (another
scheduler's, or asks no managed device), 1 anything else (not found, finished, refused,
an unreadable cluster).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from hami_core.defrag.movable import DEFAULT_PROTECTED_NAMESPACES, MovePolicy, pod_key
from hami_core.defrag.planner import Planner
from hami_core.defrag.sources import DefragInput
from hami_core.errors import AnnotationError, InvalidInputError, NotFoundError
from hami_core.facts.nodes import read_node
from hami_core.facts.podrequest import read_pod_request
from hami_core.facts.priority import pod_priority
from hami_core.facts.quota import pod_charge
from hami_core.facts.usage import pod_allocation, pod_holdings, requested_vendors
from hami_core.model import Allocation, Charge, DeviceInfo, MigSlot, NodeInfo, PodRequest
from hami_core.plugin import BackendManager
from hami_core.protocol.annotations import BIND_PHASE, NODE_LOCK
from hami_core.protocol.config import namespaced_name_problem
from hami_core.protocol.documents import shown
from hami_core.protocol.lock import decode_lock
from hami_core.protocol.pods import is_live
from hami_core.scheduling.gangs import group_of
from hami_core.scheduling.preemption import choose_victims
from hami_core.scheduling.scheduler import FilterResult, Scheduler, utcnow
from hami_core.simulate.report import device_entries, explain_node, request_entries

SCHEMA = "hami.explain/v1"
PLACED, PENDING, NOT_OURS, FINISHED = "placed", "pending", "not-ours", "finished"
REFUSED = "refused"
EXIT_PLACED, EXIT_ERROR, EXIT_PENDING, EXIT_NOT_OURS = 0, 1, 3, 4
_EXIT = {PLACED: EXIT_PLACED, PENDING: EXIT_PENDING, NOT_OURS: EXIT_NOT_OURS}

#: ``(namespace, name) -> the Pod object, or None when there is none``: finds a pod the
#: reading left out (another scheduler's pending pod, a finished one).
Lookup = Callable[[str, str], Mapping[str, Any] | None]


def exit_code(answer: Mapping[str, Any]) -> int:
    """The exit status for an answer of ``explain`` (module docstring)."""
    return _EXIT.get(str(answer.get("status")), EXIT_ERROR)


def parse_ref(ref: str) -> tuple[str, str]:
    """``namespace/name`` (a bare name is in ``default``, as kubectl reads it).

    Raises:
        InvalidInputError: empty parts, more than one ``/``, or a namespace
            kube-apiserver could not hold (not a DNS-1123 label:
            ``protocol.config.namespaced_name_problem``); the name is only looked up.
    """
    namespace, _, name = ref.rpartition("/") if "/" in ref else ("default", "", ref)
    if not namespace or not name or "/" in namespace:
        raise InvalidInputError(f"not NAMESPACE/POD: {shown(ref)}")
    problem = namespaced_name_problem(f"{namespace}/{name}", any_name=True)
    if problem:
        raise InvalidInputError(f"NAMESPACE/POD {shown(ref)} {problem}")
    return namespace, name


def explain(
    read: DefragInput,
    manager: BackendManager,
    ref: str,
    *,
    lookup: Lookup,
    protected_namespaces: Collection[str] = DEFAULT_PROTECTED_NAMESPACES,
) -> dict[str, Any]:
    """The answer for pod ``ref`` (shape in the module docstring).

    Args:
        read: the cluster as read once (``sources.read``); the consolidation planner
            changes its ``cluster`` (it runs last).
        lookup: finds a pod ``read`` does not hold.
        protected_namespaces: namespaces whose pods the planner never moves.

    Raises:
        InvalidInputError: ``ref`` is not ``namespace/name``.
        NotFoundError: no such pod.
    """
    namespace, name = parse_ref(ref)
    key = f"{namespace}/{name}"
    if key in read.refused:  # the reading left it out: the file's object is not read
        return {
            "schema": SCHEMA,
            "namespace": namespace,
            "name": name,
            "status": REFUSED,
            "reason": "the snapshot's Pod was refused (no API server could have stored "
            f"it), so nothing is decided on it: {read.refused[key]}",
        }
    ours = manager.config.scheduler_name
    waiting = next((p for p in read.pending if pod_key(p) == key), None)
    if waiting is not None:
        return _pending(read, manager, waiting, protected_namespaces)
    try:
        bound: Mapping[str, Any] | None = read.cluster.get_pod(namespace, name)
    except NotFoundError:
        bound = None
    pod: Mapping[str, Any] | None = bound if bound is not None else lookup(namespace, name)
    if pod is None:
        raise NotFoundError(f"pod {key} not found")
    base = _base(pod, manager)
    if not is_live(pod):
        phase = (pod.get("status") or {}).get("phase", "")
        return {**base, "status": FINISHED, "reason": f"the pod has finished (phase {phase})"}
    if base["schedulerName"] != ours:
        return {
            **base,
            "status": NOT_OURS,
            "reason": f"schedulerName is {base['schedulerName'] or 'unset'}, not {ours}",
        }
    if bound is None:  # ours, live, yet neither pending nor on a node: bound since read
        spec_node = (pod.get("spec") or {}).get("nodeName")
        if not spec_node:
            return {**base, "status": PENDING, "reason": "not Pending (phase unknown)"}
    return _placed(read, manager, pod, base)


def _base(pod: Mapping[str, Any], manager: BackendManager) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    try:
        group = group_of(pod)
    except InvalidInputError:
        group = None
    return {
        "schema": SCHEMA,
        "namespace": str(meta.get("namespace") or ""),
        "name": str(meta.get("name") or ""),
        "status": "",
        "reason": "",
        "schedulerName": str((pod.get("spec") or {}).get("schedulerName") or ""),
        "priority": pod_priority(pod),
        "group": str(group) if group is not None else None,
        "request": [],
    }


def _types(manager: BackendManager) -> dict[str, Any]:
    return {t.vendor: t for t in manager.device_types()}


def _request(pod: Mapping[str, Any], manager: BackendManager) -> tuple[PodRequest | None, str]:
    try:
        return read_pod_request(pod, manager), ""
    except InvalidInputError as exc:
        return None, f"its device request cannot be read: {exc}"


def _placed(
    read: DefragInput, manager: BackendManager, pod: Mapping[str, Any], base: dict[str, Any]
) -> dict[str, Any]:
    types = _types(manager)
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    try:
        per_vendor = pod_allocation(pod, tuple(types.values()))
    except AnnotationError as exc:
        per_vendor = {}
        base["reason"] = f"its allocation cannot be read: {exc}"
    asked = requested_vendors(pod, manager)
    if asked is not None:  # the allocation of a vendor not asked for counts for nothing (§6)
        per_vendor = {v: d for v, d in per_vendor.items() if v in asked}
    # one pod and one node: no scheduler state (which reads every pod of the cluster)
    request, problem = _request(pod, manager)
    if not per_vendor and (request is None or not request.wants_devices):
        return {**base, "status": NOT_OURS, "reason": problem or "asks no managed device"}
    devices: dict[str, DeviceInfo] = {}
    mig: Mapping[str, tuple[MigSlot, ...]] = {}
    try:
        info = read_node(
            read.cluster.cached_node(node_name),
            tuple(types.values()),
            now=utcnow(),
            reader=manager.node_devices,
        )
        devices = {d.uuid: d for d in info.devices}
        # the MIG instances are in the node-side annotation, read under the trust rule
        mig = pod_holdings(
            pod,
            info,
            types.values(),
            scheduler_name=manager.config.scheduler_name,
            requested_vendors=asked,
        ).mig
    except NotFoundError:
        pass  # the node is gone: the slices are shown without their model
    allocation = Allocation(node=node_name, devices=per_vendor)
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return {
        **base,
        "status": PLACED,
        "request": request_entries(request, types),
        "node": node_name,
        "bindPhase": ann.get(BIND_PHASE),
        "devices": _with_mig(device_entries(allocation, request, devices, types), mig),
    }


def _with_mig(
    entries: list[dict[str, Any]], mig: Mapping[str, tuple[MigSlot, ...]]
) -> list[dict[str, Any]]:
    """Each slice on a MIG GPU with its instance's profile and placement (in order, when a
    pod holds several instances of one GPU)."""
    left = {uuid: list(slots) for uuid, slots in mig.items()}
    for e in entries:
        slots = left.get(e["uuid"])
        if e["migProfile"] is None and slots:
            slot = slots.pop(0)
            e["migProfile"] = slot.profile
            e["migPlacement"] = {"start": slot.placement.start, "size": slot.placement.size}
    return entries


def _pending(
    read: DefragInput,
    manager: BackendManager,
    pod: Mapping[str, Any],
    protected_namespaces: Collection[str],
) -> dict[str, Any]:
    base = _base(pod, manager)
    # prefilter off: every node is fitted in full, so each names its own reason
    scheduler = Scheduler(read.cluster, manager, prefilter=False)
    request, problem = _request(pod, manager)
    if request is None:
        return {**base, "status": PENDING, "reason": problem}
    if not request.wants_devices:
        return {**base, "status": NOT_OURS, "reason": "asks no managed device"}
    types = _types(manager)
    try:
        result = scheduler.filter(pod)
    except InvalidInputError as exc:  # a bad policy annotation
        return {**base, "status": PENDING, "reason": str(exc)}
    nodes = _nodes(read, scheduler, result, request, types)
    answer = {
        **base,
        "status": PENDING,
        "reason": _reason(result, nodes),
        "request": request_entries(request, types),
        "nodes": nodes,
        "largest": _largest(nodes),
        "quota": _quota(scheduler, base["namespace"], request),
        "nodeLocks": _locks(read, scheduler, manager, base["namespace"], base["name"]),
        "preemption": _preemption(read, scheduler, pod, result, nodes),
    }
    answer["reason"] = _with_quota(answer["reason"], answer["quota"], result)
    # last: the planner changes read.cluster
    answer["consolidation"] = _consolidation(read, scheduler, pod, result, protected_namespaces)
    return answer


def _with_quota(reason: str, quota: list[dict[str, Any]], result: FilterResult) -> str:
    """``reason`` and, when the pod fits nowhere, the first quota it would exceed."""
    over = [q for q in quota if q["over"]]
    if not over or result.feasible:
        return reason
    q = over[0]
    return (
        f"{reason}; over quota {q['quota']}: {q['key']} {q['hard']}, used {q['used']}, "
        f"this pod {q['thisPod']}"
    )


def _reason(result: FilterResult, nodes: list[dict[str, Any]]) -> str:
    """One line: where it fits, or the reason codes of the GPUs and nodes that refused."""
    if result.feasible:
        return (
            f"fits now on {len(result.feasible)} node(s) as far as devices go: kube-scheduler "
            "has not retried it yet, or its own filters (CPU, taints, affinity) refuse"
        )
    if not result.failed:
        return "no node to try"
    gpus: dict[str, int] = {}
    whole: dict[str, int] = {}  # nodes refused with no GPU's code (unregistered, quota)
    for n in nodes:
        codes = [d["reason"] for d in n["devices"] if d["reason"] is not None]
        for code in codes:
            gpus[code] = gpus.get(code, 0) + 1
        if not codes and n["reason"]:
            whole[n["reason"]] = whole.get(n["reason"], 0) + 1
    parts = [f"{code} on {k} GPU(s)" for code, k in sorted(gpus.items(), key=lambda kv: -kv[1])]
    parts += [f"{why} on {k} node(s)" for why, k in sorted(whole.items(), key=lambda kv: -kv[1])]
    return f"fits on none of {len(result.failed)} node(s): {'; '.join(parts)}"


def _nodes(
    read: DefragInput,
    scheduler: Scheduler,
    result: FilterResult,
    request: PodRequest,
    types: Mapping[str, Any],
) -> list[dict[str, Any]]:
    out = []
    for node in sorted(read.cluster.list_nodes(), key=lambda n: str(n["metadata"]["name"])):
        name = str(node["metadata"]["name"])
        if name not in result.failed and name not in result.feasible:
            continue
        info = _node_info(scheduler, node)
        devices = {d.uuid: d for d in info.devices}
        usage = scheduler.node_usage(info)
        fit = result.fits.get(name)
        out.append(explain_node(info, fit, result, usage, devices, request, types))
    return out


def _node_info(scheduler: Scheduler, node: Mapping[str, Any]) -> NodeInfo:
    """The node's devices as the scheduler's state holds them (what its filter fitted
    against), read from the Node object only when the state lacks it: reading every
    node again per pending pod was most of the web view's reading at 1000 nodes."""
    with scheduler.state.lock:
        cached = scheduler.state.node(str(node["metadata"]["name"]))
    return cached.info if cached is not None else scheduler.node_info(node)


def _largest(nodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The node offering the most memory per GPU to a request of this shape (then the
    most compute), among those that say how much would fit."""
    offers = [
        n for n in nodes if n["largestMemoryMiB"] is not None or n["largestCoresPct"] is not None
    ]
    if not offers:
        return None
    best = min(  # ties go to the smallest name, as the scheduler's do
        offers,
        key=lambda n: (-(n["largestMemoryMiB"] or 0), -(n["largestCoresPct"] or 0), n["node"]),
    )
    return {
        "node": best["node"],
        "memoryMiB": best["largestMemoryMiB"],
        "coresPct": best["largestCoresPct"],
        "coresUnit": best["coresUnit"],
    }


def _quota(scheduler: Scheduler, namespace: str, request: PodRequest) -> list[dict[str, Any]]:
    """Per enforced quota of the namespace: used (its pods holding quota), hard, what
    this pod asks as its requests read (count x per-device memory and cores; a memory
    percentage or a MIG profile is charged by the device it lands on, so this is a
    floor) and whether that is over."""
    view = scheduler.state.quota_view(namespace)
    asks = pod_charge(
        (
            c.init,
            {
                r.vendor: Charge(r.count * r.memory_mib, r.count * r.cores_pct, r.count)
                for r in c.devices
            },
        )
        for c in request.containers
    )
    out = []
    for limit in view.limits:
        used = view.used.of(limit.vendor, limit.measure)
        wants = asks.of(limit.vendor, limit.measure)
        out.append(
            {
                "quota": limit.quota,
                "key": limit.key,
                "used": used,
                "hard": limit.hard,
                "thisPod": wants,
                "over": bool(wants) and used + wants > limit.hard,
            }
        )
    return out


def _locks(
    read: DefragInput, scheduler: Scheduler, manager: BackendManager, namespace: str, name: str
) -> list[dict[str, Any]]:
    names = scheduler.state.node_names()
    locked = scheduler.state.locked_by_others(
        set(names),
        namespace=namespace,
        pod=name,
        now=scheduler.clock(),
        expiry_s=manager.config.node_lock_expiry_s,
    )
    out = []
    for node in sorted(locked):
        value = ((read.cluster.get_node(node).get("metadata") or {}).get("annotations") or {}).get(
            NODE_LOCK, ""
        )
        try:
            lock = decode_lock(str(value))
        except AnnotationError:
            continue
        holder = f"{lock.namespace}/{lock.pod}" if lock.pod else "(unnamed)"
        out.append({"node": node, "holder": holder, "since": lock.acquired_at.isoformat()})
    return out


#: Nodes preemption's dry run is given at most (those closest to fitting first), and the
#: fits it may try on each before its greedy fallback: an exact search over every node of
#: a large, busy cluster costs minutes (``benchmarks/bench_explain.py``).
PREEMPTION_NODES = 8
PREEMPTION_FITS_PER_NODE = 64


def _preemption(
    read: DefragInput,
    scheduler: Scheduler,
    pod: Mapping[str, Any],
    result: FilterResult,
    nodes: list[dict[str, Any]],
) -> dict[str, Any]:
    """What preemption would evict, from a bounded dry run (``choose_victims``).

    Only pods of lower priority are ever evicted, so the nodes running none are left
    out; of the others, the ``PREEMPTION_NODES`` closest to fitting (``nodes``' offers:
    most memory, then compute, per GPU) are tried, each with at most
    ``PREEMPTION_FITS_PER_NODE`` fits before the search's greedy fallback (then
    ``exact`` is False: a set of victims that works, maybe not the fewest).
    """
    if result.feasible:
        return {"victims": [], "node": None, "reason": "not needed: it fits without evictions"}

    def budgets(namespaces: frozenset[str]) -> list[Mapping[str, Any]]:
        return [b for b in read.budgets if (b.get("metadata") or {}).get("namespace") in namespaces]

    mine = pod_priority(pod)
    names = scheduler.state.node_names()
    lower = [n for n in names if any(pod_priority(p) < mine for p in read.cluster.pods_on_node(n))]
    if not lower:
        return {
            "victims": [],
            "node": None,
            "reason": f"no eviction of lower-priority pods (priority < {mine}) makes room: "
            f"no pod of lower priority runs on any of {len(names)} node(s)",
            "nodesTried": 0,
            "nodesWithLowerPriority": 0,
            "exact": True,
        }
    offers = {n["node"]: n for n in nodes}

    def closeness(name: str) -> tuple[int, int, str]:
        n = offers.get(name) or {}
        return (-(n.get("largestMemoryMiB") or 0), -(n.get("largestCoresPct") or 0), name)

    tried = sorted(lower, key=closeness)[:PREEMPTION_NODES]
    choice = choose_victims(
        scheduler.state,
        scheduler.engine,
        scheduler.cycle(pod),
        tried,
        selector=scheduler.node_selector,
        budgets=budgets,
        max_fits_per_node=PREEMPTION_FITS_PER_NODE,
    )
    bounds = {
        "nodesTried": len(tried),
        "nodesWithLowerPriority": len(lower),
        "exact": choice.exact,
    }
    scope = ""
    if len(tried) < len(lower):
        scope = f" (of {len(lower)} such nodes, the {len(tried)} closest to fitting were tried)"
    candidate = choice.candidate
    if candidate is None:
        others = len(names) - len(lower)
        if others:
            scope += f" ({others} other node(s) run no pod of lower priority)"
        return {"victims": [], "node": None, "reason": choice.reason + scope, **bounds}
    return {
        "victims": [{"pod": v.ref, "priority": v.priority} for v in candidate.victims],
        "node": candidate.node,
        "reason": choice.reason + scope,
        **bounds,
    }


def _consolidation(
    read: DefragInput,
    scheduler: Scheduler,
    pod: Mapping[str, Any],
    result: FilterResult,
    protected_namespaces: Collection[str],
) -> dict[str, Any]:
    if result.feasible:
        return {"moves": [], "node": None, "reason": "not needed: it fits without moves"}
    policy = MovePolicy.build(
        protected_namespaces=protected_namespaces,
        namespace_labels=read.namespace_labels,
        budgets=read.budgets,
        jobs=read.jobs,
    )
    # the planner fits with the filter's own scheduler: one state, every pod read once
    planner = Planner(read.cluster, scheduler.manager, policy, scheduler=scheduler)
    (outcome,) = planner.plan([pod]).outcomes
    moves = [
        {
            "pod": m.pod,
            "fromNode": m.from_node,
            "fromGpus": list(m.from_gpus),
            "toNode": m.to_node,
            "toGpus": list(m.to_gpus),
        }
        for m in outcome.moves
    ]
    if not outcome.placed:
        return {"moves": [], "node": None, "reason": outcome.reason}
    return {
        "moves": moves,
        "node": outcome.node,
        "reason": f"{len(moves)} move(s), then it fits on {outcome.node}",
    }
