"""The integer program's answer (``exact``) carried out on the planner's copy.

For the pending pods of one priority that fit nowhere now, ``plan_exactly`` reads the
copy into the program's terms (``exact.Gpu``, ``exact.Mover``), asks for the most of
them placed with the fewest evictions, and replays the answer through the scheduler's
own fit: every chosen pod evicted, then each pending pod and each replacement placed
by ``Scheduler.filter`` on the node the answer names, pinned to the GPUs it names
(``nvidia.com/use-gpuuuid`` on a copy of the pod). Only if every step fits is the
answer kept; else the copy is as before and the planner's search plans instead.

What the program does not model stays out of it: a pod with device filters of its
own (type, UUID, NUMA, mutex annotations; a mode annotation only when it names one
mode), a pod of several device requests or of another vendor than NVIDIA, or naming a
MIG profile (``nvidia.com/mig-<profile>``), a pod holding a GPU whole because its
allocation cannot be read or several MIG instances of one GPU, and GPUs in another mode
than ``hami-core`` and ``mig`` (MPS) or in ``mig`` mode with a share beside the
instances. Such running pods stay where they are (their load is fixed); such pending
pods are left to the search. On a GPU in ``mig`` mode the fit chooses the instance
(the smallest profile with a free placement): where it takes another one than the
answer's and a later step no longer fits, the answer is dropped for the search.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from hami_core.errors import HamiError
from hami_core.model import Allocation, DeviceUsage
from hami_core.model.migusage import is_mig_gpu

from . import exact
from .exact import FILTERS
from .movable import pod_key, pod_priority
from .planner import Move, Outcome, _gpus, _replacement, bound_pod

if TYPE_CHECKING:
    from .planner import Planner

#: The vendor whose pods and GPUs the program models.
VENDOR = "NVIDIA"
#: The annotation that pins a pod copy to the GPUs the answer names.
PIN = "nvidia.com/use-gpuuuid"
#: The GPU mode the program's counts describe (memory, compute, sharer slots); GPUs in
#: ``mig`` mode it models by their geometry.
MODE = "hami-core"
MIG_MODE = "mig"
#: The annotation of the modes a pod accepts (docs/PROTOCOL.md §5).
MODE_KEY = "nvidia.com/vgpu-mode"


def _mode(annotations: Mapping[str, str]) -> str | None:
    """The one GPU mode the pod accepts (``nvidia.com/vgpu-mode`` naming ``hami-core`` or
    ``mig`` alone), "" without the annotation; None with filters the program does not
    model (any other of ``FILTERS``, or other modes)."""
    if (FILTERS - {MODE_KEY}) & set(annotations):
        return None
    raw = annotations.get(MODE_KEY)
    if raw is None:
        return ""
    tokens = [t.strip() for t in str(raw).split(",") if t.strip()]
    return tokens[0] if len(tokens) == 1 and tokens[0] in (MODE, MIG_MODE) else None


def shape_of(planner: Planner, pod: Mapping[str, Any]) -> exact.Shape | None:
    """``pod``'s one NVIDIA request as a shape, or None when the program cannot model it
    (filters, several requests, another vendor, a named MIG profile, an unreadable
    request)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    mode = _mode(annotations)
    if mode is None:
        return None
    try:
        request = planner.scheduler.pod_request(pod)
    except HamiError:
        return None
    wants = [r for c in request.containers for r in c.devices]
    if len(wants) != 1 or wants[0].vendor != VENDOR or wants[0].custom:
        return None
    (r,) = wants
    return exact.Shape(
        vendor=r.vendor,
        count=r.count,
        memory_mib=r.memory_mib,
        memory_pct=r.memory_pct,
        cores_pct=r.cores_pct,
        mode=mode,
    )


def _modelled(usage: DeviceUsage) -> bool:
    """Whether the program models the GPU: NVIDIA, not cordoned, in ``hami-core`` mode or
    in ``mig`` mode (with its profiles) holding nothing but instances."""
    dev = usage.device
    if usage.cordoned or dev.vendor != VENDOR:
        return False
    if is_mig_gpu(dev):
        return usage.used_count == len(usage.mig_in_use)
    return dev.mode == MODE


