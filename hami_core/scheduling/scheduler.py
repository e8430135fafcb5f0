"""The scheduler: filter, prioritize and bind over a ``ClusterStore``, as named stages.

The same calls serve the extender (``/filter``, ``/prioritize``, ``/bind``) and ``hami
simulate``. A pod's trip, as kube-scheduler's framework names its stages:

- PreFilter: ``cycle.begin_cycle``, once per pod and request: its device request,
  policies, fit view, shape id and namespace quota view (``cycle.PodCycle``);
- Filter: ``filtering.FilterEngine`` over a node source (``sources``: the cached
  ``ClusterState``, or the Node objects given); every feasible node is answered
  (kube-scheduler keeps its say on affinity, CPU and memory);
- Score: ``prioritize``, from the filter's result, nodes being bound (``reservations``) aside;
- Reserve, Permit and Bind: ``bind.Binder``, which re-fits under the node lock;
- PostFilter: ``preemptor.Preemptor.over`` a scheduler; its room is held (``held``).
A gang group's member goes through ``gangs.Gangs``: placed with its group or refused.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hami_core.cluster.base import ClusterStore
from hami_core.errors import InvalidInputError
from hami_core.facts.holdings import HoldingsReader, ProblemLog
from hami_core.facts.nodelock import LONGEST_BIND_S
from hami_core.facts.nodes import read_node
from hami_core.facts.podrequest import read_pod_request
from hami_core.facts.quota import quota_device_types
from hami_core.model import (
    Allocation,
    DevicePolicy,
    DevicePolicyChain,
    DeviceUsage,
    NodeInfo,
    NodePolicy,
    PodRequest,
)
from hami_core.plugin import BackendManager

from .bind import Binder, EventSink, describe
from .cycle import PodCycle, ShapeIds, begin_cycle
from .filtering import FilterEngine, FilterResult, passing
from .gangs import GangOptions, Gangs
from .prioritize import FilterCache, prioritize
from .reservations import Reservations
from .sources import CachedNodes, GivenNodes, NodeSource
from .state import ClusterState

log = logging.getLogger(__name__)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Scheduler:
    """Filter, prioritize and bind pods asking for managed devices."""

    def __init__(
        self,
        store: ClusterStore,
        manager: BackendManager,
        *,
        clock: Callable[[], dt.datetime] = utcnow,
        node_policy: NodePolicy | None = None,
        device_policy: DevicePolicy | DevicePolicyChain | None = None,
        lock_wait_s: float = 0.0,
        node_selector: Mapping[str, str] | None = None,
        longest_bind_s: float = LONGEST_BIND_S,
        events: EventSink | None = None,
        prefilter: bool = True,
        share_fits: bool = True,
        gang: GangOptions | None = None,
        success_events: bool = False,
    ) -> None:
        """Args:
        node_policy / device_policy: override the configured defaults (pod
            annotations still win); ``device_policy`` may be a whole chain
            (``mutex,spread``, read by ``policy.device_policy_option``).
        lock_wait_s: at bind, how long to wait for another pod's node lock.
        node_selector: labels a node must carry to be ours (HAMi's ``--node-label-selector``,
            e.g. ``{"gpu": "on"}``); other nodes fail with ``NodeUnregistered``.
        longest_bind_s: a lock whose owner is not bound is taken over past this age.
        events: where events go (default: the store; the servers' ``EventRecorder``).
        prefilter: reject nodes in O(1) from their free-device summary before the fit
            (off in ``hami simulate``, to explain every node in full).
        share_fits: fit a new pod shape once per class of identical nodes (``nodeclass``,
            backends declaring ``fit_by_node_class``); same answers (property-tested).
        success_events: also write HAMi's ``FilteringSucceed`` and ``BindingSucceed``;
            failure events are written either way (``--success-events``, PROTOCOL.md §5).
        """
        self.store = store
        self.manager = manager
        self.clock = clock
        self.node_selector = dict(node_selector or {})
        self.events: EventSink = events if events is not None else store
        self.success_events = success_events
        self._node_policy = node_policy
        self._device_policy = device_policy
        self._types = manager.device_types()
        self._problems = ProblemLog(log)
        self._reader = HoldingsReader(manager, self._problems)
        self._shapes = ShapeIds()
        self._recent = FilterCache()
        self._reservations = Reservations()
        self.state = ClusterState(
            self._types,
            clock=clock,
            holdings=self._reader.holdings,
            quota_charge=self._reader.quota_charge,
            reader=manager.node_devices,
            quota_types=quota_device_types(manager),  # quota keys under renamed resources
        )
        store.subscribe(self.state.on_event)
        self.engine = FilterEngine(
            self.state,
            manager,
            clock=clock,
            problems=self._problems,
            prefilter=prefilter,
            share_fits=share_fits,
        )
        self.engine.hold_nominated(cycle_of=self.cycle)
        self.binder = Binder(
            store,
            manager,
            self.state,
            refit=lambda pod, node: self.filter(pod, [node]),
            node_info=self.node_info,
            reservations=self._reservations,
            clock=clock,
            events=self.events,
            lock_wait_s=lock_wait_s,
            longest_bind_s=longest_bind_s,
            success_events=success_events,
        )
        parts = (store, self.state, manager, self._cached, self._reader, self.events)
        self.gangs = Gangs(*parts, gang or GangOptions())

    # -- reading ---------------------------------------------------------------------

    def pod_request(self, pod: Mapping[str, Any]) -> PodRequest:
        """The pod's device requests. Raises ``InvalidInputError``."""
        return read_pod_request(pod, self.manager)

    def node_info(self, node: Mapping[str, Any]) -> NodeInfo:
        """A node's devices and registration state."""
        return read_node(node, self._types, now=self.clock(), reader=self.manager.node_devices)

    def node_usage(
        self, info: NodeInfo, *, exclude_uid: str | None = None
    ) -> dict[str, DeviceUsage]:
        """A node's device usage: the incremental state's when it holds ``info``, else
        recomputed from the live pods on it."""
        with self.state.lock:
            cached = self.state.node(info.name)
            if cached is not None and cached.info == info:
                self._problems.drain(self.state.problems)
                return self.state.node_usage(info.name, exclude_uid=exclude_uid)
        return self._reader.usage_from_pods(
            info, self.store.pods_on_node(info.name), exclude_uid=exclude_uid
        )

    def quota_namespaces(self) -> list[str]:
        """The namespaces holding a ResourceQuota, sorted (``servers.metrics``)."""
        return self.state.quota_namespaces()

    # -- the stages ------------------------------------------------------------------

    def cycle(self, pod: Mapping[str, Any]) -> PodCycle:
        """The pod's cycle state (PreFilter). Raises ``InvalidInputError``."""
        return begin_cycle(
            pod,
            self.manager,
            shapes=self._shapes,
            quota=self.state.quota_view,
            node_policy=self._node_policy,
            device_policy=self._device_policy,
        )

    def filter(
        self, pod: Mapping[str, Any], node_names: Iterable[str] | None = None
    ) -> FilterResult:
        """Fit the pod on the named nodes (all nodes when None) against current usage,
        from the incremental state: no API request, no copy of a cached object.

        Raises:
            InvalidInputError: the pod's requests or policy annotations are invalid.
        """
        names = self.state.node_names() if node_names is None else list(node_names)
        group = self.gangs.member(pod)
        result = self._cached(pod, names) if group is None else self.gangs.filter(pod, group, names)
        self._recent.put(pod, result)
        return result

    def filter_objects(
        self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
    ) -> FilterResult:
        """Fit against full ``Node`` objects (``nodeCacheCapable: false``, the cluster
        autoscaler's simulation), writing nothing: a node the cache knows is judged as
        ``filter`` judges it; an unknown one (an autoscaler template) from the object
        given, with zero usage and no quota (a gang member as ``filter`` judges it)."""
        if self.gangs.member(pod) is not None:
            return self.filter(pod, [str((n.get("metadata") or {}).get("name", "")) for n in nodes])
        with self.state.lock:
            source = GivenNodes(self.state, nodes, self.node_selector, self.node_info)
        result = self._judge(pod, source)
        if not source.templates:
            self._recent.put(pod, result)
        return result

    def _cached(self, pod: Mapping[str, Any], names: Sequence[str]) -> FilterResult:
        return self._judge(pod, CachedNodes(self.state, list(names), self.node_selector))

    def _judge(self, pod: Mapping[str, Any], source: NodeSource) -> FilterResult:
        with self.state.lock:  # one snapshot: the namespace's quota and the nodes' usage
            cycle = self.cycle(pod)
            if not cycle.request.wants_devices:
                return passing(cycle, source.names)
            return self.engine.run(cycle, source)

    def prioritize(
        self, pod: Mapping[str, Any], node_names: Iterable[str]
    ) -> list[tuple[str, int]]:
        """``[(node, 0..10)]`` for the named nodes (``prioritize.prioritize``: infeasible
        ones and ones being bound to while a free one exists score 0), from the pod's last
        filter when it holds every named node."""
        names = list(dict.fromkeys(node_names))  # a node named twice is scored once
        result = self._recent.get(pod)
        if result is None or not all(n in result.fits or n in result.failed for n in names):
            result = self.filter(pod, names)  # not filtered lately (or other nodes)
        return prioritize(
            pod,
            names,
            result,
            state=self.state,
            reservations=self._reservations,
            now=self.clock(),
            expiry_s=self.manager.config.node_lock_expiry_s,
        )

    def bind(self, namespace: str, name: str, *, uid: str, node: str) -> Allocation | None:
        """``bind.Binder.bind``: re-fit the pod on ``node``, write the allocation on the
        Binding, undo on failure (a gang member only with its group's room: ``Gangs.bind``)."""
        return self.gangs.bind(namespace, name, uid=uid, node=node, bind=self.binder.bind)


__all__ = ["FilterResult", "InvalidInputError", "Scheduler", "describe", "utcnow"]
