"""The scheduler: filter, prioritize and bind over a ``ClusterStore``.

The same functions serve the extender (``/filter``, ``/prioritize``, ``/bind``) and
``hami simulate``. Filtering returns every feasible node (kube-scheduler keeps its say on
affinity, CPU and memory); binding re-fits against current usage under the node lock.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from .nodelock import acquire_node_lock, release_node_lock
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
    ) -> None:
        """Args:
        node_policy / device_policy: override the configured defaults (pod
            annotations still win).
        lock_wait_s: at bind, how long to wait for another pod's node lock.
        node_selector: node labels a node must carry to be ours (HAMi's
            ``--node-label-selector``, e.g. ``{"gpu": "on"}``); other nodes fail the
            filter with ``NodeUnregistered`` for a pod asking devices.
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
        allocation annotations, create the Binding; on any failure undo the
        annotations and the lock. Emits ``BindingSucceed`` / ``BindingFailed``.

        Returns:
            The allocation, or None for a pod that asks no managed device.

        Raises:
            NotFoundError: pod or node missing. ConflictError: uid mismatch, lock held
            by another pod, or the pod no longer fits (kube-scheduler retries).
        """
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
            )
        except HamiError as exc:
            self._observe_lock(started, acquired=False)
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {exc}")
            raise
        self._observe_lock(started, acquired=True)
        wrote = False
        written: list[str] = []
        try:
            result = self.filter(pod, [node])
            fit = result.fits.get(node)
            if fit is None or fit.allocation is None:
                reason = fit.reason if fit is not None else "node not found"
                raise ConflictError(f"pod {namespace}/{name} no longer fits node {node}: {reason}")
            allocation = fit.allocation
            annotations = self._allocation_annotations(allocation, now)
            info = self.node_info(self.store.get_node(node))
            for vendor, devices in allocation.devices.items():
                annotations.update(self.manager.bind_annotations(vendor, pod, info, devices))
            written = list(annotations)
            self.store.patch_pod_metadata(
                namespace,
                name,
                annotations=annotations,
                labels={keys.VGPU_NODE: node},
            )
            wrote = True
            self.store.bind_pod(namespace, name, uid=uid, node=node)
        except Exception as exc:
            self._undo(pod, node, wrote=wrote, allocation_keys=written or self._allocation_keys())
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {exc}")
            raise
        self._event(pod, "Normal", "BindingSucceed", f"bound to {node}: {describe(allocation)}")
        return allocation

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

    def _allocation_keys(self) -> list[str]:
        out = [
            keys.VGPU_NODE,
            keys.VGPU_TIME,
            keys.BIND_TIME,
            keys.BIND_PHASE,
            keys.DEVICE_ALLOCATED_JSON,
        ]
        for t in self._types:
            out += [t.to_allocate_annotation, t.allocated_annotation]
        return out

    def _undo(self, pod: KubeObject, node: str, *, wrote: bool, allocation_keys: list[str]) -> None:
        meta = pod["metadata"]
        if wrote:
            try:
                self.store.patch_pod_metadata(
                    meta["namespace"],
                    meta["name"],
                    annotations=dict.fromkeys(allocation_keys),
                    labels={keys.VGPU_NODE: None},
                )
            except HamiError as exc:
                log.error(
                    "bind rollback: cannot clear annotations of %s/%s: %s",
                    meta["namespace"],
                    meta["name"],
                    exc,
                )
        try:
            release_node_lock(self.store, node, namespace=meta["namespace"], pod=meta["name"])
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


def describe(allocation: Allocation) -> str:
    """``GPU-a 4000MiB 30%, GPU-b 4000MiB 30%`` (all containers)."""
    parts = [f"{d.uuid} {d.memory_mib}MiB {d.cores_pct}%" for d in allocation.all_devices()]
    return ", ".join(parts) or "no devices"


__all__ = ["FilterResult", "InvalidInputError", "Scheduler", "describe", "utcnow"]
