"""The filter engine: one pod's cycle judged on every node of a node source.

Per node, in this order (kube-scheduler's Filter stage, then our quota check):

1. the source's say: not in the cache, not selected, unreadable (``sources``);
2. a node judged from a given object, one where the pod already holds a share (a
   re-fit at bind: its own share left out), or one where slices are held for pods
   before it (``held``: nominated pods of equal or higher priority), is fitted on its
   own against that usage;
3. else the node's memo of answers by pod shape (``PodCycle.shape``);
4. else the O(1) pre-filter from the node's free-device summary (``state.prefilter_miss``);
5. else the node is cold: every cold node is fitted in one batch per container
   (``fitting.fit_pod_nodes``), once per class of identical nodes when the backends
   allow (``nodeclass``), and memoised;
6. a node that fits is failed when the pod's charge there (``quota.allocation_charge``)
   violates its namespace's quota (``PodCycle.quota``; not on a given node).

One node's garbage never fails the request: it is marked unusable alone.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from hami_core.facts.holdings import ProblemLog
from hami_core.facts.policy import Policies
from hami_core.facts.quota import NO_CHARGE, QuotaCharge, allocation_charge
from hami_core.facts.usage import usage_from_holdings
from hami_core.model import DeviceUsage, ReasonCode
from hami_core.plugin import BackendManager

from .cycle import PodCycle
from .fitting import ContainerMiss, NodeFit, fit_pod, fit_pod_nodes
from .held import CycleOf, HeldSlices
from .nodeclass import LazyFits, SharedFit, Unshareable, mentions, relabel
from .scoring import node_score
from .sources import NodeSource
from .state import MEMO_PER_NODE, ClusterState, NodeState, prefilter_miss

log = logging.getLogger(__name__)

#: A node's answer for one pod shape: its fit (or another node's of its class, relabelled
#: when read), its 0..100 score and the pod's quota charge there.
Entry = tuple[NodeFit | SharedFit, float, QuotaCharge]


@attrs.frozen(kw_only=True)
class FilterResult:
    """The answer of a filter.

    Attributes:
        feasible: names of nodes that can take the pod, in input order.
        failed: node name -> reason (``"1/1 CardInsufficientMemory"``).
        fits: node name -> ``NodeFit`` (placements and details, for explanations).
        scores: node name -> 0..100 score of the feasible nodes under the node policy.
        policies: the policies applied.
    """

    feasible: tuple[str, ...]
    failed: Mapping[str, str]
    fits: Mapping[str, NodeFit]
    scores: Mapping[str, float]
    policies: Policies

    def best(self) -> str | None:
        """The highest-scored feasible node; ties go to the smallest name."""
        if not self.feasible:
            return None
        return min(self.feasible, key=lambda n: (-self.scores.get(n, 0.0), n))


def passing(cycle: PodCycle, names: Iterable[str]) -> FilterResult:
    """Every node feasible: a pod asking no managed device is not ours to judge, even
    on nodes we have not seen."""
    return FilterResult(
        feasible=tuple(names), failed={}, fits={}, scores={}, policies=cycle.policies
    )


def unusable(name: str, exc: Exception) -> str:
    """The wire reason of a node whose objects could not be read or fitted."""
    log.warning("node %s is unusable: %s: %s", name, type(exc).__name__, exc)
    return f"{ReasonCode.NODE_UNREGISTERED.value} (cannot read node: {type(exc).__name__})"


def _memo(node: NodeState, key: int, entry: Entry) -> Entry:
    if len(node.memo) >= MEMO_PER_NODE:  # forget the oldest shape
        del node.memo[next(iter(node.memo))]
    node.memo[key] = entry
    return entry


class FilterEngine:
    """Judges a pod's cycle on the nodes of a ``NodeSource`` (module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        manager: BackendManager,
        *,
        clock: Callable[[], dt.datetime],
        problems: ProblemLog,
        prefilter: bool = True,
        share_fits: bool = True,
    ) -> None:
        """Args:
        clock: now, for the handshake staleness of cached nodes.
        problems: where unreadable allocations met in the state are logged.
        prefilter / share_fits: as ``Scheduler``'s.
        """
        self.state = state
        self.manager = manager
        self.clock = clock
        self.problems = problems
        self.use_prefilter = prefilter
        #: Slices held for pods not bound yet (``held.HeldSlices``), set by ``Scheduler``.
        self.held: HeldSlices | None = None
        self.share_fits = share_fits
        #: The vendors whose backends declare ``BackendInfo.fit_by_node_class``.
        self.by_class = {
            t.vendor
            for info in manager.infos.values()
            if info.fit_by_node_class
            for t in info.device_types
        }

    def run(self, cycle: PodCycle, source: NodeSource) -> FilterResult:
        """The pod's answer on every node of ``source``, in its order. Call under the
        state lock (``ClusterState.lock``), with a cycle asking managed devices."""
        key = cycle.shape
        now = self.clock()
        failed: dict[str, str] = {}
        given: set[str] = set()
        entries: dict[str, Entry] = {}
        cold: list[NodeState] = []  # nodes whose fit for this shape is not known
        held = self.held is not None and self.held.active()
        for name in source.names:
            try:
                node = source.node(name, now)
                if isinstance(node, str):
                    failed[name] = node
                elif source.given(name):
                    given.add(name)
                    assert node.usage is not None
                    entries[name] = self._fit(cycle, node, node.usage)
                elif (usage := self.usage(cycle, node, held=held)) is not None:
                    entries[name] = self._fit(cycle, node, usage)  # re-fit, or room held
                elif key in node.memo:
                    entries[name] = node.memo[key]
                else:
                    missed = self._prefiltered(cycle, node) if self.use_prefilter else None
                    if missed is None:
                        cold.append(node)
                    else:
                        entries[name] = _memo(node, key, missed)
            except Exception as exc:  # one node's garbage never fails the whole request
                failed[name] = unusable(name, exc)
        if cold:
            entries.update(self._fit_by_class(cycle, cold))
        feasible: list[str] = []
        fits: dict[str, NodeFit | SharedFit] = {}
        scores: dict[str, float] = {}
        for name in source.names:
            entry = entries.get(name)
            if entry is None:
                continue
            fit, score, charge = entry
            placed = fit.placed if isinstance(fit, SharedFit) else fit.allocation is not None
            if placed and cycle.quota and name not in given:
                message = cycle.quota.violation(charge)
                if message:
                    placed = False
                    fit = NodeFit(
                        node=name,
                        reason=f"{ReasonCode.RESOURCE_QUOTA_NOT_FIT.value} ({message})",
                    )
            fits[name] = fit
            if placed:
                feasible.append(name)
                scores[name] = score
            else:
                failed[name] = fit.reason
        self.problems.drain(self.state.problems)
        return FilterResult(
            feasible=tuple(feasible),
            failed=failed,
            fits=LazyFits(fits),
            scores=scores,
            policies=cycle.policies,
        )

    def hold_nominated(self, *, cycle_of: CycleOf) -> HeldSlices:
        """Count pods nominated to a node as holding their slices there for the pods
        they outrank (``held.HeldSlices``, fitted by this engine); ``cycle_of`` is the
        scheduler's PreFilter."""
        self.held = HeldSlices.over(self, cycle_of=cycle_of)
        return self.held

    def usage(
        self, cycle: PodCycle, node: NodeState, *, held: bool = True
    ) -> dict[str, DeviceUsage] | None:
        """The usage ``cycle``'s pod is fitted against on ``node`` when it is not the
        node's own (then None, and the node's memo serves): its own share left out (a
        re-fit at bind) and the slices held there for pods before it
        (``held.HeldSlices``: nominated pods of equal or higher priority). Call under
        the state lock with ``node`` from ``ClusterState.node``."""
        uid = cycle.request.uid
        own = node.uids.get(uid) if uid else None
        extra = self.held.holdings(cycle, node) if held and self.held is not None else []
        if own is None and not extra:
            return None
        kept = [h for k, h in node.pods.items() if k != own]
        return usage_from_holdings(node.info, [*kept, *extra])

    def _fit_by_class(self, cycle: PodCycle, nodes: Sequence[NodeState]) -> dict[str, Entry]:
        """``_fit_cold`` with one node fitted per class of identical nodes
        (``nodeclass.node_signature``) and its answer relabelled for the others, when
        every vendor of the request is served by a backend that declares
        ``fit_by_node_class``. A node the pod's annotations mention (a UUID filter), a
        node without a signature and a member whose answer cannot be relabelled are
        fitted on their own, as is every node of a class whose fitted node failed."""
        vendors = set(cycle.request.vendors)
        if not self.share_fits or len(nodes) < 2 or not vendors <= self.by_class:
            return self._fit_cold(cycle, nodes)
        key, text = cycle.shape, cycle.annotations
        classes: dict[int, list[NodeState]] = {}
        alone: list[NodeState] = []
        for node in nodes:
            try:
                signature = self.state.signature(node)
            except Exception:  # an odd value in one node: fit it alone
                signature = None
            if signature is None or (text and mentions(text, node.labels)):
                alone.append(node)
            else:
                classes.setdefault(signature, []).append(node)
        firsts = [members[0] for members in classes.values()]
        out = self._fit_cold(cycle, firsts + alone)
        again: list[NodeState] = []
        for first, *others in classes.values():
            entry = out[first.name]
            if not others:
                continue
            if first.memo.get(key) is not entry:  # the first node failed: no answer
                again.extend(others)
                continue
            fit, score, charge = entry
            assert isinstance(fit, NodeFit)  # _fit_cold fits every node itself
            try:
                # The second node relabelled now: if the answer can be relabelled at
                # all, it can for every node of the class (``SharedFit.resolve``).
                second = relabel(fit, dict(zip(first.labels, others[0].labels, strict=True)))
            except Unshareable:
                again.extend(others)
                continue
            out[others[0].name] = _memo(others[0], key, (second, score, charge))
            for node in others[1:]:
                shared = SharedFit(source=fit, source_labels=first.labels, labels=node.labels)
                out[node.name] = _memo(node, key, (shared, score, charge))
        if again:
            out.update(self._fit_cold(cycle, again))
        return out

    def _fit_cold(self, cycle: PodCycle, nodes: Sequence[NodeState]) -> dict[str, Entry]:
        """Fit the pod on every node of ``nodes`` at once (one backend dispatch per
        container request, ``fitting.fit_pod_nodes``) and memoise each answer. When the
        batch fails (a backend's garbage answer for one node), each node is fitted on its
        own, so only the node at fault is marked unusable."""
        out: dict[str, Entry] = {}
        try:
            fits = fit_pod_nodes(
                cycle.fit_view,
                cycle.request,
                [(n.info, n.usage or {}) for n in nodes],
                self.manager,
                policy=cycle.policies.device,
                default_chain=cycle.default_chain,
            )
        except Exception:
            fits = None
        for pos, node in enumerate(nodes):
            try:
                assert node.usage is not None
                entry = (
                    self._fit(cycle, node, node.usage)
                    if fits is None
                    else self._scored(cycle, node, node.usage, fits[pos])
                )
                out[node.name] = _memo(node, cycle.shape, entry)
            except Exception as exc:
                out[node.name] = (
                    NodeFit(node=node.name, reason=unusable(node.name, exc)),
                    0.0,
                    NO_CHARGE,
                )
        return out

    def _prefiltered(self, cycle: PodCycle, node: NodeState) -> Entry | None:
        """The node's answer when the pre-filter rejects it in O(1), else None."""
        miss = prefilter_miss(node, cycle.request)
        if miss is None:
            return None
        container, vendor, result = miss
        total = sum(1 for d in node.info.devices if d.vendor == vendor)
        reason = result.summary(total) if total else ReasonCode.NODE_INSUFFICIENT_DEVICE.value
        return (
            NodeFit(
                node=node.name,
                reason=reason,
                miss=ContainerMiss(
                    container=container, vendor=vendor, result=result, devices_of_vendor=total
                ),
            ),
            0.0,
            NO_CHARGE,
        )

    def fit_one(
        self, cycle: PodCycle, node: NodeState, usage: Mapping[str, DeviceUsage]
    ) -> tuple[NodeFit, float, QuotaCharge]:
        """``cycle``'s pod fitted on ``node`` against ``usage`` (not memoised, no quota
        check): its ``NodeFit``, 0..100 score and quota charge there. For the stages that
        try usages the node does not have (held slices, preemption's dry run)."""
        fit, score, charge = self._fit(cycle, node, usage)
        assert isinstance(fit, NodeFit)
        return fit, score, charge

    def _fit(self, cycle: PodCycle, node: NodeState, usage: Mapping[str, DeviceUsage]) -> Entry:
        """One node's fit (without quota), its score and the pod's quota charge there."""
        fit = fit_pod(
            cycle.fit_view,
            cycle.request,
            node.info,
            usage,
            self.manager,
            policy=cycle.policies.device,
            default_chain=cycle.default_chain,
        )
        return self._scored(cycle, node, usage, fit)

    def _scored(
        self, cycle: PodCycle, node: NodeState, usage: Mapping[str, DeviceUsage], fit: NodeFit
    ) -> Entry:
        """A fit with its node score (the Score stage's 0..100) and the pod's quota
        charge there."""
        if fit.allocation is None:
            return fit, 0.0, NO_CHARGE
        pod = cycle.fit_view
        score = node_score(
            node.info, usage, fit.allocation, self.manager, policy=cycle.policies.node, pod=pod
        )
        charge = allocation_charge(pod, fit.allocation.devices, self.manager.device_type)
        return fit, score, charge


__all__ = ["Entry", "FilterEngine", "FilterResult", "passing", "unusable"]
