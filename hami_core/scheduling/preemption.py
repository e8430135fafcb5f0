"""Which pods to evict so a pod that fits nowhere fits somewhere: slice-aware preemption.

kube-scheduler's PostFilter (``defaultpreemption``) cannot do it for our devices: they
are ``ignoredByScheduler``, so its dry run finds nothing to evict (it nominates a node
with zero victims) and kube-scheduler 1.20 never calls an extender's ``preemptVerb``.
``choose_victims`` is the dry run for slices, over the pod's ``PodCycle`` and the same
fit, quota check and held slices the filter uses:

- victims are pods of strictly lower priority (``spec.priority``, from a PriorityClass)
  holding a device of a vendor the preemptor asks for, on one node; lower-priority pods
  already being deleted are counted as gone and never chosen again (a terminating pod
  of equal or higher priority still holds its room: it is no one's to take);
- a node where evicting every such pod is not enough is no candidate;
- among candidates, kube-scheduler's order (``pickOneNodeForPreemption``), with the
  number of victims first: the fewest victims, then the lowest highest victim
  priority, then the lowest sum of priorities, then the fewest PodDisruptionBudget
  violations, then the node's name;
- the victim set is a smallest one (exact: sets are tried by size), so no victim's
  eviction frees nothing the preemptor needs: without any one of them it does not fit;
- the preemptor's namespace quota must hold with the victims' charges given back.

The search is bounded per node by what the pre-filter knows (``state.prefilter_miss``'s
rule: N open devices, each a free sharer slot and the memory): the fewest victims that
can open enough devices, a lower bound (``nodebounds``: a coarse one for every node, a
per-device one for the nodes that come first); nodes are visited by their best
possible answer and the search stops when no unvisited node can beat the best found. A node
whose sets of one size exceed ``max_fits_per_node`` fits falls back to kube-scheduler's
reprieve (every victim, then give back the highest priorities first while it still
fits: a set without a useless victim, not always the smallest); ``Choice.exact`` says
so. The whole decision has a budget too (``MAX_FITS_PER_DECISION`` fits over all nodes,
the search runs under ``state.lock``): past it the best found is the answer, not exact.

A pod asking one device with all its cores (``gpucores: 100``: the device alone, which
the pre-filter's rule does not see, so every half-used GPU looks open and the search
would fit every small set of every node) is not searched: each device's victims are all
its holders, ranked from the nodes' profiles and fitted best first (``_whole_devices``);
the winner is checked to need each of its victims, else the search runs as for any pod.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from hami_core.cluster.eviction import pdb_violations
from hami_core.facts.priority import pod_priority, terminating
from hami_core.facts.quota import NO_CHARGE, QuotaCharge, QuotaView
from hami_core.facts.usage import PodHoldings, usage_from_holdings
from hami_core.model import MIG_PROFILE_INFO, Allocation, DeviceRequest, DeviceUsage
from hami_core.protocol.pods import pod_ref

from .cycle import PodCycle
from .filtering import FilterEngine
from .nodebounds import coarse_asks, first_bound, node_bound, whole_device_ranks
from .openings import Openings, TooMany
from .sources import CachedNodes
from .state import ClusterState, NodeState

#: Fits tried on one node before its search falls back to the reprieve.
MAX_FITS_PER_NODE = 2048
#: Fits tried per decision, all nodes together (about 1-2 ms each: a second or two under
#: ``state.lock``, which every /filter waits on). Past it the search returns the best
#: candidate found (the node under way finishes with the reprieve when none was yet),
#: ``Choice.exact`` False.
MAX_FITS_PER_DECISION = 1024

#: ``namespaces -> PodDisruptionBudget objects`` in them (empty when unknown).
Budgets = Callable[[frozenset[str]], Sequence[Mapping[str, Any]]]

_NONE = -(2**31) - 1  # below any int32 priority: the "highest victim" of no victims


@attrs.frozen(kw_only=True)
class Victim:
    """A pod chosen for eviction.

    Attributes:
        pod: the Pod object (the state's snapshot).
        ref: ``namespace/name``.
        priority: its ``spec.priority``.
        held: what it holds on the node.
        quota: its quota charge.
    """

    pod: Mapping[str, Any] = attrs.field(eq=False, repr=False)
    ref: str
    priority: int
    held: PodHoldings = attrs.field(eq=False, repr=False)
    quota: QuotaCharge = attrs.field(eq=False, repr=False)

    @property
    def namespace(self) -> str:
        return str((self.pod.get("metadata") or {}).get("namespace") or "")


@attrs.frozen(kw_only=True)
class Candidate:
    """One node's answer: the victims to evict there and where the preemptor then goes.

    Attributes:
        node: the node name.
        victims: the pods to evict, lowest priority first.
        pdb_violations: how many of them a PodDisruptionBudget protects.
        allocation: the preemptor's placement once they are gone.
    """

    node: str
    victims: tuple[Victim, ...]
    pdb_violations: int
    allocation: Allocation = attrs.field(eq=False, repr=False)

    def rank(self) -> tuple[int, int, int, int, str]:
        """The order of choice (smaller wins), module docstring."""
        return (
            len(self.victims),
            max((v.priority for v in self.victims), default=_NONE),
            sum(v.priority for v in self.victims),
            self.pdb_violations,
            self.node,
        )


@attrs.frozen(kw_only=True)
class Choice:
    """The answer of ``choose_victims``.

    Attributes:
        candidate: the chosen node and victims, or None when no eviction makes room.
        reason: why none, or what the candidate frees (for events and ``--explain``).
        exact: False when a node's search fell back to the reprieve or the decision's
            fit budget ran out (see module doc).
        fits_tried: fits run, for the figures.
        bounds: nodes whose per-device bound (``nodebounds.node_bound``) was computed,
            for the figures: the nodes that could still win after the coarse one.
    """

    candidate: Candidate | None
    reason: str
    exact: bool = True
    fits_tried: int = 0
    bounds: int = 0


def _priorities(combo: Sequence[Victim]) -> tuple[int, int]:
    return (max((v.priority for v in combo), default=_NONE), sum(v.priority for v in combo))


@attrs.frozen
class _Coarse:
    node: NodeState  # a node ordered by ``coarse_bound`` alone so far


@attrs.define
class _Node:
    state: NodeState
    base: list[PodHoldings]  # what stays whatever is evicted (and held slices)
    victims: list[Victim]  # lower-priority holders, lowest priority first
    bound: float  # the fewest victims that can open enough devices
    openings: Openings | None = None  # the victim sets that can (``openings``)
    optimistic: tuple[float, int, int, int, str] = (0.0, 0, 0, 0, "")


def _device_bound(
    u: DeviceUsage, mine: Iterable[tuple[int, int]], need_mib: int, *, sharing: bool
) -> float:
    """The fewest of the holders ``mine`` (``(slots, MiB)`` each) to evict so that ``u``
    has a free sharer slot and ``need_mib`` free (the pre-filter's test), or inf."""
    if not u.device.healthy or u.cordoned:
        return math.inf
    if sharing:
        return 0.0
    held = list(mine)
    fewest = 0
    for deficit, part in (
        (need_mib - u.free_memory_mib, 1),
        (u.used_count - u.device.split_count + 1, 0),
    ):
        if deficit <= 0:
            continue
        amounts = sorted((h[part] for h in held), reverse=True)
        total = 0
        for n, amount in enumerate(amounts, 1):
            total += amount
            if total >= deficit:
                fewest = max(fewest, n)
                break
        else:
            return math.inf
    return float(fewest)


def _bound(cycle: PodCycle, usage: Mapping[str, DeviceUsage], victims: Sequence[Victim]) -> float:
    """A lower bound on the victims the preemptor needs on this node: per device
    request, the ``count``-th smallest per-device bound (each of ``count`` devices needs
    its own; a victim may hold several, so the largest, not the sum)."""
    per_device: dict[str, list[tuple[int, int]]] = {}
    for v in victims:
        for uuid, charge in v.held.charges.items():
            per_device.setdefault(uuid, []).append((charge.count, charge.memory_mib))
        for uuid in v.held.whole:
            u = usage.get(uuid)
            if u is not None:
                per_device.setdefault(uuid, []).append((u.device.split_count, u.device.memory_mib))
    bound = 0.0
    for container in cycle.request.containers:
        for req in container.devices:
            devices = [u for u in usage.values() if u.device.vendor == req.vendor]
            sharing = bool(req.info(MIG_PROFILE_INFO)) or any(
                u.device.mode == "mig" and u.device.split_count > 1 for u in devices
            )
            need = req.memory_mib or 1
            each = sorted(
                _device_bound(u, per_device.get(u.device.uuid, ()), need, sharing=sharing)
                for u in devices
            )
            wanted = 1 if sharing else req.count
            if len(each) < wanted:
                return math.inf
            bound = max(bound, each[wanted - 1])
    return bound


class _Search:
    def __init__(
        self,
        engine: FilterEngine,
        cycle: PodCycle,
        budgets: Budgets,
        *,
        max_fits_per_node: int,
        max_fits: int = MAX_FITS_PER_DECISION,
    ) -> None:
        self.engine = engine
        self.cycle = cycle
        self.budgets = budgets
        self.max_fits = max_fits_per_node
        self.budget = max_fits
        self.fits = 0
        self.bounds = 0
        self.visits = 0
        self.exact = True
        self._pdbs: dict[frozenset[str], Sequence[Mapping[str, Any]]] = {}

    def fit(self, node: _Node, evicted: Sequence[Victim]) -> Allocation | None:
        """Where the preemptor goes on ``node`` once ``evicted`` are gone, or None."""
        self.fits += 1
        gone = {id(v) for v in evicted}
        stay = [v.held for v in node.victims if id(v) not in gone]
        usage = usage_from_holdings(node.state.info, [*node.base, *stay])
        try:
            fit, _, charge = self.engine.fit_one(self.cycle, node.state, usage)
        except Exception:  # one node's garbage (or a backend's) fails that node alone
            return None
        if fit.allocation is None:
            return None
        quota = self.cycle.quota
        if quota:
            namespace = self.cycle.request.namespace
            back = NO_CHARGE
            for v in evicted:
                if (v.pod.get("metadata") or {}).get("namespace") == namespace:
                    back = back.plus(v.quota)
            if QuotaView(quota.limits, quota.used.minus(back)).violation(charge):
                return None
        return fit.allocation

    def violations(self, victims: Sequence[Victim]) -> int:
        if not victims:
            return 0
        namespaces = frozenset(
            str((v.pod.get("metadata") or {}).get("namespace") or "") for v in victims
        )
        if namespaces not in self._pdbs:
            self._pdbs[namespaces] = list(self.budgets(namespaces))
        return pdb_violations((v.pod for v in victims), self._pdbs[namespaces])

    def best_on(self, node: _Node, best: Candidate | None) -> Candidate | None:
        """The best candidate on ``node`` better than ``best``, or None: sets tried by
        size from the node's bound, the unions of minimal opening sets first
        (``openings``), every subset passing the cheap opening test once the fit has
        refused such a union (a policy beyond the pre-filter's rule)."""
        everything = node.victims
        openings = node.openings
        allocation: Allocation | None = None
        if openings is None:  # without the structure, a cheap way out first
            allocation = self.fit(node, everything)
            if allocation is None:
                return None  # evicting every lower-priority pod is not enough here
        refused = False
        for size in range(int(node.bound), len(everything) + 1):
            if best is not None and size > best.rank()[0]:
                return None
            if openings is not None and not refused:
                try:
                    unions = openings.unions(size)
                except TooMany:
                    openings = None
                else:
                    combos = [tuple(everything[i] for i in sorted(u)) for u in unions]
                    combos.sort(key=_priorities)
                    try:
                        found, refused = self._best_of(
                            node, combos, best, allocation, cap=self._left()
                        )
                    except TooMany:
                        self.exact = False
                        return self._reprieve(node, best)
                    if found is not None:
                        return found
                    if not refused:
                        continue  # no set of this size opens enough devices
            combos_iter: Iterable[tuple[Victim, ...]] = itertools.combinations(everything, size)
            if openings is not None:
                test = openings
                index = {id(v): i for i, v in enumerate(everything)}
                combos_iter = (
                    c
                    for c in combos_iter
                    if test.opened(frozenset(index[id(v)] for v in c)) >= test.count
                )
            try:
                found, _ = self._best_of(
                    node, combos_iter, best, allocation, cap=min(self.max_fits, self._left())
                )
            except TooMany:
                self.exact = False
                return self._reprieve(node, best)
            if found is not None:
                return found
        return None

    def _left(self) -> int:
        """Fits left of the decision's budget (at least one: a node under way ends)."""
        return max(1, self.budget - self.fits)

    def spent(self) -> bool:
        """Whether the decision's fit budget is spent (the search then stops, inexact)."""
        return self.fits >= self.budget

    def _best_of(
        self,
        node: _Node,
        combos: Iterable[tuple[Victim, ...]],
        best: Candidate | None,
        allocation: Allocation | None,
        *,
        cap: int | None = None,
    ) -> tuple[Candidate | None, bool]:
        """The best of ``combos`` (one size) on ``node`` that beats ``best``, and whether
        the fit refused any of them. Raises ``TooMany`` past ``cap`` fits (or 100 x
        ``cap`` sets looked at)."""
        found: Candidate | None = None
        refused = False
        tried = looked = 0
        everything = len(node.victims)
        for combo in combos:
            looked += 1
            if cap is not None and (tried >= cap or looked > 100 * cap):
                raise TooMany
            size = len(combo)
            prio = (
                size,
                max((v.priority for v in combo), default=_NONE),
                sum(v.priority for v in combo),
            )
            bar = found if found is not None else best
            if bar is not None and (*prio, 0, node.state.name) >= bar.rank():
                continue
            placed = (
                allocation
                if size == everything and allocation is not None
                else self.fit(node, combo)
            )
            tried += 1
            if placed is None:
                refused = True
                continue
            cand = Candidate(
                node=node.state.name,
                victims=tuple(combo),
                pdb_violations=self.violations(combo),
                allocation=placed,
            )
            if bar is None or cand.rank() < bar.rank():
                found = cand
        return found, refused

    def _reprieve(self, node: _Node, best: Candidate | None) -> Candidate | None:
        """kube-scheduler's ``selectVictimsOnNode``: every victim, then give back the
        highest priorities first (PDB-protected ones before others) while it still fits."""
        kept: list[Victim] = list(node.victims)
        pdbs = self.violations
        order = sorted(node.victims, key=lambda v: (-pdbs([v]), -v.priority, v.ref))
        for v in order:
            trial = [x for x in kept if x is not v]
            if self.fit(node, trial) is not None:
                kept = trial
        placed = self.fit(node, kept)
        if placed is None:
            return None
        cand = Candidate(
            node=node.state.name,
            victims=tuple(kept),
            pdb_violations=self.violations(kept),
            allocation=placed,
        )
        return cand if best is None or cand.rank() < best.rank() else None


def choose_victims(
    state: ClusterState,
    engine: FilterEngine,
    cycle: PodCycle,
    names: Iterable[str],
    *,
    selector: Mapping[str, str] | None = None,
    budgets: Budgets = lambda namespaces: (),
    max_fits_per_node: int = MAX_FITS_PER_NODE,
    max_fits: int = MAX_FITS_PER_DECISION,
) -> Choice:
    """The victims whose eviction lets ``cycle``'s pod fit on one of ``names`` (module
    docstring for the rules and the order of choice).

    Args:
        state / engine: the scheduler's; read under ``state.lock`` (taken here).
        cycle: the preemptor's ``PodCycle`` (``Scheduler.cycle``), asking managed devices.
        names: the nodes kube-scheduler's own filters passed (its say on affinity,
            taints, CPU and memory stays).
        selector: ``--node-label-selector``.
        budgets: the PodDisruptionBudgets of the victims' namespaces.
        max_fits_per_node: the exact search's budget per node and set size.
        max_fits: the decision's budget, fits over all nodes (``MAX_FITS_PER_DECISION``).

    Returns:
        A ``Choice``; never raises for "no room".
    """
    mine = pod_priority(cycle.pod)
    search = _Search(engine, cycle, budgets, max_fits_per_node=max_fits_per_node, max_fits=max_fits)
    with state.lock:
        source = CachedNodes(state, list(names), selector or {})
        now = engine.clock()
        best: Candidate | None = None
        whole = whole_card(cycle)
        sound = True
        if whole is not None:
            best, sound = _whole_devices(state, engine, cycle, search, source, now, whole)
            if not sound:
                best = None  # the shortcut's premise failed: search as for any pod
        if whole is None or (best is None and not sound):
            best = _search_nodes(state, engine, cycle, search, source, now)
    if best is None:
        return Choice(
            candidate=None,
            reason=f"no eviction of lower-priority pods (priority < {mine}) makes room "
            f"on any of {len(source.names)} node(s)",
            exact=search.exact,
            fits_tried=search.fits,
            bounds=search.bounds,
        )
    return Choice(
        candidate=best,
        reason=describe_candidate(best),
        exact=search.exact,
        fits_tried=search.fits,
        bounds=search.bounds,
    )


def _search_nodes(
    state: ClusterState,
    engine: FilterEngine,
    cycle: PodCycle,
    search: _Search,
    source: CachedNodes,
    now: datetime,
) -> Candidate | None:
    """The search over every node by its bound (module docstring). Call under the lock."""
    mine = pod_priority(cycle.pod)
    requests = [d for c in cycle.request.containers for d in c.devices]
    vendors = set(cycle.request.vendors)
    # Every node gets the coarse bound of its cached profile; a node that comes
    # first gets its per-device bound (``node_bound``), then is prepared (its
    # victims, openings), then refined (the smallest unions and their priorities),
    # then searched; none is once no node left can beat the best found, or once the
    # decision's fit budget is spent.
    heap: list[tuple[tuple[float, int, int, int, str], int, Any]] = []
    asks = coarse_asks(requests)
    for name in source.names:
        node = source.node(name, now)
        if isinstance(node, str):
            continue
        per_device, bound = first_bound(state, node, asks, mine)
        if bound is None:
            continue  # no eviction opens enough devices there
        k, top, summed = bound
        key = (float(k), top if k else _NONE, summed, 0, name)
        heap.append((key, len(heap), node if per_device else _Coarse(node)))
    heapq.heapify(heap)
    seq = len(heap)
    best: Candidate | None = None
    while heap:
        key, _, item = heapq.heappop(heap)
        search.visits += 1
        if best is not None and key >= best.rank():
            break  # no node left can beat it
        if best is not None and search.spent():
            search.exact = False
            break
        if isinstance(item, _Coarse):
            quick = node_bound(state, item.node, requests, mine, asks=asks)
            search.bounds += 1
            if quick is not None:
                k, top, summed = quick
                per_node = (float(k), top if k else _NONE, summed, 0, item.node.name)
                heapq.heappush(heap, (max(key, per_node), seq, item.node))
                seq += 1
            continue
        if isinstance(item, NodeState):
            entry = _prepare(state, engine, cycle, item, mine=mine, vendors=vendors)
            if entry is None:
                continue
            sharper = _refine(entry) if entry.openings is not None else entry.optimistic
            if sharper is not None:
                heapq.heappush(heap, (max(key, sharper), seq, entry))
                seq += 1
            continue
        found = search.best_on(item, best)
        if found is not None and (best is None or found.rank() < best.rank()):
            best = found
    return best


def whole_card(cycle: PodCycle) -> DeviceRequest | None:
    """The pod's request when it asks one device with all its cores (``gpucores: 100``:
    the device alone, HAMi's exclusivity), else None."""
    requests = [d for c in cycle.request.containers for d in c.devices]
    if len(requests) != 1:
        return None
    (req,) = requests
    if req.count != 1 or req.cores_pct != 100 or req.info(MIG_PROFILE_INFO):
        return None
    return req


def _whole_devices(
    state: ClusterState,
    engine: FilterEngine,
    cycle: PodCycle,
    search: _Search,
    source: CachedNodes,
    now: datetime,
    req: DeviceRequest,
) -> tuple[Candidate | None, bool]:
    """The best candidate for a whole-card pod (``whole_card``) without a search: it goes
    on one device and takes it alone, so a device's victims are all its holders, and a
    device with any holder that is not a victim (of the pod's priority or more, slices
    held for a pod not bound yet) is none. Every usable device's set is ranked from the
    node's profile (``nodebounds.whole_device_ranks``: no fit, remembered until the node
    changes); sets are then fitted best first until no set left can beat the best.

    Returns ``(best, sound)``: ``sound`` False when the premise failed, and the caller
    searches instead: a device of the vendor has other than 100 cores (``devcore``) or
    is in ``mig`` mode (cores 100 then asks 100 free, not the device alone), the winner's fit still holds without one of its victims (the
    vendor does not give cores 100 the device alone), or a set was refused while the
    pod's quota counts (a victim elsewhere could give back what it needs; without a
    quota a refused set means the device cannot take the pod at all). Call under the
    state lock."""
    mine = pod_priority(cycle.pod)
    vendors = {req.vendor}
    heap: list[tuple[tuple[int, int, int, str, str], bool]] = []
    nodes: dict[str, NodeState] = {}
    for name in source.names:
        node = source.node(name, now)
        if isinstance(node, str):
            continue
        if any(
            d.vendor == req.vendor and (d.cores_pct != 100 or d.mode == "mig")
            for d in node.info.devices
        ):
            return None, False  # cores 100 is the device alone only on a device of 100
        nodes[name] = node
        for k, top, summed, uuid in whole_device_ranks(state, node, req.vendor, mine):
            heap.append(((k, top, summed, name, uuid), False))
    heapq.heapify(heap)
    prepared: dict[str, _Node | None] = {}
    best: Candidate | None = None
    refused = False
    while heap:
        (k, top, summed, name, uuid), exact_key = heapq.heappop(heap)
        if best is not None and (k, top, summed, 0, name) >= best.rank():
            break  # ordered: no set left can beat it
        if best is not None and search.spent():
            search.exact = False
            break
        if name not in prepared:
            prepared[name] = _prepare(
                state, engine, cycle, nodes[name], mine=mine, vendors=vendors, openings=False
            )
        entry = prepared[name]
        if entry is None:
            continue
        if not exact_key:  # the profile's reading; the node's own may hold more (held slices)
            if any(uuid in h.charges or uuid in h.whole for h in entry.base):
                continue
            on = _on_device(entry, uuid)
            prios = [v.priority for v in on]
            real = (len(on), max(prios, default=_NONE), sum(prios), name, uuid)
            if real != (k, top, summed, name, uuid):
                heapq.heappush(heap, (real, True))
                continue
        on = _on_device(entry, uuid)
        placed = search.fit(entry, on)
        if placed is None:
            refused = True
            continue
        cand = Candidate(
            node=name, victims=on, pdb_violations=search.violations(on), allocation=placed
        )
        if best is None or cand.rank() < best.rank():
            best = cand
    if best is None:
        return None, not (refused and cycle.quota)
    if refused and cycle.quota:
        return None, False
    winner = prepared[best.node]
    assert winner is not None
    for v in best.victims:  # the premise: without any one victim it does not fit
        if search.fit(winner, [x for x in best.victims if x is not v]) is not None:
            return None, False
    return best, True


def _on_device(entry: _Node, uuid: str) -> tuple[Victim, ...]:
    return tuple(v for v in entry.victims if uuid in v.held.charges or uuid in v.held.whole)


def _prepare(
    state: ClusterState,
    engine: FilterEngine,
    cycle: PodCycle,
    node: NodeState,
    *,
    mine: int,
    vendors: set[str],
    openings: bool = True,
) -> _Node | None:
    """The node's victims (lower priority, holding a device of a vendor the pod asks),
    what stays, its bound and openings; None when no eviction can open enough devices.
    Call under the state lock."""
    uid = cycle.request.uid
    requests = [d for c in cycle.request.containers for d in c.devices]
    ours = {d.uuid for d in node.info.devices if d.vendor in vendors}
    base: list[PodHoldings] = []
    victims: list[Victim] = []
    for pod, held, quota in state.holders(node):
        if pod is None:
            base.append(held)  # slices held for a pod not bound yet: never a victim
            continue
        if (pod.get("metadata") or {}).get("uid") == uid:
            continue  # its own share (a re-fit)
        prio = pod_priority(pod)
        if prio < mine and terminating(pod):
            continue  # a lower pod already leaving (evicted before): its room is coming
        touches = ours.intersection(held.charges) or ours.intersection(held.whole)
        if prio < mine and touches:
            victims.append(Victim(pod=pod, ref=pod_ref(pod), priority=prio, held=held, quota=quota))
        else:
            base.append(held)
    extra = engine.held.holdings(cycle, node) if engine.held is not None else []
    base.extend(extra)
    victims.sort(key=lambda v: (v.priority, v.ref))
    assert node.usage is not None
    if extra or len(base) + len(victims) != len(node.pods):  # not the node's own usage
        current = usage_from_holdings(node.info, [*base, *(v.held for v in victims)])
    else:
        current = node.usage
    bound = _bound(cycle, current, victims)
    opened: Openings | None = None
    try:
        if openings:
            opened = Openings.of(requests, current, [_slots(v, current) for v in victims])
    except TooMany:
        opened = None
    if math.isinf(bound) or (opened is not None and not opened.possible):
        return None
    k = int(bound)
    if k > len(victims):
        return None
    prios = [v.priority for v in victims]
    entry = _Node(state=node, base=base, victims=victims, bound=bound, openings=opened)
    entry.optimistic = (bound, prios[k - 1] if k else _NONE, sum(prios[:k]), 0, node.name)
    return entry


def _refine(entry: _Node) -> tuple[float, int, int, int, str] | None:
    """The node's best possible rank from its openings: the smallest union size and the
    best priorities among unions of that size (``entry.bound`` raised to it); None when
    no union exists. An openings structure too large to list is dropped (the node is
    then searched by subsets from its bound)."""
    openings = entry.openings
    assert openings is not None
    try:
        for size in range(int(entry.bound), len(entry.victims) + 1):
            unions = openings.unions(size)
            if unions:
                entry.bound = float(size)
                prio = min(_priorities([entry.victims[i] for i in u]) for u in unions)
                return (float(size), *prio, 0, entry.state.name)
    except TooMany:
        entry.openings = None
        return entry.optimistic
    return None


def _slots(victim: Victim, usage: Mapping[str, DeviceUsage]) -> dict[str, tuple[int, int]]:
    """uuid -> ``(slots, MiB)`` ``victim`` holds there (a device held whole: all of it)."""
    out = {u: (c.count, c.memory_mib) for u, c in victim.held.charges.items()}
    for uuid in victim.held.whole:
        u = usage.get(uuid)
        if u is not None:
            out[uuid] = (u.device.split_count, u.device.memory_mib)
    return out


def describe_candidate(candidate: Candidate) -> str:
    """``node n1: evict ns/a (priority 0), ns/b (priority 10)`` for events and logs."""
    if not candidate.victims:
        return f"node {candidate.node}: room being freed already (no new victim)"
    who = ", ".join(f"{v.ref} (priority {v.priority})" for v in candidate.victims)
    return f"node {candidate.node}: evict {who}"


__all__ = [
    "MAX_FITS_PER_DECISION",
    "MAX_FITS_PER_NODE",
    "Budgets",
    "Candidate",
    "Choice",
    "Victim",
    "choose_victims",
    "describe_candidate",
    "whole_card",
]
