"""The planner: the fewest moves after which pending pods fit (docs/consolidation.md).

A *move* evicts a running pod and places its replacement by the scheduler's own fit
(``hami_core.scheduling.Scheduler.filter``: the same filter, device policy and node
score that place every pod; there is no second fit here). The planner works on a copy
of the cluster (a ``MemoryCluster``): pending pods are taken highest priority first
(then oldest); one that fits now is placed as the scheduler would place it; for one
that fits nowhere, the planner searches, node by node, the movable pods
(``movable.MovePolicy``) whose eviction lets it fit, and keeps the option with the
fewest moves whose evicted pods all fit elsewhere (or on other GPUs of the same node)
with the pending pod's room held for it.

The search is bounded, for plan time on large clusters:

- a node is a candidate only when the pending pod's every device request could fit
  there with all its movable pods gone (free memory, compute and sharer slots per
  device: a necessary condition; the fit decides);
- candidates are tried cheapest first by an estimate (per device, the fewest movable
  pods, largest first, whose removal frees the request; the cheapest devices' pods
  together), at most ``max_nodes`` of them, stopping once the best option found
  costs no more than the next estimate;
- on a node, the estimate's pods are evicted, the fit is asked, and each of them is
  then put back in turn while the pending pod still fits (so no move in an option is
  superfluous);
- no pod as large as the pending one (memory, GPUs) is proposed for eviction: it would
  need as much room elsewhere;
- an evicted pod that fits nowhere may get moves of its own (``MOVE_DEPTH`` deep, the
  fewest found, the room already found held from them); a pod placed or moved by the
  plan never moves again.

A plan never makes a pending pod of higher priority worse off: those are planned
first, their room is held in the copy before a lower one is considered, and a pod
placed for one is never evicted for another.

This module only plans. Carrying a plan out (evicting through the Eviction API, one
move at a time, re-planning after each, holding the freed room for the pod it was freed
for) is for the preemption room of ``hami_core.scheduling``: a ``Move`` names the
pod, its GPUs before and after and the pending pod it makes room for, which is what
that needs.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from hami_core.cluster.memory import MemoryCluster
from hami_core.errors import HamiError
from hami_core.facts.policy import device_policy_option, node_policy_option
from hami_core.facts.usage import PodHoldings
from hami_core.model import (
    MIG_PROFILE_INFO,
    Allocation,
    DevicePolicy,
    DevicePolicyChain,
    DeviceRequest,
    DeviceUsage,
    MigSlot,
    NodePolicy,
)
from hami_core.model.migusage import is_mig_gpu
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.scheduling.bind import allocation_annotations
from hami_core.scheduling.scheduler import Scheduler, utcnow

from . import exact
from .goal import GoalResult, WholeGpus, goal_pods
from .movable import MovePolicy, pod_key, pod_priority
from .room import DeviceFree, RoomIndex, shape_of

#: Nodes tried per pending pod that fits nowhere (cheapest estimate first).
DEFAULT_MAX_NODES = 16
#: Most moves planned for one pending pod.
DEFAULT_MAX_MOVES_PER_POD = 8
#: How deep moves may chain: an evicted pod that fits nowhere may get moves of its own.
MOVE_DEPTH = 2


@attrs.frozen(kw_only=True)
class GpuLoad:
    """What is held of one GPU: memory in MiB, compute in percent, sharers (containers)."""

    memory_mib: int
    cores_pct: int
    sharers: int

    @classmethod
    def of(cls, usage: DeviceUsage) -> GpuLoad:
        return cls(
            memory_mib=usage.used_memory_mib,
            cores_pct=usage.used_cores_pct,
            sharers=usage.used_count,
        )


@attrs.frozen(kw_only=True)
class GpuChange:
    """One GPU a plan touches: its load before the plan and after it."""

    node: str
    uuid: str
    memory_mib: int
    before: GpuLoad
    after: GpuLoad


@attrs.frozen(kw_only=True)
class Move:
    """One move: evict ``pod`` from ``from_gpus`` on ``from_node``; its replacement goes
    to ``to_gpus`` on ``to_node`` (a node may be the same one, other GPUs), to make room
    for the pending pod ``for_pod``."""

    pod: str
    priority: int
    from_node: str
    from_gpus: tuple[str, ...]
    to_node: str
    to_gpus: tuple[str, ...]
    for_pod: str


@attrs.frozen(kw_only=True)
class Outcome:
    """One pending pod in the plan.

    Attributes:
        pod: ``namespace/name``.
        priority: its ``spec.priority``.
        node, gpus: where it goes (None / () when no plan places it).
        moves: the moves made for it (none when it fits as the cluster is).
        reason: why no plan places it, "" when one does.
    """

    pod: str
    priority: int
    node: str | None = None
    gpus: tuple[str, ...] = ()
    moves: tuple[Move, ...] = ()
    reason: str = ""

    @property
    def placed(self) -> bool:
        return self.node is not None


@attrs.frozen(kw_only=True)
class Plan:
    """A plan: per pending pod its outcome, every move in order, and the GPUs touched.

    Attributes:
        outcomes: one per pending pod, in the order planned (priority, then age).
        gpus: every GPU whose load the plan changes, by node then uuid.
        seconds: planning time.
    """

    outcomes: tuple[Outcome, ...]
    gpus: tuple[GpuChange, ...]
    seconds: float
    #: what a goal plan (``Planner.plan_goal``) reached; None for a plan of pending pods
    goal: GoalResult | None = None

    @property
    def moves(self) -> tuple[Move, ...]:
        return tuple(m for o in self.outcomes for m in o.moves)


@attrs.frozen
class _Option:
    node: str
    allocation: Allocation
    moves: tuple[tuple[dict[str, Any], str, Allocation], ...]  # (original, node, allocation)


class Planner:
    """Plans moves on a copy of the cluster (the module docstring)."""

    def __init__(
        self,
        cluster: MemoryCluster,
        manager: BackendManager,
        policy: MovePolicy,
        *,
        node_policy: NodePolicy | None = None,
        device_policy: DevicePolicy | DevicePolicyChain | None = None,
        max_nodes: int = DEFAULT_MAX_NODES,
        max_moves_per_pod: int = DEFAULT_MAX_MOVES_PER_POD,
        exact_time_limit_s: float = exact.DEFAULT_TIME_LIMIT_S,
        clock: Callable[[], dt.datetime] = utcnow,
        scheduler: Scheduler | None = None,
    ) -> None:
        """Args:
        cluster: the copy to plan on (its nodes and bound pods); the planner changes it
            (after ``plan`` it holds the cluster as the plan leaves it).
        policy: who may move (``movable.MovePolicy``); its budgets are spent as planned.
        node_policy / device_policy: as the scheduler's (None: the configuration's).
        max_nodes / max_moves_per_pod: the search's bounds (module docstring).
        exact_time_limit_s: seconds the integer program (``exact``) may take per
            priority; 0: the search alone.
        scheduler: a scheduler already built over ``cluster`` to fit with (``hami
            explain`` shares its own: its state, every pod read, is built once); None:
            one is built here with ``node_policy``, ``device_policy`` and ``clock``.

        Raises:
            ValueError: ``scheduler`` reads another store than ``cluster``, or comes
                with a ``node_policy`` or ``device_policy`` it would not apply.
        """
        if scheduler is not None and (
            scheduler.store is not cluster or node_policy is not None or device_policy is not None
        ):
            raise ValueError("a shared scheduler must read `cluster` and brings its own policies")
        self.cluster = cluster
        self.manager = manager
        self.policy = policy
        self.max_nodes = max_nodes
        self.max_moves = max_moves_per_pod
        self.exact_time_limit_s = exact_time_limit_s
        self.clock = clock
        self.scheduler = scheduler or Scheduler(
            cluster, manager, clock=clock, node_policy=node_policy, device_policy=device_policy
        )
        self._pinned: set[str] = set()  # pods placed or moved by the plan
        self._busy: set[str] = set()  # pods placed by the option being tried
        # pod key -> the pod object as the copy holds it, kept as the planner changes it
        # (the store's own snapshots, read only: the planner replaces a pod, never
        # changes one; ``bound_pod`` makes a new object)
        self._objects = {pod_key(p): p for p in cluster.cached_pods()}
        self._fixed: dict[str, bool] = {}  # pod uid -> movable for the top priority
        # (node, its generation, priority, requests, budgets spent) -> ``_estimate``:
        # pending pods of one shape meet the same untouched nodes again and again
        self._estimates: dict[Any, list[str] | None] = {}
        # node -> how many times the planner changed it (keys the caches above and below)
        self._version: dict[str, int] = {}
        # node -> (version, per device (vendor, free MiB, free %, free slots, MiB, used MiB))
        self._free: dict[str, tuple[int, list[DeviceFree]]] = {}
        # per pod shape, the nodes with room for it (``_room_for``), kept by ``_touch``
        self._rooms = RoomIndex(self._free_of)
        # node -> (version, ``_view``)
        self._views: dict[
            str, tuple[int, tuple[dict[str, DeviceUsage], dict[str, PodHoldings]] | None]
        ] = {}
        # node -> its GPUs' loads before the plan first changed it
        self._before: dict[str, dict[str, tuple[int, GpuLoad]]] = {}

    # -- the plan --------------------------------------------------------------------

    def plan(self, pending: Iterable[Mapping[str, Any]]) -> Plan:
        """Plan for ``pending`` (Pod objects not bound to a node). Raises nothing for a
        pod that cannot be helped: its ``Outcome.reason`` says why."""
        t0 = time.perf_counter()
        order = sorted(pending, key=_queue_order)
        outcomes = self._plan_all(order)
        return Plan(
            outcomes=tuple(outcomes), gpus=self._changes(), seconds=time.perf_counter() - t0
        )

    def plan_goal(self, goal: WholeGpus) -> Plan:
        """Plan for ``goal`` (``goal.WholeGpus``: N whole free GPUs, of a model or any),
        pending pods left aside: the goal's pods (``goal.goal_pods``) are planned for as
        pending pods, then taken out of the copy, which is left with the GPUs they found
        whole and free. The outcomes are the goal pods' (``(goal)/whole-gpu-K``; a move's
        ``for_pod`` names one); ``Plan.goal`` says what was reached."""
        t0 = time.perf_counter()
        pods = goal_pods(goal, self.manager)
        outcomes = self._plan_all(sorted(pods, key=_queue_order))
        for pod in pods:
            placed = self._pod(pod_key(pod))
            if placed is not None:
                self._remove(placed)
        found = tuple((str(o.node), g) for o in outcomes if o.placed for g in o.gpus)
        result = GoalResult(
            goal=goal,
            free_before=sum(o.placed and not o.moves for o in outcomes),
            reached=len(found),
            gpus=found,
        )
        return Plan(
            outcomes=tuple(outcomes),
            gpus=self._changes(),
            seconds=time.perf_counter() - t0,
            goal=result,
        )

    def _changes(self) -> tuple[GpuChange, ...]:
        """Every GPU whose load the copy holds changed from before the plan."""
        changes: list[GpuChange] = []
        for node, before in sorted(self._before.items()):
            after = self._loads(node)
            changes.extend(
                GpuChange(node=node, uuid=uuid, memory_mib=total, before=load, after=after[uuid][1])
                for uuid, (total, load) in sorted(before.items())
                if after[uuid][1] != load
            )
        return tuple(changes)

    def _plan_all(self, order: Sequence[Mapping[str, Any]]) -> list[Outcome]:
        """Outcomes of ``order`` (queue order), one priority at a time, highest first:
        the pods that fit now are placed as the scheduler would place them; for the
        others, the integer program's answer (``exactplan``) when there is one, then
        the search for any it does not place."""
        outcomes: dict[str, Outcome] = {}
        level: list[Mapping[str, Any]] = []
        for i, pod in enumerate(order):
            level.append(pod)
            if i + 1 < len(order) and pod_priority(order[i + 1]) == pod_priority(pod):
                continue
            blocked = []
            for waiting in level:
                now = self._fit_now(waiting)
                if now is None:
                    blocked.append(waiting)
                else:
                    outcomes[pod_key(waiting)] = now
            if blocked and self.exact_time_limit_s:
                from .exactplan import plan_exactly  # it builds this module's moves

                outcomes.update(plan_exactly(self, blocked, pod_priority(pod)))
            for waiting in blocked:
                if pod_key(waiting) not in outcomes:
                    outcomes[pod_key(waiting)] = self._plan_moves(waiting)
            level = []
        return [outcomes[pod_key(pod)] for pod in order]

    def _fit_now(self, pod: Mapping[str, Any]) -> Outcome | None:
        """``pod``'s outcome when it needs no move (placed where the scheduler would
        place it, or it cannot be helped), None when it fits nowhere now."""
        key, priority = pod_key(pod), pod_priority(pod)
        try:
            request = self.scheduler.pod_request(pod)
            if not request.wants_devices:
                return Outcome(pod=key, priority=priority, reason="asks no managed device")
            now = self.scheduler.filter(pod, self._room_for(pod))
        except HamiError as exc:
            return Outcome(pod=key, priority=priority, reason=f"cannot be read: {exc}")
        best = now.best()
        if best is None:
            return None
        allocation = now.fits[best].allocation
        assert allocation is not None
        self._place(pod, allocation)
        return Outcome(pod=key, priority=priority, node=best, gpus=_gpus(allocation))

    def _plan_moves(self, pod: Mapping[str, Any]) -> Outcome:
        """``pod``'s outcome by the search (module docstring): it fits nowhere now."""
        key, priority = pod_key(pod), pod_priority(pod)
        option = self._search(pod, priority)
        if option is None:
            return Outcome(
                pod=key,
                priority=priority,
                reason="no movable pods whose moves let it fit "
                f"(at most {self.max_moves} moves, {self.max_nodes} nodes tried)",
            )
        moves = []
        for original, node, allocation in option.moves:
            from_gpus = self._gpus_held(original)
            self._evict(original)
            moves.append(
                Move(
                    pod=pod_key(original),
                    priority=pod_priority(original),
                    from_node=str(original["spec"]["nodeName"]),
                    from_gpus=from_gpus,
                    to_node=node,
                    to_gpus=_gpus(allocation),
                    for_pod=key,
                )
            )
        self._place(pod, option.allocation)
        for original, _, allocation in option.moves:
            self._place(_replacement(original), allocation)
        return Outcome(
            pod=key,
            priority=priority,
            node=option.node,
            gpus=_gpus(option.allocation),
            moves=tuple(moves),
        )

    # -- the search ------------------------------------------------------------------

    def _search(self, pod: Mapping[str, Any], priority: int) -> _Option | None:
        """The option with the fewest moves, within the bounds (module docstring)."""
        best: _Option | None = None
        for cost, name, evict in self._ranked(pod, priority):
            if best is not None and len(best.moves) <= cost:
                break
            option = self._try_node(pod, name, evict, priority)
            if option is not None and (best is None or len(option.moves) < len(best.moves)):
                best = option
        return best

    def _ranked(
        self, pod: Mapping[str, Any], priority: int
    ) -> list[tuple[int, str, list[dict[str, Any]]]]:
        """The candidate nodes for ``pod``, cheapest estimate first, at most
        ``max_nodes``: (estimated moves, node, the pods to evict there)."""
        request = self.scheduler.pod_request(pod)
        wants = [r for c in request.containers if not c.init for r in c.devices] or [
            r for c in request.containers for r in c.devices
        ]
        ranked: list[tuple[int, str, list[dict[str, Any]]]] = []
        spent = tuple(sorted(self.policy.spent.items()))
        for name in self.scheduler.state.node_names():
            key = (name, self._version.get(name, 0), priority, tuple(wants), spent)
            if key not in self._estimates:
                self._estimates[key] = self._estimate(name, wants, priority)
            estimate = self._estimates[key]
            if estimate is not None:
                objects = [self._objects[k] for k in estimate if k in self._objects]
                if len(objects) <= self.max_moves:
                    ranked.append((len(objects), name, objects))
        ranked.sort(key=lambda r: (r[0], r[1]))
        return ranked[: self.max_nodes]

    def _estimate(self, name: str, wants: Sequence[Any], priority: int) -> list[str] | None:
        """The movable pods of node ``name`` whose eviction would free every request of
        ``wants`` (a guess, largest pods first per device), or None when even all of them
        gone would not (memory, compute and sharer slots per device)."""
        view = self._view(name)
        if view is None:
            return None
        usage, held = view
        movable: dict[str, list[tuple[str, int, int]]] = {}  # uuid -> (pod key, MiB, cores)
        instances: dict[str, dict[str, tuple[MigSlot, ...]]] = {}  # uuid -> pod key -> slots
        sizes = [u.device.memory_mib for u in usage.values()] or [0]
        asked = sum(r.count * (r.memory_mib or max(sizes) * r.memory_pct // 100) for r in wants)
        widest = max(r.count for r in wants)
        for key, holdings in held.items():
            obj = self._pod(key)
            if obj is None or holdings.whole or not self._may_move(obj, priority):
                continue
            # a pod as large as the pending one would need as much room elsewhere
            big = sum(c.memory_mib for c in holdings.charges.values()) >= asked
            if big and len(holdings.charges) >= widest:
                continue
            for uuid, charge in holdings.charges.items():
                movable.setdefault(uuid, []).append((key, charge.memory_mib, charge.cores_pct))
                instances.setdefault(uuid, {})[key] = holdings.mig.get(uuid, ())
        chosen: list[str] = []
        for req in wants:
            options = []
            for u in usage.values():
                if u.device.vendor != req.vendor or u.cordoned:
                    continue
                if is_mig_gpu(u.device):
                    freed = mig_evictions(u, req, instances.get(u.device.uuid, {}))
                    if freed is not None:
                        options.append((len([k for k in freed if k not in chosen]), freed))
                    continue
                need_mem = req.memory_mib or u.device.memory_mib * req.memory_pct // 100
                pods = sorted(movable.get(u.device.uuid, ()), key=lambda p: (-p[1], -p[2], p[0]))
                free_mem, free_cores, free_slots = (
                    u.free_memory_mib,
                    u.free_cores_pct,
                    u.device.split_count - u.used_count,
                )
                taken: list[str] = []
                for key, mem, cores in pods:
                    if free_mem >= need_mem and free_cores >= req.cores_pct and free_slots >= 1:
                        break
                    if req.cores_pct == 100 or free_mem < need_mem or free_cores < req.cores_pct:
                        taken.append(key)
                        free_mem, free_cores, free_slots = (
                            free_mem + mem,
                            free_cores + cores,
                            free_slots + 1,
                        )
                    elif free_slots < 1:
                        taken.append(key)
                        free_slots += 1
                exclusive_ok = req.cores_pct < 100 or u.used_count == len(taken)
                if (
                    free_mem >= need_mem
                    and free_cores >= req.cores_pct
                    and free_slots >= 1
                    and exclusive_ok
                ):
                    options.append((len([k for k in taken if k not in chosen]), taken))
            if len(options) < req.count:
                return None
            options.sort(key=lambda o: o[0])
            for _, taken in options[: req.count]:
                chosen.extend(k for k in taken if k not in chosen)
        return chosen

    def _try_node(
        self, pod: Mapping[str, Any], name: str, evict: list[dict[str, Any]], priority: int
    ) -> _Option | None:
        """``_attempt`` on node ``name``; the copy is left as it was."""
        journal: list[tuple[str, dict[str, Any]]] = []
        try:
            found = self._attempt(pod, name, evict, priority, journal, MOVE_DEPTH)
            if found is None and exact.FILTERS & set(_annotations(pod)):
                # the estimate reads no filter of the pod (type, UUID, NUMA): with every
                # movable pod of the node gone and the unneeded put back, the fit decides
                self._undo(journal, 0)
                every = self._movable_on(name, priority)
                if len(every) > len(evict):
                    found = self._attempt(pod, name, every, priority, journal, MOVE_DEPTH)
            if found is None or not self._within_budgets([m[0] for m in found[1]]):
                return None
            return _Option(node=name, allocation=found[0], moves=tuple(found[1]))
        finally:
            self._undo(journal, 0)

    def _movable_on(self, name: str, priority: int) -> list[dict[str, Any]]:
        """Every pod of node ``name`` that may move for a pod of ``priority``."""
        view = self._view(name)
        if view is None:
            return []
        found = []
        for key, holdings in sorted(view[1].items()):
            obj = self._pod(key)
            if obj is not None and not holdings.whole and self._may_move(obj, priority):
                found.append(obj)
        return found

    def _attempt(
        self,
        pod: Mapping[str, Any],
        name: str,
        evict: list[dict[str, Any]],
        priority: int,
        journal: list[tuple[str, dict[str, Any]]],
        depth: int,
    ) -> tuple[Allocation, list[tuple[dict[str, Any], str, Allocation]]] | None:
        """Evict ``evict`` from node ``name``, keep only the evictions ``pod`` needs
        there, place it, then re-place the evicted: each where it fits, else (``depth``
        left) after moves of its own. Changes stay in ``journal`` for the caller to keep
        or undo. Returns (``pod``'s allocation, the moves), or None."""
        for obj in evict:
            self._delete(obj, journal)
        if not self._fits_on(pod, name):
            return None
        needed = list(evict)
        for obj in sorted(evict, key=_size):  # smallest back first: fewer moves
            self._add(obj, journal)
            if self._fits_on(pod, name):
                needed.remove(obj)
            else:
                self._delete(obj, journal)
        if not needed or not self._within_budgets(needed):
            return None
        fit = self.scheduler.filter(pod, [name]).fits.get(name)
        if fit is None or fit.allocation is None:
            return None
        self._add(bound_pod(pod, fit.allocation, self.manager, self.clock()), journal, busy=True)
        moves: list[tuple[dict[str, Any], str, Allocation]] = []
        for obj in sorted(needed, key=_size, reverse=True):  # largest first
            again = _replacement(obj)
            result = self.scheduler.filter(again, self._room_for(again))
            target = result.best()
            if target is not None:
                allocation = result.fits[target].allocation
                assert allocation is not None
                self._add(
                    bound_pod(again, allocation, self.manager, self.clock()), journal, busy=True
                )
            elif depth > 0:
                nested = self._nested(again, priority, journal, depth - 1)
                if nested is None:
                    return None
                target, allocation, more = nested  # placed there by ``_nested``
                moves.extend(more)
            else:
                return None
            moves.append((obj, target, allocation))
            if len(moves) > self.max_moves:
                return None
        return fit.allocation, moves

    def _nested(
        self,
        pod: Mapping[str, Any],
        priority: int,
        journal: list[tuple[str, dict[str, Any]]],
        depth: int,
    ) -> tuple[str, Allocation, list[tuple[dict[str, Any], str, Allocation]]] | None:
        """Room for an evicted pod that fits nowhere: the node where the fewest moves of
        other pods let it fit (cheapest estimate first), the pod placed there. Changes stay
        in ``journal``. Returns (node, allocation, the moves made for it), or None."""
        mark = len(journal)
        best: tuple[int, str, list[dict[str, Any]]] | None = None
        for _, name, evict in self._ranked(pod, priority):
            if best is not None and best[0] <= len(evict):
                break
            found = self._attempt(pod, name, evict, priority, journal, depth)
            self._undo(journal, mark)
            if found is not None and (best is None or len(found[1]) < best[0]):
                best = (len(found[1]), name, evict)
        if best is None:
            return None
        found = self._attempt(pod, best[1], best[2], priority, journal, depth)
        assert found is not None  # the same attempt on the same copy
        return best[1], found[0], found[1]

    def _undo(self, journal: list[tuple[str, dict[str, Any]]], mark: int) -> None:
        """Undo ``journal``'s changes after position ``mark``."""
        while len(journal) > mark:
            op, obj = journal.pop()
            if op == "busy":
                self._busy.discard(pod_key(obj))
            elif op == "add":
                self._remove(obj)
            else:
                self._put(obj)

    # -- the copy of the cluster -----------------------------------------------------

    def _room_for(self, pod: Mapping[str, Any]) -> list[str]:
        """The nodes where ``pod`` may fit as the cluster is (every device request has
        enough devices with the memory, compute and a sharer slot free: a necessary
        condition), fullest first, at most ``4 * max_nodes``: the fit and the node
        policy choose among them. Read from ``room.RoomIndex``: the nodes changed
        since the pod's shape was last asked about are read again, not every node."""
        wants = [r for c in self.scheduler.pod_request(pod).containers for r in c.devices]
        names = self.scheduler.state.node_names()
        return self._rooms.room(shape_of(wants), names, 4 * self.max_nodes)

    def _view(self, name: str) -> tuple[dict[str, DeviceUsage], dict[str, PodHoldings]] | None:
        """Node ``name``'s device usage and its pods' holdings (None: not in the state),
        read once until the planner changes the node."""
        version = self._version.get(name, 0)
        cached = self._views.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        state = self.scheduler.state
        with state.lock:
            node = state.node(name)
            view = (state.node_usage(name), dict(node.pods)) if node is not None else None
        self._views[name] = (version, view)
        return view

    def _free_of(self, name: str) -> list[DeviceFree]:
        """Per device of node ``name``: vendor, free MiB, free %, free sharer slots, its
        MiB, used MiB (cordoned devices left out); cached until the planner changes it."""
        version = self._version.get(name, 0)
        cached = self._free.get(name)
        if cached is not None and cached[0] == version:
            return cached[1]
        view = self._view(name)
        usage = view[0].values() if view is not None else ()
        devices = [
            (
                u.device.vendor,
                u.free_memory_mib,
                # a MIG GPU's compute is its instances' (the fit checks each profile's),
                # not the booked sum: seven 1g instances book 105 %
                100 if is_mig_gpu(u.device) else u.free_cores_pct,
                u.device.split_count - u.used_count,
                u.device.memory_mib,
                u.used_memory_mib,
            )
            for u in usage
            if not u.cordoned
        ]
        self._free[name] = (version, devices)
        return devices

    def _may_move(self, pod: Mapping[str, Any], priority: int) -> bool:
        """``MovePolicy.why_not`` is None; the rules that do not depend on the pending
        pod or the budgets spent are read once per pod."""
        if pod_key(pod) in self._pinned or pod_key(pod) in self._busy:
            return False
        uid = str(pod["metadata"].get("uid", ""))
        ever = self._fixed.get(uid)
        if ever is None:
            ever = self._fixed[uid] = (
                self.policy.why_not(pod, for_priority=pod_priority(pod)) is None
                or bool(self.policy.budgets)  # a budget's reason is not fixed
            )
        if not ever:
            return False
        if not self.policy.budgets:  # the one rule left: priority
            return pod_priority(pod) <= priority
        return self.policy.why_not(pod, for_priority=priority) is None

    def _within_budgets(self, pods: Sequence[Mapping[str, Any]]) -> bool:
        """Whether evicting all of ``pods`` stays within every disruption budget."""
        for pod in pods:
            self.policy.spend(pod)
        try:
            return all(
                b.allowed - self.policy.spent.get(b.key, 0) >= 0 for b in self.policy.budgets
            )
        finally:
            for pod in pods:
                self.policy.refund(pod)

    def _fits_on(self, pod: Mapping[str, Any], name: str) -> bool:
        return name in self.scheduler.filter(pod, [name]).feasible

    def _pod(self, key: str) -> dict[str, Any] | None:
        return self._objects.get(key)

    def _touch(self, obj: Mapping[str, Any]) -> None:
        """Note a change of ``obj``'s node (its loads before the first one kept)."""
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        if node not in self._before:
            self._before[node] = self._loads(node)
        self._version[node] = self._version.get(node, 0) + 1
        self._rooms.changed(node)

    def _remove(self, obj: Mapping[str, Any]) -> None:
        self._touch(obj)
        meta = obj["metadata"]
        self.cluster.delete_pod(meta["namespace"], meta["name"])
        self._objects.pop(pod_key(obj), None)

    def _put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self._touch(obj)
        stored = self.cluster.add_pod(obj)
        self._objects[pod_key(stored)] = stored
        return stored

    def _delete(self, obj: dict[str, Any], journal: list[tuple[str, dict[str, Any]]]) -> None:
        self._remove(obj)
        journal.append(("delete", obj))

    def _add(
        self, obj: dict[str, Any], journal: list[tuple[str, dict[str, Any]]], *, busy: bool = False
    ) -> None:
        """Put ``obj`` in the copy, noted in ``journal``; ``busy``: placed by the option
        being tried, so no nested search may move it."""
        journal.append(("add", self._put(obj)))
        if busy:
            self._busy.add(pod_key(obj))
            journal.append(("busy", obj))

    def _evict(self, original: Mapping[str, Any]) -> None:
        self.policy.spend(original)
        self._remove(original)

    def _place(self, pod: Mapping[str, Any], allocation: Allocation) -> None:
        bound = bound_pod(pod, allocation, self.manager, self.clock())
        if self._pod(pod_key(bound)) is not None:
            self._remove(bound)
        self._put(bound)
        self._pinned.add(pod_key(bound))

    def _gpus_held(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        """The GPUs ``pod`` holds now (as the scheduler's state reads its allocation)."""
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        state = self.scheduler.state
        with state.lock:
            ns = state.node(node)
            held = ns.pods.get(pod_key(pod)) if ns is not None else None
        return tuple(sorted(held.charges)) if held is not None else ()

    def _loads(self, node: str) -> dict[str, tuple[int, GpuLoad]]:
        """uuid -> (its MiB, its load) for the GPUs of ``node``."""
        with self.scheduler.state.lock:
            usage = self.scheduler.state.node_usage(node) if node else {}
        return {uuid: (u.device.memory_mib, GpuLoad.of(u)) for uuid, u in usage.items()}


def mig_evictions(
    usage: DeviceUsage, request: DeviceRequest, movable: Mapping[str, Sequence[MigSlot]]
) -> list[str] | None:
    """The fewest pods to evict from a GPU in ``mig`` mode for one instance of
    ``request`` to have a placement there, or None when no profile's placement can be
    freed (an instance of an unmovable pod overlaps each).

    Args:
        usage: the GPU's usage (``mig_in_use``: every instance held on it).
        request: one device's request: its memory (MiB or percent of the GPU), compute
            (percent) and, for ``nvidia.com/mig-<profile>``, the profile it names
            (``DeviceRequest.custom`` ``MIG_PROFILE_INFO``).
        movable: pod key -> the instances it holds on this GPU, for every pod on it that
            may move (a pod holding a share but no instance: an empty tuple).

    The profiles that may hold the request are the NVIDIA fit's (``hami_nvidia.mig``:
    the one it names, else memory and share of the SMs at least the request's); per
    profile placement, the pods whose instances overlap it go, and every holder without
    an instance (a GPU in ``mig`` mode takes no share beside instances). Exact for one
    instance on one GPU; the fit still decides (the planner tries the option through
    ``Scheduler.filter``), this only ranks and bounds the search. Booked memory and
    sharer slots follow from a free placement (a profile's placements never exceed
    them)."""
    dev = usage.device
    held = {s for slots in movable.values() for s in slots}
    fixed = [s.placement for s in usage.mig_in_use if s not in held]
    shares = sorted(k for k, slots in movable.items() if not slots)
    if usage.used_count - len(usage.mig_in_use) > len(shares):
        return None  # a share outside the instances that cannot move
    named = request.info(MIG_PROFILE_INFO)
    memory = 0 if named else request.memory_on(dev)
    best: list[str] | None = None
    for profile in dev.mig_profiles:
        if (named and profile.name != named) or profile.memory_mib < memory:
            continue
        if profile.cores_pct < request.cores_pct:
            continue
        for place in profile.placements:
            if any(place.overlaps(f) for f in fixed):
                continue
            out = [
                k
                for k, slots in sorted(movable.items())
                if any(place.overlaps(s.placement) for s in slots)
            ]
            if best is None or len(shares) + len(out) < len(best):
                best = shares + out
    return best


def policy_overrides(node_policy: str | None, gpu_policy: str | None) -> dict[str, Any]:
    """``Planner``'s ``node_policy`` / ``device_policy`` from the names ``--node-policy``
    and ``--gpu-policy`` take (None: the configuration's).

    Raises:
        InvalidInputError: an unknown policy name (the flag named).
    """
    return {
        "node_policy": node_policy_option(node_policy, "--node-policy") if node_policy else None,
        "device_policy": device_policy_option(gpu_policy, "--gpu-policy") if gpu_policy else None,
    }


def _queue_order(pod: Mapping[str, Any]) -> tuple[int, str, str]:
    """kube-scheduler's queue order: higher priority first, then older, then by key."""
    created = str((pod.get("metadata") or {}).get("creationTimestamp") or "")
    return (-pod_priority(pod), created, pod_key(pod))


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _gpus(allocation: Allocation) -> tuple[str, ...]:
    return tuple(sorted({d.uuid for d in allocation.all_devices()}))


def _size(pod: Mapping[str, Any]) -> tuple[int, str]:
    """A pod's size for ordering: its memory limits summed (MiB as written), then key."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or ():
        limits = (c.get("resources") or {}).get("limits") or {}
        for value in limits.values():
            try:
                total += int(str(value))
            except ValueError:
                continue
    return (total, pod_key(pod))


def _replacement(original: Mapping[str, Any]) -> dict[str, Any]:
    """The pod its controller creates after ``original`` is evicted, as pending: the
    same spec and labels, no node, no allocation (the planner keeps the name, so a move
    reads as the pod's). A new object: what differs (metadata, its annotations and
    labels, spec, status) is new; the rest (containers, owner references, ...) is
    ``original``'s, read-only as every pod object is here (the store copies what it
    keeps); ``original`` is left as it was."""
    meta = dict(original["metadata"])
    meta["uid"] = f"{meta.get('uid', '')}-moved"
    meta.pop("resourceVersion", None)
    annotations = meta.get("annotations") or {}
    meta["annotations"] = {k: v for k, v in annotations.items() if not _placement_key(k)}
    if meta.get("labels") is not None:
        meta["labels"] = {k: v for k, v in meta["labels"].items() if k != keys.VGPU_NODE}
    spec = {k: v for k, v in original["spec"].items() if k != "nodeName"}
    return {**original, "metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


def _placement_key(key: str) -> bool:
    """An annotation the scheduler or device plugin wrote for a placement."""
    return (
        key.startswith(("hami.io/vgpu-", "hami.io/bind-"))
        or "devices-to-allocate" in key
        or ("devices-allocated" in key)
    )


def bound_pod(
    pod: Mapping[str, Any], allocation: Allocation, manager: BackendManager, now: dt.datetime
) -> dict[str, Any]:
    """``pod`` bound to ``allocation.node`` with the annotations a bind writes, allocated.

    A new object: what a bind changes (metadata, its annotations and labels, spec,
    status) is new; the rest (containers, owner references, ...) is ``pod``'s, to be
    read only (a store copies what it keeps: ``MemoryCluster.add_pod``); ``pod`` is
    left as it was."""
    meta = dict(pod.get("metadata") or {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"uid-{pod_key({'metadata': meta})}")
    meta.pop("resourceVersion", None)
    written = allocation_annotations(allocation, manager, now)
    written[keys.BIND_PHASE] = keys.BIND_PHASE_SUCCESS
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        **{k: v for k, v in written.items() if v is not None},
    }
    meta["labels"] = {**(meta.get("labels") or {}), keys.VGPU_NODE: allocation.node}
    spec = {**(pod.get("spec") or {}), "nodeName": allocation.node}
    return {**pod, "metadata": meta, "spec": spec, "status": {"phase": "Running"}}
