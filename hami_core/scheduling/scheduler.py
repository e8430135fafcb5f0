"""The scheduler: filter, prioritize and bind over a ``ClusterStore``.

The same functions serve the extender (``/filter``, ``/prioritize``, ``/bind``) and
``hami simulate``. Filtering returns every feasible node (kube-scheduler keeps its say on
affinity, CPU and memory); binding re-fits against current usage under the node lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from hami_core.cluster.base import ClusterStore, KubeObject
from hami_core.errors import ConflictError, HamiError, InvalidInputError, NotFoundError
from hami_core.model import (
    Allocation,
    DevicePolicy,
    DeviceUsage,
    NodeInfo,
    NodePolicy,
    PodRequest,
    ReasonCode,
)
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import encode_pod_devices

from .fitting import NodeFit, fit_pod
from .nodelock import LONGEST_BIND_S, acquire_node_lock, holds_node_lock, release_node_lock
from .nodes import read_node
from .podspec import read_pod_request
from .policy import Policies, resolve_policies, with_device_policy
from .quota import QuotaLimit, namespace_usage, quota_limits
from .scoring import extender_score, node_score
from .usage import node_usage, requested_vendors

log = logging.getLogger(__name__)


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
        device_policy: DevicePolicy | None = None,
        lock_wait_s: float = 0.0,
        node_selector: Mapping[str, str] | None = None,
        longest_bind_s: float = LONGEST_BIND_S,
    ) -> None:
        """Args:
        node_policy / device_policy: override the configured defaults (pod
            annotations still win).
        lock_wait_s: at bind, how long to wait for another pod's node lock.
        node_selector: node labels a node must carry to be ours (HAMi's
            ``--node-label-selector``, e.g. ``{"gpu": "on"}``); other nodes fail the
            filter with ``NodeUnregistered`` for a pod asking devices.
        longest_bind_s: the longest one bind can take; a lock whose owner is not
            bound to its node is taken over once it is older than this.
        """
        self.store = store
        self.manager = manager
        self.clock = clock
        self._node_policy = node_policy
        self._device_policy = device_policy
        self._types = manager.device_types()
        self._reported: set[str] = set()
        self._vendors_by_uid: dict[str, frozenset[str] | None] = {}
        self.lock_wait_s = lock_wait_s
        #: Called after each node-lock attempt at bind with (seconds waited, acquired);
        #: the metrics server installs one.
        self.lock_observer: Callable[[float, bool], None] | None = None
        self.node_selector = dict(node_selector or {})
        self.longest_bind_s = longest_bind_s
        self._bind_locks = KeyedLocks()

    # -- reading ---------------------------------------------------------------------

    def pod_request(self, pod: Mapping[str, Any]) -> PodRequest:
        """The pod's device requests. Raises ``InvalidInputError``."""
        return read_pod_request(pod, self.manager)

    def policies(self, pod: Mapping[str, Any]) -> Policies:
        """The pod's policies. Raises ``InvalidInputError`` for an unknown name."""
        return resolve_policies(
            pod, self.manager.config, node=self._node_policy, device=self._device_policy
        )

    def node_info(self, node: Mapping[str, Any]) -> NodeInfo:
        """A node's devices and registration state."""
        return read_node(node, self._types, now=self.clock(), reader=self.manager.node_devices)

    def node_usage(
        self, info: NodeInfo, *, exclude_uid: str | None = None
    ) -> dict[str, DeviceUsage]:
        """Current usage of a node's devices from the live pods on it."""
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
        """Fit the pod on the named nodes (all nodes when None) against current usage.

        Raises:
            InvalidInputError: the pod's requests or policy annotations are invalid.
        """
        missing: list[str] = []
        if node_names is None:
            nodes = self.store.list_nodes()
        else:
            nodes = []
            for name in node_names:
                try:
                    nodes.append(self.store.get_node(name))
                except NotFoundError:
                    missing.append(name)
        return self._filter(pod, nodes, live_usage=True, unknown=missing)

    def filter_objects(
        self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
    ) -> FilterResult:
        """Fit against full ``Node`` objects (kube-scheduler's ``nodeCacheCapable: false``
        form, and the cluster autoscaler's simulation), writing nothing. A node the cache
        knows is judged as ``filter`` judges it: its cached object, live usage and the
        namespace's quotas; only a node the cache does not know (an autoscaler template)
        is judged from the object given, with zero usage and no quota."""
        known: list[Mapping[str, Any]] = []
        templates: list[Mapping[str, Any]] = []
        for node in nodes:
            name = str((node.get("metadata") or {}).get("name", ""))
            try:
                known.append(self.store.get_node(name))
            except NotFoundError:
                templates.append(node)
        if not templates:
            return self._filter(pod, known, live_usage=True, unknown=[])
        if not known:
            return self._filter(pod, templates, live_usage=False, unknown=[])
        live = self._filter(pod, known, live_usage=True, unknown=[])
        cold = self._filter(pod, templates, live_usage=False, unknown=[])
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
        *,
        live_usage: bool,
        unknown: list[str],
    ) -> FilterResult:
        request = self.pod_request(pod)
        policies = self.policies(pod)
        names = [str((n.get("metadata") or {}).get("name", "")) for n in nodes]
        if not request.wants_devices:  # not ours to judge, even on nodes we have not seen
            return FilterResult(
                feasible=tuple(names + unknown), failed={}, fits={}, scores={}, policies=policies
            )
        limits: tuple[QuotaLimit, ...] = ()
        used: dict[tuple[str, str], int] = {}
        if live_usage:
            limits = tuple(quota_limits(self.store.list_quotas(request.namespace), self._types))
            if limits:
                used = namespace_usage(
                    self.store.list_pods(namespace=request.namespace),
                    self._types,
                    exclude_uid=request.uid,
                )
        fit_view = with_device_policy(pod, policies.device_chain)
        feasible: list[str] = []
        # A node we cannot see cannot be checked: say so rather than guess.
        failed = {
            n: f"{ReasonCode.NODE_UNREGISTERED.value} (node not in the scheduler's cache)"
            for n in unknown
        }
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
                usage = (
                    self.node_usage(info, exclude_uid=request.uid)
                    if live_usage
                    else {
                        d.uuid: DeviceUsage(device=d, cordoned=d.uuid in info.cordoned_uuids)
                        for d in info.devices
                    }
                )
                fit = fit_pod(
                    fit_view,
                    request,
                    info,
                    usage,
                    self.manager,
                    policy=policies.device,
                    quota_limits=limits,
                    quota_used=used,
                )
                fits[info.name] = fit
                if fit.allocation is not None:
                    feasible.append(info.name)
                    scores[info.name] = node_score(
                        info, usage, fit.allocation, self.manager, policy=policies.node
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
        """``[(node, 0..10)]`` for the named nodes; infeasible nodes score 0."""
        names = list(node_names)
        result = self.filter(pod, names)
        return [(n, extender_score(result.scores[n]) if n in result.scores else 0) for n in names]

    # -- bind ------------------------------------------------------------------------

    def bind(self, namespace: str, name: str, *, uid: str, node: str) -> Allocation | None:
        """Lock ``node``, re-fit the pod there against current usage, write the
        allocation annotations, create the Binding; on any failure undo what this call
        wrote (and nothing else) and release the lock. Emits ``BindingSucceed`` /
        ``BindingFailed``.

        Binds of one pod uid are serialised in this process (kube-scheduler retries a
        bind after its 5 s extender timeout while the first may still run). A retried
        bind of a pod already bound to ``node`` answers None; a pod bound by someone
        else is left alone.

        Returns:
            The allocation, or None for a pod that asks no managed device or is
            already bound to ``node``.

        Raises:
            NotFoundError: pod or node missing. ConflictError: uid mismatch, pod of
            another scheduler or bound elsewhere, lock held by another pod (or lost
            mid-bind), or the pod no longer fits (kube-scheduler retries).
        """
        with self._bind_locks.hold(uid):
            return self._bind(namespace, name, uid=uid, node=node)

    def _bind(self, namespace: str, name: str, *, uid: str, node: str) -> Allocation | None:
        pod = self.store.get_pod(namespace, name)
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
            acquire_node_lock(
                self.store,
                node,
                namespace=namespace,
                pod=name,
                now=now,
                expiry_s=self.manager.config.node_lock_expiry_s,
                wait_s=self.lock_wait_s,
                takeover_after_s=self.longest_bind_s,
            )
        except HamiError as exc:
            self._observe_lock(started, acquired=False)
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {exc}")
            raise
        self._observe_lock(started, acquired=True)
        written: dict[str, str | None] = {}
        written_rv: str | None = None
        try:
            result = self.filter(pod, [node])
            fit = result.fits.get(node)
            if fit is None or fit.allocation is None:
                reason = fit.reason if fit is not None else "node not found"
                raise ConflictError(f"pod {namespace}/{name} no longer fits node {node}: {reason}")
            allocation = fit.allocation
            annotations = self._allocation_annotations(allocation, now)
            node_obj = self.store.get_node(node)
            if not holds_node_lock(node_obj, namespace=namespace, pod=name):
                # Taken over (this bind outlived ``longest_bind_s``): another bind may be
                # fitting against usage that does not include us. Write nothing.
                raise ConflictError(f"node {node}: the node lock was taken over mid-bind")
            info = self.node_info(node_obj)
            for vendor, devices in allocation.devices.items():
                annotations.update(self.manager.bind_annotations(vendor, pod, info, devices))
            after = self.store.patch_pod_metadata(
                namespace,
                name,
                annotations=annotations,
                labels={keys.VGPU_NODE: node},
            )
            written = dict(annotations)
            written_rv = (after.get("metadata") or {}).get("resourceVersion")
            try:
                self.store.bind_pod(namespace, name, uid=uid, node=node)
            except ConflictError:
                live = self._live_pod(namespace, name)
                bound_to = (live.get("spec") or {}).get("nodeName")
                if not bound_to:
                    raise
                written = {}  # bound by someone else: what it carries is theirs now
                if bound_to == node and _carries(live, annotations):
                    log.info("pod %s/%s was bound to %s meanwhile", namespace, name, node)
                    return allocation
                raise ConflictError(
                    f"pod {namespace}/{name} was bound to {bound_to} by someone else"
                ) from None
        except Exception as exc:
            self._undo(pod, node, written=written, resource_version=written_rv)
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {exc}")
            raise
        self._event(pod, "Normal", "BindingSucceed", f"bound to {node}: {describe(allocation)}")
        return allocation

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
        # The handbook's JSON form, for people reading `kubectl describe`.
        out[keys.DEVICE_ALLOCATED_JSON] = json.dumps(
            [
                {"type": d.vendor, "uuid": d.uuid, "memory": d.memory_mib, "cores": d.cores_pct}
                for d in allocation.all_devices()
            ],
            separators=(",", ":"),
        )
        return out

    def _undo(
        self,
        pod: KubeObject,
        node: str,
        *,
        written: Mapping[str, str | None],
        resource_version: str | None,
    ) -> None:
        """Remove the annotations this bind wrote, only while the pod still carries them
        (a resourceVersion precondition; on a conflict, re-read: a pod bound since, or
        whose keys another writer changed, is left alone), then release our lock."""
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        rv = resource_version
        for _ in range(3):
            if not written:
                break
            try:
                self.store.patch_pod_metadata(
                    ns,
                    name,
                    annotations=dict.fromkeys(written),
                    labels={keys.VGPU_NODE: None},
                    resource_version=rv,
                )
                break
            except ConflictError:
                try:
                    live = self._live_pod(ns, name)
                except HamiError as exc:
                    log.error("bind rollback: cannot re-read %s/%s: %s", ns, name, exc)
                    break
                if (live.get("spec") or {}).get("nodeName") or not _carries(live, written):
                    log.info("bind rollback: %s/%s changed by another writer; left alone", ns, name)
                    break
                rv = (live.get("metadata") or {}).get("resourceVersion")
            except HamiError as exc:
                log.error("bind rollback: cannot clear annotations of %s/%s: %s", ns, name, exc)
                break
        try:
            release_node_lock(self.store, node, namespace=ns, pod=name)
        except HamiError as exc:
            log.error("bind rollback: cannot release the lock of %s: %s", node, exc)

    def _observe_lock(self, started: float, *, acquired: bool) -> None:
        if self.lock_observer is not None:
            self.lock_observer(time.monotonic() - started, acquired)

    def _event(self, pod: KubeObject, type_: str, reason: str, message: str) -> None:
        try:
            self.store.record_event(pod, type=type_, reason=reason, message=message)
        except Exception as exc:  # events are best effort; never fail a bind for one
            log.warning("cannot record event %s: %s", reason, exc)


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


def describe(allocation: Allocation) -> str:
    """``GPU-a 4000MiB 30%, GPU-b 4000MiB 30%`` (all containers)."""
    parts = [f"{d.uuid} {d.memory_mib}MiB {d.cores_pct}%" for d in allocation.all_devices()]
    return ", ".join(parts) or "no devices"


__all__ = ["FilterResult", "InvalidInputError", "Scheduler", "describe", "utcnow"]
