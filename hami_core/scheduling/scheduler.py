"""The scheduler: filter, prioritize and bind over a ``ClusterStore``.

The same functions serve the extender (``/filter``, ``/prioritize``, ``/bind``) and
``hami simulate``. Filtering returns every feasible node (kube-scheduler keeps its say on
affinity, CPU and memory); binding re-fits against current usage under the node lock.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import attrs

from hami_core.cluster.base import ClusterStore, KubeObject
from hami_core.errors import ConflictError, HamiError, InvalidInputError, NotFoundError
from hami_core.model import (
    PERCENT,
    Allocation,
    CoresUnit,
    DevicePolicy,
    DevicePolicyChain,
    DeviceUsage,
    NodeInfo,
    NodePolicy,
    PodRequest,
    ReasonCode,
)
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import encode_pod_devices
from hami_core.protocol.migallocations import encode_mig_allocations, mig_allocations_of

from .fitting import ContainerMiss, NodeFit, fit_pod, fit_pod_nodes
from .nodeclass import LazyFits, SharedFit, Unshareable, mentions, relabel
from .nodelock import (
    LONGEST_BIND_S,
    acquire_node_lock,
    holds_node_lock,
    release_node_lock,
    release_node_lock_value,
)
from .nodes import read_node
from .podspec import read_pod_request
from .policy import Policies, default_device_chain, resolve_policies, with_device_policy
from .quota import NO_CHARGE, QuotaCharge, allocation_charge, pod_quota_charge, quota_device_types
from .scoring import extender_score, node_score
from .state import MEMO_PER_NODE, ClusterState, NodeState, prefilter_miss
from .usage import PodHoldings, node_usage, pod_holdings, requested_vendors

log = logging.getLogger(__name__)

#: A node's answer for one pod shape: its fit (or another node's of its class, relabelled
#: when read), its 0..100 score and the pod's quota charge there.
Entry = tuple[NodeFit | SharedFit, float, QuotaCharge]


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


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
    ) -> None:
        """Args:
        node_policy / device_policy: override the configured defaults (pod
            annotations still win); ``device_policy`` may be a whole chain
            (``mutex,spread``, read by ``policy.device_policy_option``).
        lock_wait_s: at bind, how long to wait for another pod's node lock.
        node_selector: node labels a node must carry to be ours (HAMi's
            ``--node-label-selector``, e.g. ``{"gpu": "on"}``); other nodes fail the
            filter with ``NodeUnregistered`` for a pod asking devices.
        longest_bind_s: the longest one bind can take; a lock whose owner is not
            bound to its node is taken over once it is older than this.
        events: where events go (default: the store, synchronously); the servers pass
            an ``EventRecorder`` that writes them off the request thread, aggregated.
        prefilter: reject nodes in O(1) from their free-device summary before running
            the fit (their reason then names the sharing checks only); ``hami
            simulate`` turns it off to explain every node in full.
        share_fits: fit a new pod shape once per class of identical nodes and relabel
            the answer for the others (``nodeclass``; only for backends declaring
            ``BackendInfo.fit_by_node_class``). It never changes an answer; False
            fits every node on its own (the property tests compare the two).
        """
        self.store = store
        self.manager = manager
        self.clock = clock
        self._node_policy = node_policy
        self._device_policy = device_policy
        self._types = manager.device_types()
        self._quota_types = quota_device_types(manager)  # quota keys under renamed resources
        self._reported: set[str] = set()
        self._vendors_by_uid: dict[str, frozenset[str] | None] = {}
        self.lock_wait_s = lock_wait_s
        #: Called after each node-lock attempt at bind with (seconds waited, acquired);
        #: the metrics server installs one.
        self.lock_observer: Callable[[float, bool], None] | None = None
        self.node_selector = dict(node_selector or {})
        self.longest_bind_s = longest_bind_s
        self._bind_locks = KeyedLocks()
        self.events: EventSink = events if events is not None else store
        self.use_prefilter = prefilter
        self.share_fits = share_fits
        self._by_class = {
            t.vendor
            for info in manager.infos.values()
            if info.fit_by_node_class
            for t in info.device_types
        }
        self._recent = FilterCache()
        self._expected: dict[str, tuple[str, float]] = {}  # pod uid -> (node, when)
        self._expected_lock = threading.Lock()
        self._shapes: dict[tuple[Any, ...], int] = {}
        self._shape_ids = itertools.count()
        self.state = ClusterState(
            self._types,
            clock=clock,
            holdings=self._holdings,
            quota_charge=self._quota_charge,
            reader=manager.node_devices,
            quota_types=self._quota_types,
        )
        store.subscribe(self.state.on_event)

    # -- reading ---------------------------------------------------------------------

    def pod_request(self, pod: Mapping[str, Any]) -> PodRequest:
        """The pod's device requests. Raises ``InvalidInputError``."""
        return read_pod_request(pod, self.manager)

    def policies(self, pod: Mapping[str, Any]) -> Policies:
        """The pod's policies. Raises ``InvalidInputError`` for an unknown name."""
        return resolve_policies(
            pod, self.manager.config, node=self._node_policy, device=self._device_policy
        )

    def default_device_chain(self) -> DevicePolicyChain:
        """The device policy of a pod that names none (this scheduler's override, else
        the configured default): what a holder without the annotation was placed under
        (``fitting.fit_pod_nodes``' ``mutex``)."""
        return default_device_chain(self.manager.config, self._device_policy)

    def node_info(self, node: Mapping[str, Any]) -> NodeInfo:
        """A node's devices and registration state."""
        return read_node(node, self._types, now=self.clock(), reader=self.manager.node_devices)

    def node_usage(
        self, info: NodeInfo, *, exclude_uid: str | None = None
    ) -> dict[str, DeviceUsage]:
        """Current usage of a node's devices from the live pods on it (the incremental
        state when the node is in it and ``info`` is what it holds; else recomputed)."""
        with self.state.lock:
            cached = self.state.node(info.name)
            if cached is not None and cached.info == info:
                self._log_problems()
                return self.state.node_usage(info.name, exclude_uid=exclude_uid)
        broken: list[str] = []
        usage = node_usage(
            info,
            self.store.pods_on_node(info.name),
            self._types,
            scheduler_name=self.manager.config.scheduler_name,
            requested=self._requested_vendors,
            exclude_uid=exclude_uid,
            broken=broken,
        )
        for message in broken:
            if message not in self._reported:  # once per pod and reason, not per request
                if len(self._reported) > 4096:
                    self._reported.clear()
                self._reported.add(message)
                log.warning("unreadable allocation, failing closed: %s", message)
        return usage

    def _holdings(self, pod: Mapping[str, Any], info: NodeInfo) -> PodHoldings:
        """What ``pod`` holds on ``info`` under the trust rule (``usage.pod_holdings``)."""
        return pod_holdings(
            pod,
            info,
            self._types,
            scheduler_name=self.manager.config.scheduler_name,
            requested_vendors=self._requested_vendors(pod),
        )

    def _quota_charge(self, pod: Mapping[str, Any]) -> QuotaCharge:
        """What ``pod`` counts against its namespace's quotas (``quota.pod_quota_charge``)."""
        return pod_quota_charge(
            pod,
            self._types,
            scheduler_name=self.manager.config.scheduler_name,
            requested_vendors=self._requested_vendors(pod),
        )

    def _log_problems(self) -> None:
        problems = self.state.problems
        while problems:
            message = problems.pop(0)
            if message not in self._reported:  # once per pod and reason, not per request
                if len(self._reported) > 4096:
                    self._reported.clear()
                self._reported.add(message)
                log.warning("unreadable allocation, failing closed: %s", message)

    def _requested_vendors(self, pod: Mapping[str, Any]) -> frozenset[str] | None:
        """``usage.requested_vendors``, kept per pod uid (a pod's resources are immutable)."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if uid and uid in self._vendors_by_uid:
            return self._vendors_by_uid[uid]
        vendors = requested_vendors(pod, self.manager)
        if uid:
            if len(self._vendors_by_uid) > 65536:
                self._vendors_by_uid.clear()
            self._vendors_by_uid[uid] = vendors
        return vendors

    # -- filter / prioritize ----------------------------------------------------------

    def filter(
        self, pod: Mapping[str, Any], node_names: Iterable[str] | None = None
    ) -> FilterResult:
        """Fit the pod on the named nodes (all nodes when None) against current usage,
        from the incremental state: no API request, no copy of a cached object.

        Raises:
            InvalidInputError: the pod's requests or policy annotations are invalid.
        """
        request = self.pod_request(pod)
        policies = self.policies(pod)
        # a node named twice is judged (and answered) once, where it first appears
        names = self.state.node_names() if node_names is None else list(dict.fromkeys(node_names))
        if not request.wants_devices:  # not ours to judge, even on nodes we have not seen
            return FilterResult(
                feasible=tuple(names), failed={}, fits={}, scores={}, policies=policies
            )
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        memo_key = self._shape_id((request.containers, policies, frozenset(ann.items())))
        fit_view = with_device_policy(pod, policies.device_chain)
        feasible: list[str] = []
        failed: dict[str, str] = {}
        fits: dict[str, NodeFit | SharedFit] = {}
        scores: dict[str, float] = {}
        with self.state.lock:
            quota = self.state.quota_view(request.namespace, exclude_uid=request.uid)
            now = self.clock()
            entries: dict[str, Entry] = {}
            cold: list[NodeState] = []  # nodes whose fit for this shape is not known
            for name in names:
                try:
                    node = self.state.node(name, now=now)
                    if node is None:
                        # A node we cannot see cannot be checked: say so rather than guess.
                        failed[name] = (
                            f"{ReasonCode.NODE_UNREGISTERED.value} (node not in the scheduler's cache)"
                        )
                        continue
                    if self.node_selector:
                        unselected = self._unselected(node.obj)
                        if unselected:
                            failed[name] = unselected
                            continue
                    if request.uid and request.uid in node.uids:  # re-fit: own share left out
                        usage = self.state.node_usage(name, exclude_uid=request.uid)
                        entries[name] = self._fit(fit_view, request, node, usage, policies)
                    elif memo_key in node.memo:
                        entries[name] = node.memo[memo_key]
                    else:
                        missed = self._prefiltered(request, node) if self.use_prefilter else None
                        if missed is None:
                            cold.append(node)
                        else:
                            entries[name] = self._memo(node, memo_key, missed)
                except Exception as exc:  # one node's garbage never fails the whole request
                    failed[name] = self._unusable(name, exc)
            if cold:
                entries.update(self._fit_by_class(fit_view, request, cold, policies, memo_key, ann))
            for name in names:
                entry = entries.get(name)
                if entry is None:
                    continue
                fit, score, charge = entry
                placed = fit.placed if isinstance(fit, SharedFit) else fit.allocation is not None
                if placed and quota:
                    message = quota.violation(charge)
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
            self._log_problems()
        result = FilterResult(
            feasible=tuple(feasible),
            failed=failed,
            fits=LazyFits(fits),
            scores=scores,
            policies=policies,
        )
        self._recent.put(pod, result)
        return result

    def _shape_id(self, shape: tuple[Any, ...]) -> int:
        """A small int per distinct pod shape, so the per-node memo lookup hashes an int
        rather than the request (hashed once per filter here)."""
        with self.state.lock:
            found = self._shapes.get(shape)
            if found is None:
                if len(self._shapes) > 4096:
                    self._shapes.clear()  # ids stay unique: the counter never restarts
                found = self._shapes[shape] = next(self._shape_ids)
            return found

    @staticmethod
    def _unusable(name: str, exc: Exception) -> str:
        log.warning("node %s is unusable: %s: %s", name, type(exc).__name__, exc)
        return f"{ReasonCode.NODE_UNREGISTERED.value} (cannot read node: {type(exc).__name__})"

    @staticmethod
    def _memo(node: NodeState, key: int, entry: Entry) -> Entry:
        if len(node.memo) >= MEMO_PER_NODE:  # forget the oldest shape
            del node.memo[next(iter(node.memo))]
        node.memo[key] = entry
        return entry

    def _fit_by_class(
        self,
        pod: Mapping[str, Any],
        request: PodRequest,
        nodes: Sequence[NodeState],
        policies: Policies,
        memo_key: int,
        annotations: Mapping[str, str],
    ) -> dict[str, Entry]:
        """``_fit_cold`` with one node fitted per class of identical nodes
        (``nodeclass.node_signature``) and its answer relabelled for the others, when
        every vendor of the request is served by a backend that declares
        ``fit_by_node_class``. A node the pod's annotations mention (a UUID filter), a
        node without a signature and a member whose answer cannot be relabelled are
        fitted on their own, as is every node of a class whose fitted node failed."""
        if not self.share_fits or len(nodes) < 2 or not set(request.vendors) <= self._by_class:
            return self._fit_cold(pod, request, nodes, policies, memo_key)
        text = "\n".join(f"{k}={v}" for k, v in annotations.items())
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
        out = self._fit_cold(pod, request, firsts + alone, policies, memo_key)
        again: list[NodeState] = []
        for first, *others in classes.values():
            entry = out[first.name]
            if not others:
                continue
            if first.memo.get(memo_key) is not entry:  # the first node failed: no answer
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
            out[others[0].name] = self._memo(others[0], memo_key, (second, score, charge))
            for node in others[1:]:
                shared = SharedFit(source=fit, source_labels=first.labels, labels=node.labels)
                out[node.name] = self._memo(node, memo_key, (shared, score, charge))
        if again:
            out.update(self._fit_cold(pod, request, again, policies, memo_key))
        return out

    def _fit_cold(
        self,
        pod: Mapping[str, Any],
        request: PodRequest,
        nodes: Sequence[NodeState],
        policies: Policies,
        memo_key: int,
    ) -> dict[str, Entry]:
        """Fit the pod on every node of ``nodes`` at once (one backend dispatch per
        container request, ``fitting.fit_pod_nodes``) and memoise each answer. When the
        batch fails (a backend's garbage answer for one node), each node is fitted on its
        own, so only the node at fault is marked unusable."""
        out: dict[str, Entry] = {}
        try:
            fits = fit_pod_nodes(
                pod,
                request,
                [(n.info, n.usage or {}) for n in nodes],
                self.manager,
                policy=policies.device,
                default_chain=self.default_device_chain(),
            )
        except Exception:
            for node in nodes:
                try:
                    assert node.usage is not None
                    out[node.name] = self._memo(
                        node, memo_key, self._fit(pod, request, node, node.usage, policies)
                    )
                except Exception as exc:
                    out[node.name] = (
                        NodeFit(node=node.name, reason=self._unusable(node.name, exc)),
                        0.0,
                        NO_CHARGE,
                    )
            return out
        for node, fit in zip(nodes, fits, strict=True):
            try:
                assert node.usage is not None
                out[node.name] = self._memo(
                    node, memo_key, self._scored(pod, node, node.usage, fit, policies)
                )
            except Exception as exc:
                out[node.name] = (
                    NodeFit(node=node.name, reason=self._unusable(node.name, exc)),
                    0.0,
                    {},
                )
        return out

    def _prefiltered(self, request: PodRequest, node: NodeState) -> Entry | None:
        """The node's answer when the pre-filter rejects it in O(1), else None."""
        miss = prefilter_miss(node, request)
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

    def _fit(
        self,
        pod: Mapping[str, Any],
        request: PodRequest,
        node: NodeState,
        usage: Mapping[str, DeviceUsage],
        policies: Policies,
    ) -> Entry:
        """One node's fit (without quota), its score and its quota charge."""
        fit = fit_pod(
            pod,
            request,
            node.info,
            usage,
            self.manager,
            policy=policies.device,
            default_chain=self.default_device_chain(),
        )
        return self._scored(pod, node, usage, fit, policies)

    def _scored(
        self,
        pod: Mapping[str, Any],
        node: NodeState,
        usage: Mapping[str, DeviceUsage],
        fit: NodeFit,
        policies: Policies,
    ) -> Entry:
        """A fit with its node score and the pod's quota charge there."""
        if fit.allocation is None:
            return fit, 0.0, NO_CHARGE
        score = node_score(
            node.info, usage, fit.allocation, self.manager, policy=policies.node, pod=pod
        )
        charge = allocation_charge(pod, fit.allocation.devices, self.manager.device_type)
        return fit, score, charge

    def filter_objects(
        self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
    ) -> FilterResult:
        """Fit against full ``Node`` objects (kube-scheduler's ``nodeCacheCapable: false``
        form, and the cluster autoscaler's simulation), writing nothing. A node the cache
        knows is judged as ``filter`` judges it: its cached object, live usage and the
        namespace's quotas; only a node the cache does not know (an autoscaler template)
        is judged from the object given, with zero usage and no quota."""
        first: dict[str, Mapping[str, Any]] = {}  # a node given twice is judged once
        for node in nodes:
            first.setdefault(str((node.get("metadata") or {}).get("name", "")), node)
        nodes = list(first.values())
        known: list[str] = []
        templates: list[Mapping[str, Any]] = []
        for node in nodes:
            name = str((node.get("metadata") or {}).get("name", ""))
            with self.state.lock:
                cached = self.state.node(name) is not None
            if cached:
                known.append(name)
            else:
                templates.append(node)
        if not templates:
            return self.filter(pod, known)
        if not known:
            return self._filter(pod, templates)
        live = self.filter(pod, known)
        cold = self._filter(pod, templates)
        order = [str((n.get("metadata") or {}).get("name", "")) for n in nodes]
        feasible = set(live.feasible) | set(cold.feasible)
        return FilterResult(
            feasible=tuple(n for n in order if n in feasible),
            failed={**live.failed, **cold.failed},
            fits={**live.fits, **cold.fits},
            scores={**live.scores, **cold.scores},
            policies=live.policies,
        )

    def _filter(
        self,
        pod: Mapping[str, Any],
        nodes: Sequence[Mapping[str, Any]],
    ) -> FilterResult:
        request = self.pod_request(pod)
        policies = self.policies(pod)
        names = [str((n.get("metadata") or {}).get("name", "")) for n in nodes]
        if not request.wants_devices:  # not ours to judge, even on nodes we have not seen
            return FilterResult(
                feasible=tuple(names), failed={}, fits={}, scores={}, policies=policies
            )
        fit_view = with_device_policy(pod, policies.device_chain)
        feasible: list[str] = []
        failed: dict[str, str] = {}
        fits: dict[str, NodeFit] = {}
        scores: dict[str, float] = {}
        for node in nodes:
            unselected = self._unselected(node)
            if unselected:
                failed[str((node.get("metadata") or {}).get("name", ""))] = unselected
                continue
            node_name = str((node.get("metadata") or {}).get("name", ""))
            try:
                info = self.node_info(node)
                usage = {
                    d.uuid: DeviceUsage(device=d, cordoned=d.uuid in info.cordoned_uuids)
                    for d in info.devices
                }
                fit = fit_pod(
                    fit_view,
                    request,
                    info,
                    usage,
                    self.manager,
                    policy=policies.device,
                    default_chain=self.default_device_chain(),
                )
                fits[info.name] = fit
                if fit.allocation is not None:
                    feasible.append(info.name)
                    scores[info.name] = node_score(
                        info, usage, fit.allocation, self.manager, policy=policies.node, pod=pod
                    )
                else:
                    failed[info.name] = fit.reason
            except Exception as exc:  # one node's garbage never fails the whole request
                log.warning("node %s is unusable: %s: %s", node_name, type(exc).__name__, exc)
                fits.pop(node_name, None)
                scores.pop(node_name, None)
                if node_name in feasible:
                    feasible.remove(node_name)
                failed[node_name] = (
                    f"{ReasonCode.NODE_UNREGISTERED.value} (cannot read node: {type(exc).__name__})"
                )
        return FilterResult(
            feasible=tuple(feasible), failed=failed, fits=fits, scores=scores, policies=policies
        )

    def _unselected(self, node: Mapping[str, Any]) -> str:
        """The reason ``node`` is not ours under ``node_selector``, or ""."""
        labels = (node.get("metadata") or {}).get("labels") or {}
        missing = {k: v for k, v in self.node_selector.items() if labels.get(k) != v}
        if not missing:
            return ""
        wanted = ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items()))
        return f"{ReasonCode.NODE_UNREGISTERED.value} (node labels do not match {wanted})"

    def prioritize(
        self, pod: Mapping[str, Any], node_names: Iterable[str]
    ) -> list[tuple[str, int]]:
        """``[(node, 0..10)]`` for the named nodes; infeasible nodes score 0.

        A feasible node that another pod is being bound to scores 0 while a free
        feasible node exists: its lock is held (the bind or the ``Allocate`` is still
        running), or it is the node this answered best for another pod moments ago
        whose bind has not arrived yet (kube-scheduler binds asynchronously). Binding
        there would wait for that lock, so a burst of pods does not queue behind one
        node's ``Allocate``.
        """
        names = list(dict.fromkeys(node_names))  # a node named twice is scored once
        result = self._recent.get(pod)
        if result is None or not all(n in result.fits or n in result.failed for n in names):
            result = self.filter(pod, names)  # not filtered lately (or other nodes)
        meta = pod.get("metadata") or {}
        scores = result.scores
        busy = self.state.locked_by_others(
            {n for n in names if n in scores},
            namespace=str(meta.get("namespace") or "default"),
            pod=str(meta.get("name") or ""),
            now=self.clock(),
            expiry_s=self.manager.config.node_lock_expiry_s,
        )
        uid = str(meta.get("uid") or "")
        busy |= self._expected_nodes(exclude_uid=uid)
        if not scores.keys() - busy:
            busy = set()  # every candidate is busy: the policy alone decides
        levels: dict[float, int] = {}  # few distinct scores: each converted once
        out: list[tuple[str, int]] = []
        best: tuple[int, float, str] | None = None
        for n in names:
            score = scores.get(n)
            if score is None or n in busy:
                out.append((n, 0))
                continue
            level = levels.get(score)
            if level is None:
                level = levels[score] = extender_score(score)
            out.append((n, level))
            # The highest score, ties to the smallest name: FilterResult.best's choice,
            # so ``hami simulate`` places a pod where the extender sends it.
            if (
                best is None
                or (level, score) > best[:2]
                or ((level, score) == best[:2] and n < best[2])
            ):
                best = (level, score, n)
        if uid and best is not None:
            with self._expected_lock:
                self._expected[uid] = (best[2], time.monotonic())
            out = _unique_top(out, best[2])
        return out

    #: How long a node answered best for a pod counts as taken by that pod's bind.
    EXPECTED_BIND_S = 2.0

    def _expected_nodes(self, *, exclude_uid: str) -> set[str]:
        now = time.monotonic()
        with self._expected_lock:
            for uid in [
                u for u, (_, t) in self._expected.items() if now - t > self.EXPECTED_BIND_S
            ]:
                del self._expected[uid]
            return {n for u, (n, _) in self._expected.items() if u != exclude_uid}

    # -- bind ------------------------------------------------------------------------

    def bind(self, namespace: str, name: str, *, uid: str, node: str) -> Allocation | None:
        """Lock ``node``, re-fit the pod there against current usage, write the
        allocation annotations, create the Binding; on any failure undo what this call
        wrote (and nothing else) and release the lock. Emits ``BindingSucceed`` /
        ``BindingFailed``.

        Binds of one pod uid are serialised in this process (kube-scheduler retries a
        bind after its 5 s extender timeout while the first may still run). A retried
        bind of a pod already bound to ``node`` answers None, also when this process's
        cache still showed it unbound (after an API-server restart): the Binding's
        refusal is checked live, the lock this call wrote is given back and a lock an
        earlier bind of the pod holds is left to it. A Binding whose answer was lost is
        checked live too: landed, it is a success and keeps its lock; unknown (the API
        server unreachable), the lock stays, to be taken over if the pod stays unbound
        (PROTOCOL.md §4). A pod bound by someone else is left alone.

        Returns:
            The allocation, or None for a pod that asks no managed device or is
            already bound to ``node``.

        Raises:
            NotFoundError: pod or node missing. ConflictError: uid mismatch, pod of
            another scheduler or bound elsewhere, lock held by another pod (or lost
            mid-bind), or the pod no longer fits (kube-scheduler retries).
        """
        try:
            with self._bind_locks.hold(uid):
                return self._bind(namespace, name, uid=uid, node=node)
        finally:
            with self._expected_lock:
                self._expected.pop(uid, None)  # its lock (or nothing) speaks for it now

    def _bind(self, namespace: str, name: str, *, uid: str, node: str) -> Allocation | None:
        pod = self.store.get_pod(namespace, name)
        settled = getattr(self.store, "pods_settled", None)
        if settled is not None and not (pod.get("spec") or {}).get("nodeName") and not settled():
            # The pod cache may lag (its watch broke: an API-server restart, when
            # kube-scheduler retries the binds that timed out): a pod already bound must
            # not take a lock, so read it live (only in such a window: a bind reads nothing).
            pod = self._live_pod(namespace, name)
        if (pod.get("metadata") or {}).get("uid") != uid:
            raise ConflictError(
                f"pod {namespace}/{name} has uid {pod['metadata'].get('uid')}, not {uid}"
            )
        bound_to = (pod.get("spec") or {}).get("nodeName")
        if bound_to:
            # A retried bind of a pod that is already bound: never undo a good placement.
            if bound_to != node:
                raise ConflictError(f"pod {namespace}/{name} is already bound to {bound_to}")
            return None
        request = self.pod_request(pod)
        if not request.wants_devices:
            self.store.bind_pod(namespace, name, uid=uid, node=node)
            return None
        ours = self.manager.config.scheduler_name
        if (pod.get("spec") or {}).get("schedulerName") != ours:
            # Usage counts only pods of our scheduler (usage.bound_here): never write an
            # allocation the accounting would not see.
            raise ConflictError(
                f"pod {namespace}/{name} has schedulerName "
                f"{(pod.get('spec') or {}).get('schedulerName')!r}, not {ours!r}"
            )
        now = self.clock()
        started = time.monotonic()
        try:
            written = acquire_node_lock(
                self.store,
                node,
                namespace=namespace,
                pod=name,
                now=now,
                expiry_s=self.manager.config.node_lock_expiry_s,
                wait_s=self.lock_wait_s,
                takeover_after_s=self.longest_bind_s,
                wait=self.state.wait_node_change,
            )
        except HamiError as exc:
            self._observe_lock(started, acquired=False)
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {exc}")
            raise
        self._observe_lock(started, acquired=True)
        try:
            result = self.filter(pod, [node])
            fit = result.fits.get(node)
            if fit is None or fit.allocation is None:
                reason = fit.reason if fit is not None else "node not found"
                raise ConflictError(f"pod {namespace}/{name} no longer fits node {node}: {reason}")
            allocation = fit.allocation
            annotations = self._allocation_annotations(allocation, now)
            # From the cache (no read): our lock write is in it at once, a takeover (only
            # after ``longest_bind_s``) arrives by the watch long before.
            node_obj = self.store.cached_node(node)
            if not holds_node_lock(node_obj, namespace=namespace, pod=name):
                # Taken over (this bind outlived ``longest_bind_s``): another bind may be
                # fitting against usage that does not include us. Write nothing.
                raise ConflictError(f"node {node}: the node lock was taken over mid-bind")
            with self.state.lock:
                cached = self.state.node(node)
                info = cached.info if cached is not None else self.node_info(node_obj)
            for vendor, devices in allocation.devices.items():
                annotations.update(self.manager.bind_annotations(vendor, pod, info, devices))
            annotations[keys.DEVICE_ALLOCATED_JSON] = _handbook_json(allocation, info)
            wire = {k: v for k, v in annotations.items() if v is not None}
            try:
                # The allocation rides on the Binding: one write, and the pod is never
                # seen annotated but unbound (an update of a pod kube-scheduler has
                # assumed but not yet seen bound sends it back to its queue).
                self.store.bind_pod(namespace, name, uid=uid, node=node, annotations=wire)
            except HamiError as exc:
                outcome = self._binding_outcome(pod, node, annotations, exc, written=written)
                if outcome is _BOUND_BY_US:
                    return allocation
                if outcome is _BOUND_BEFORE:
                    return None
                raise
        except _KeepLock as keep:
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {keep.cause}")
            raise keep.cause from None
        except Exception as exc:
            self._undo(pod, node, written=written)
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {exc}")
            raise
        try:
            # HAMi also labels the pod with its node (PROTOCOL.md §3); a Binding carries
            # no labels. The pod is bound and annotated already: a failure here is only
            # logged.
            self.store.patch_pod_metadata(namespace, name, labels={keys.VGPU_NODE: node})
        except HamiError as exc:
            log.warning(
                "pod %s/%s: cannot set the %s label: %s", namespace, name, keys.VGPU_NODE, exc
            )
        self._event(
            pod,
            "Normal",
            "BindingSucceed",
            f"bound to {node}: {describe(allocation, self._cores_units())}",
        )
        return allocation

    def _cores_units(self) -> dict[str, CoresUnit]:
        """Vendor key -> the unit its compute is written in (``describe``)."""
        return {t.vendor: t.cores_unit for t in self.manager.device_types()}

    def _live_pod(self, namespace: str, name: str) -> KubeObject:
        """The pod as the API server has it now (not a cache that may lag our writes)."""
        live = getattr(self.store, "read_pod_live", None)
        pod: KubeObject = live(namespace, name) if live else self.store.get_pod(namespace, name)
        return pod

    def _allocation_annotations(
        self, allocation: Allocation, now: dt.datetime
    ) -> dict[str, str | None]:
        stamp = str(int(now.timestamp()))
        out: dict[str, str | None] = {
            keys.VGPU_NODE: allocation.node,
            keys.VGPU_TIME: stamp,
            keys.BIND_TIME: stamp,
            keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
        }
        for vendor, devices in allocation.devices.items():
            dtype = self.manager.device_type(vendor)
            encoded = encode_pod_devices(devices)
            out[dtype.to_allocate_annotation] = encoded
            out[dtype.allocated_annotation] = encoded
            instances = mig_allocations_of(devices)
            if dtype.mig_annotation and instances:
                # HAMi's PatchAnnotations: the MIG instances chosen, for the device plugin
                out[dtype.mig_annotation] = encode_mig_allocations(instances)
        return out

    def _binding_outcome(
        self,
        pod: KubeObject,
        node: str,
        annotations: Mapping[str, str | None],
        exc: HamiError,
        *,
        written: str | None,
    ) -> object:
        """What became of a Binding that answered ``exc``, from the pod as the API server
        has it now: ``_BOUND_BY_US`` (it landed: a lost answer, or a race with our own
        retry), ``_BOUND_BEFORE`` (the pod was already bound here, by an earlier bind:
        a retried bind whose cache still showed it unbound; the lock this call wrote is
        released, one held for that earlier bind is left to it), else None (not bound:
        the caller undoes). Raises ``_KeepLock`` when the outcome cannot be known (the
        API server unreachable after an answer that may hide a Binding that landed: the
        lock stays for the device plugin, and is taken over once older than the longest
        bind if the pod stays unbound, PROTOCOL.md §4), or ``ConflictError`` when the pod
        is bound to another node."""
        meta = pod["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        try:
            live = self._live_pod(namespace, name)
        except HamiError:
            if isinstance(exc, ConflictError):
                return None  # refused, not lost: nothing landed
            raise _KeepLock(exc) from None
        if (live.get("metadata") or {}).get("uid") != meta.get("uid"):
            return None
        bound_to = (live.get("spec") or {}).get("nodeName")
        if not bound_to:
            return None
        if bound_to != node:
            raise ConflictError(
                f"pod {namespace}/{name} was bound to {bound_to} by someone else"
            ) from None
        if _carries(live, annotations):
            log.info("pod %s/%s was bound to %s meanwhile", namespace, name, node)
            return _BOUND_BY_US
        log.info(
            "pod %s/%s was already bound to %s: a retried bind, nothing written",
            namespace,
            name,
            node,
        )
        if written is not None:
            self._release_written(node, written)
        return _BOUND_BEFORE

    def _undo(self, pod: KubeObject, node: str, *, written: str | None) -> None:
        """Release the lock after a failed bind. Nothing else to undo: the pod is
        written only by the Binding itself, which is all or nothing. The lock this call
        wrote goes (one conditional write: a takeover meanwhile is left alone); a lock an
        earlier bind of the pod took (``written`` None) goes only when the pod, read
        live, is not bound here (that bind's device plugin would need it)."""
        meta = pod["metadata"]
        if written is not None:
            self._release_written(node, written)
            return
        try:
            live = self._live_pod(meta["namespace"], meta["name"])
        except NotFoundError:
            live = None
        except HamiError as exc:
            log.warning(
                "bind rollback: pod %s/%s unreadable, the lock of %s is left to expire or "
                "be taken over: %s",
                meta["namespace"],
                meta["name"],
                node,
                exc,
            )
            return
        if live is not None and (live.get("spec") or {}).get("nodeName") == node:
            return
        try:
            release_node_lock(self.store, node, namespace=meta["namespace"], pod=meta["name"])
        except HamiError as exc:
            log.error("bind rollback: cannot release the lock of %s: %s", node, exc)

    def _release_written(self, node: str, value: str) -> None:
        try:
            release_node_lock_value(self.store, node, value)
        except HamiError as exc:
            # Left behind, it names a pod that is not bound here (taken over after the
            # longest bind) or bound and past this bind (PROTOCOL.md §4): never held long.
            log.error("bind rollback: cannot release the lock of %s: %s", node, exc)

    def _observe_lock(self, started: float, *, acquired: bool) -> None:
        if self.lock_observer is not None:
            self.lock_observer(time.monotonic() - started, acquired)

    def _event(self, pod: KubeObject, type_: str, reason: str, message: str) -> None:
        try:
            self.events.record_event(pod, type=type_, reason=reason, message=message)
        except Exception as exc:  # events are best effort; never fail a bind for one
            log.warning("cannot record event %s: %s", reason, exc)


#: ``Scheduler._binding_outcome``'s answers.
_BOUND_BY_US = object()
_BOUND_BEFORE = object()


class _KeepLock(Exception):
    """The Binding's outcome is unknown: raise ``cause`` without releasing the lock."""

    def __init__(self, cause: HamiError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _unique_top(scores: list[tuple[str, int]], best: str) -> list[tuple[str, int]]:
    """``scores`` with ``best`` alone at the top: the 0..10 scale ties many nodes, and
    kube-scheduler picks at random among equal totals, so a tie would send the pod to
    another node than the one reserved for its bind (``_expected``), and the burst's
    next pod to the same node, to wait for its lock. Others tied at the top go one
    below (best 1 when all are 0)."""
    top = max(score for _, score in scores)
    if top == 0:
        return [(n, 1 if n == best else score) for n, score in scores]
    return [(n, top - 1 if n != best and score == top else score) for n, score in scores]


def _carries(pod: Mapping[str, Any], annotations: Mapping[str, str | None]) -> bool:
    """True when ``pod`` still has exactly these annotation values."""
    have = (pod.get("metadata") or {}).get("annotations") or {}
    return all(have.get(k) == v for k, v in annotations.items())


class KeyedLocks:
    """One ``threading.Lock`` per key, created on demand and dropped when unused."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        """Hold the lock of ``key`` for the ``with`` block."""
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users <= 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


class EventSink(Protocol):
    """Where the scheduler's events go: a ``ClusterStore`` or an ``EventRecorder``."""

    def record_event(self, obj: KubeObject, *, type: str, reason: str, message: str) -> None: ...


class FilterCache:
    """The last filter results by pod UID and resourceVersion, for ``/prioritize``:
    kube-scheduler calls it right after ``/filter`` with the same pod, so it is answered
    from that result instead of fitting again. Entries live ``ttl_s`` seconds."""

    def __init__(self, *, size: int = 256, ttl_s: float = 30.0) -> None:
        self._size = size
        self._ttl_s = ttl_s
        self._lock = threading.Lock()
        self._items: collections.OrderedDict[tuple[str, str], tuple[float, FilterResult]] = (
            collections.OrderedDict()
        )

    @staticmethod
    def _key(pod: Mapping[str, Any]) -> tuple[str, str] | None:
        meta = pod.get("metadata") or {}
        uid, rv = meta.get("uid"), meta.get("resourceVersion")
        return (str(uid), str(rv)) if uid and rv else None

    def put(self, pod: Mapping[str, Any], result: FilterResult) -> None:
        key = self._key(pod)
        if key is None:
            return
        with self._lock:
            self._items[key] = (time.monotonic(), result)
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def get(self, pod: Mapping[str, Any]) -> FilterResult | None:
        key = self._key(pod)
        if key is None:
            return None
        with self._lock:
            entry = self._items.get(key)
            if entry is None or time.monotonic() - entry[0] > self._ttl_s:
                return None
            return entry[1]


def describe(allocation: Allocation, units: Mapping[str, CoresUnit] | None = None) -> str:
    """``GPU-a 4000MiB 30%, GPU-b 4000MiB 30%`` (all containers), compute in each
    vendor's unit from ``units`` (vendor key -> ``DeviceTypeInfo.cores_unit``; percent
    for a vendor not there): ``GPU-x 16384MiB 76 CU``; left out for a vendor that does
    not account compute."""
    parts = []
    for d in allocation.all_devices():
        unit = (units or {}).get(d.vendor, PERCENT)
        cores = f" {unit.show(unit.amount(d.cores_pct))}" if unit.accounted else ""
        parts.append(f"{d.uuid} {d.memory_mib}MiB{cores}")
    return ", ".join(parts) or "no devices"


__all__ = ["FilterResult", "InvalidInputError", "Scheduler", "describe", "utcnow"]


def _handbook_json(allocation: Allocation, info: NodeInfo) -> str:
    """The handbook's ``hami.io/device-allocated`` (PROTOCOL.md §3), for people reading
    ``kubectl describe``: per slice ``type``, ``uuid``, ``memory`` (MiB), ``cores``,
    ``numa``, and ours: ``mode``, the mode the device serves it in (its inventory
    ``mode`` at bind: ``hami-core``, ``mps`` or ``mig``), and ``migProfile`` for a MIG
    instance."""
    devices = {d.uuid: d for d in info.devices}
    out = []
    for s in allocation.all_devices():
        d = devices.get(s.uuid)
        item: dict[str, Any] = {
            "type": s.vendor,
            "uuid": s.uuid,
            "memory": s.memory_mib,
            "cores": s.cores_pct,
            "numa": d.numa if d is not None else 0,
            "mode": d.mode if d is not None else "",
        }
        if s.mig is not None:
            item["migProfile"] = s.mig.profile
        out.append(item)
    return json.dumps(out, separators=(",", ":"))
