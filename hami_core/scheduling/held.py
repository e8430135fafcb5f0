"""Slices held on a node for pods not bound there yet: the room preemption made.

kube-scheduler counts a pod nominated to a node (``status.nominatedNodeName``) of equal
or higher priority as already running there when it filters another pod
(``RunFilterPluginsWithNominatedPods``, ``pkg/scheduler/framework/runtime``), so the
room its victims free is not taken by a lower-priority pod meanwhile. It does that for
CPU and memory only: our device resources are ``ignoredByScheduler``. ``HeldSlices``
does it for slices: on a node with nominated pods, each such pod of priority at least
the judged pod's (itself left out) is fitted there first, in key order, on the node's
usage without the pods being deleted (the room its victims, or the pods consolidation
moved for it, are freeing: a pod of no higher priority must not settle beside a leaving
pod in that room), and what it would hold is added to the node's usage before the
judged pod is fitted.

The pods a consolidation plan in progress still has to move for a nominated pod
(``leaving``: the ledger's plans, ``defrag.ledger.RememberingLedger.leaving``) count as
leaving for that pod too: a plan stopped part-way (a budget refused its next eviction,
or its leader died) keeps the room it freed, or a moved pod's replacement would settle
there before the last move is made.

Slices held whatever the judged pod's priority (a gang member's reservation) live in
``ClusterState`` itself and count in every node's usage; these depend on who asks, so
they are added per judged pod.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from hami_core.facts.priority import pod_priority, terminating
from hami_core.facts.usage import PodHoldings, usage_from_holdings
from hami_core.model import Allocation, Charge, DeviceUsage, device_charges

from .cycle import PodCycle
from .state import ClusterState, NodeState

if TYPE_CHECKING:
    from .filtering import FilterEngine

#: ``(pod's cycle, node, usage) -> allocation or None``: the filter engine's own fit.
FitOne = Callable[[PodCycle, NodeState, Mapping[str, DeviceUsage]], Allocation | None]
#: ``pod -> PodCycle`` (``Scheduler.cycle``).
CycleOf = Callable[[Mapping[str, Any]], PodCycle]
#: ``nominated pod -> uids of the pods its consolidation plan still moves`` (empty: none).
Leaving = Callable[[Mapping[str, Any]], Collection[str]]


def _nothing_leaving(_pod: Mapping[str, Any]) -> Collection[str]:
    return ()


def allocation_holdings(pod: Mapping[str, Any], allocation: Allocation) -> PodHoldings:
    """What ``pod`` would hold with ``allocation`` (the usage fold's unit), by the same
    charge rule as a bound pod's annotations (``model.device_charges``)."""
    charges: dict[str, Charge] = {}
    for devices in allocation.devices.values():
        for uuid, charge in device_charges(pod, devices).items():
            charges[uuid] = charges.get(uuid, Charge()).plus(charge)
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return PodHoldings(charges=charges, annotations=ann)


class HeldSlices:
    """The slices held on a node for a judged pod's betters (module docstring)."""

    def __init__(
        self, state: ClusterState, *, fit: FitOne, cycle_of: CycleOf, leaving: Leaving | None = None
    ) -> None:
        self.state = state
        self.fit = fit
        self.cycle_of = cycle_of
        #: the pods a plan in progress still moves for a nominated pod (module docstring);
        #: set by continuous consolidation, which reads its ledger
        self.leaving: Leaving = leaving or _nothing_leaving

    @classmethod
    def over(cls, engine: FilterEngine, *, cycle_of: CycleOf) -> HeldSlices:
        """Held slices fitted by ``engine``'s own fit (``FilterEngine.fit_one``)."""
        return cls(
            engine.state,
            fit=lambda cycle, node, usage: engine.fit_one(cycle, node, usage)[0].allocation,
            cycle_of=cycle_of,
        )

    def active(self) -> bool:
        """Whether anything may be held anywhere (cheap: the filter asks per request)."""
        return self.state.has_nominations()

    def holdings(self, cycle: PodCycle, node: NodeState) -> list[PodHoldings]:
        """What is held on ``node`` against ``cycle``'s pod: for every pod nominated there
        (not the judged pod) of priority >= the judged pod's, what it would hold fitted
        on the node's usage without the pods being deleted (the room its victims or
        moved pods are freeing) nor those its consolidation plan still moves
        (``leaving``), plus the holds before it; a nominated pod that does not fit (or
        cannot be read) holds nothing. Call under the state lock."""
        out: list[PodHoldings] = []
        nominated = self.state.nominated_on(node.name)
        if not nominated:
            return out
        mine = pod_priority(cycle.pod)
        uid = cycle.request.uid
        assert node.usage is not None
        # the room being freed counts for a nominated pod: pods being deleted are left
        # out of what it is fitted on (they still count for the judged pod, below it)
        holders = self.state.holders(node)
        deleting = {i for i, (obj, _, _) in enumerate(holders) if obj and terminating(obj)}
        for pod in nominated:
            if (pod.get("metadata") or {}).get("uid") == uid or pod_priority(pod) < mine:
                continue
            try:
                other = self.cycle_of(pod)
                if not other.request.wants_devices:
                    continue
                planned = set(self.leaving(pod))
                gone = deleting | {
                    i
                    for i, (obj, _, _) in enumerate(holders)
                    if obj and planned and (obj.get("metadata") or {}).get("uid") in planned
                }
                staying = [h for i, (_, h, _) in enumerate(holders) if i not in gone]
                usage = (
                    usage_from_holdings(node.info, [*staying, *out]) if out or gone else node.usage
                )
                allocation = self.fit(other, node, usage)
            except Exception:  # a nominated pod we cannot read holds nothing
                continue
            if allocation is not None:
                out.append(allocation_holdings(pod, allocation))
        return out

    def usage(self, cycle: PodCycle, node: NodeState) -> dict[str, DeviceUsage] | None:
        """The node's usage with the held slices added, or None when nothing is held
        there for ``cycle``'s pod (then the node's own usage and memo serve)."""
        held = self.holdings(cycle, node)
        if not held:
            return None
        return usage_from_holdings(node.info, [*node.pods.values(), *held])


__all__ = ["CycleOf", "FitOne", "HeldSlices", "Leaving", "allocation_holdings"]