def _held_shape(pod: Mapping[str, Any], charges: Mapping[str, Any]) -> exact.Shape | None:
    """A running pod's shape from what it holds (its request is not parsed again: the
    replay fits its replacement by its request, so a shape read wrong only loses the
    answer): the same memory and compute on each GPU; None with filters or unequal
    charges."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    held = {(c.memory_mib, c.cores_pct) for c in charges.values()}
    mode = _mode(annotations)
    if mode is None or len(held) != 1:
        return None
    ((memory_mib, cores_pct),) = held
    return exact.Shape(
        vendor=VENDOR,
        count=len(charges),
        memory_mib=memory_mib,
        memory_pct=0,
        cores_pct=cores_pct,
        mode=mode,
    )


def plan_exactly(
    planner: Planner, blocked: Sequence[Mapping[str, Any]], priority: int
) -> dict[str, Outcome]:
    """Outcomes for the pods of ``blocked`` (pending, priority ``priority``, fitting
    nowhere now, queue order) that the program's answer places, carried out on the
    planner's copy; {} when there is no answer or the fit refuses a step of it."""
    pending = [(pod, shape_of(planner, pod)) for pod in blocked]
    modelled = [(pod, s) for pod, s in pending if s is not None]
    if not modelled:
        return {}
    read = _read(planner, priority)
    if read is None:
        return {}
    gpus, movers, objects = read
    left = {b.key: b.allowed - planner.policy.spent.get(b.key, 0) for b in planner.policy.budgets}
    answer = exact.solve(
        gpus,
        movers,
        [(pod_key(pod), s) for pod, s in modelled],
        left,
        max_evictions=planner.max_moves * len(modelled),
        time_limit_s=planner.exact_time_limit_s,
    )
    if answer is None:
        return {}
    waiting = {pod_key(pod): pod for pod, _ in modelled}
    allocations = _replay(planner, answer, waiting, objects)
    if allocations is None:
        return {}
    return _carry_out(planner, answer, waiting, objects, allocations)


def _read(
    planner: Planner, priority: int
) -> tuple[list[exact.Gpu], list[exact.Mover], dict[str, dict[str, Any]]] | None:
    """The copy in the program's terms: the GPUs it may place on with the load of the
    pods that cannot move, the pods that can (for ``priority``), and those pods'
    objects by key; None as soon as they pass ``exact.MAX_TERMS`` (read no further)."""
    gpus: list[exact.Gpu] = []
    movers: list[exact.Mover] = []
    objects: dict[str, dict[str, Any]] = {}
    for name in planner.scheduler.state.node_names():
        if len(gpus) + len(movers) > exact.MAX_TERMS:
            return None
        view = planner._view(name)
        if view is None:
            continue
        usage, held = view
        modelled = {uuid for uuid, u in usage.items() if _modelled(u)}
        fixed = {
            uuid: [u.used_memory_mib, u.used_cores_pct, u.used_count]
            for uuid, u in usage.items()
            if uuid in modelled
        }
        moving: set[Any] = set()  # the movers' MIG instances
        for key, holdings in held.items():
            obj = planner._pod(key)
            if (
                obj is None
                or holdings.whole
                or not holdings.charges
                or not set(holdings.charges) <= modelled
                or any(len(slots) != 1 for slots in holdings.mig.values())
                or not planner._may_move(obj, priority)
            ):
                continue
            # an instance books its profile, not the request: read the request then
            shape = shape_of(planner, obj) if holdings.mig else _held_shape(obj, holdings.charges)
            if shape is None:
                continue
            for uuid, charge in holdings.charges.items():
                load = fixed[uuid]
                load[0] -= charge.memory_mib
                load[1] -= charge.cores_pct
                load[2] -= 1
            movers.append(
                exact.Mover(
                    key=key,
                    shape=shape,
                    holds=tuple(
                        (uuid, ch.memory_mib, ch.cores_pct)
                        for uuid, ch in sorted(holdings.charges.items())
                    ),
                    budgets=tuple(b.key for b in planner.policy.budgets_of(obj)),
                    instances=tuple(
                        (uuid, slot.placement)
                        for uuid, slots in sorted(holdings.mig.items())
                        for slot in slots
                    ),
                )
            )
            moving.update(s for slots in holdings.mig.values() for s in slots)
            objects[key] = obj
        for uuid in sorted(modelled):
            dev = usage[uuid].device
            mem, cores, slots = fixed[uuid]
            mig = is_mig_gpu(dev)
            gpus.append(
                exact.Gpu(
                    node=name,
                    uuid=uuid,
                    vendor=dev.vendor,
                    memory_mib=dev.memory_mib,
                    cores_pct=dev.cores_pct,
                    slots=dev.split_count,
                    fixed_memory_mib=mem,
                    fixed_cores_pct=cores,
                    fixed_slots=slots,
                    profiles=dev.mig_profiles if mig else (),
                    fixed_instances=tuple(
                        s.placement for s in usage[uuid].mig_in_use if s not in moving
                    )
                    if mig
                    else (),
                )
            )
    return gpus, movers, objects


def _pinned(pod: Mapping[str, Any], gpus: Sequence[str]) -> dict[str, Any]:
    """A copy of ``pod`` that may use only ``gpus`` (its own uid, so no cache of the
    scheduler takes it for the pod)."""
    pinned = copy.deepcopy(dict(pod))
    meta = pinned.setdefault("metadata", {})
    meta["uid"] = f"{meta.get('uid', '')}-pinned"
    meta["annotations"] = {**(meta.get("annotations") or {}), PIN: ",".join(gpus)}
    return pinned


def _replay(
    planner: Planner,
    answer: exact.Answer,
    waiting: Mapping[str, Mapping[str, Any]],
    objects: Mapping[str, dict[str, Any]],
) -> dict[str, Allocation] | None:
    """The answer tried on the copy through the scheduler's fit (the copy is left as
    it was): each placed pod's allocation, or None when any step does not fit."""
    journal: list[tuple[str, dict[str, Any]]] = []
    allocations: dict[str, Allocation] = {}
    try:
        for key in answer.evict:
            planner._delete(objects[key], journal)
        for key, (node, gpus) in answer.places.items():
            pod = waiting[key] if key in waiting else _replacement(objects[key])
            fit = planner.scheduler.filter(_pinned(pod, gpus), [node]).fits.get(node)
            if fit is None or fit.allocation is None or _gpus(fit.allocation) != gpus:
                return None
            planner._add(bound_pod(pod, fit.allocation, planner.manager, planner.clock()), journal)
            allocations[key] = fit.allocation
        return allocations
    except HamiError:
        return None
    finally:
        planner._undo(journal, 0)


def _carry_out(
    planner: Planner,
    answer: exact.Answer,
    waiting: Mapping[str, Mapping[str, Any]],
    objects: Mapping[str, dict[str, Any]],
    allocations: Mapping[str, Allocation],
) -> dict[str, Outcome]:
    """The replayed answer kept: the evictions spent, the pods placed and pinned. Each
    move is told for the first placed pending pod (queue order) that lands on a GPU it
    leaves, else on its node, else the first placed one."""
    placed = [key for key in waiting if key in answer.places]
    if not placed:  # nothing to make room for (the program evicts none then)
        return {}
    moves: dict[str, list[Move]] = {key: [] for key in placed}
    for key in answer.evict:
        original = objects[key]
        from_gpus = planner._gpus_held(original)
        from_node = str(original["spec"]["nodeName"])
        planner._evict(original)
        to_node, to_gpus = answer.places[key]
        lands = [p for p in placed if set(answer.places[p][1]) & set(from_gpus)]
        near = [p for p in placed if answer.places[p][0] == from_node]
        for_pod = (lands or near or placed)[0]
        moves[for_pod].append(
            Move(
                pod=key,
                priority=pod_priority(original),
                from_node=from_node,
                from_gpus=from_gpus,
                to_node=to_node,
                to_gpus=to_gpus,
                for_pod=for_pod,
            )
        )
    for key in placed:
        planner._place(waiting[key], allocations[key])
    for key in answer.evict:
        planner._place(_replacement(objects[key]), allocations[key])
    return {
        key: Outcome(
            pod=key,
            priority=pod_priority(waiting[key]),
            node=answer.places[key][0],
            gpus=answer.places[key][1],
            moves=tuple(moves[key]),
        )
        for key in placed
    }
