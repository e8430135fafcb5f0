"""The scheduler's incremental view of the cluster, kept by the store's events.

HAMi's scheduler reads node usage from in-memory caches fed by its informers; so does
this one. ``ClusterState`` subscribes to the store (``ClusterStore.subscribe``: the pod,
node and quota informers' add/update/delete) and keeps:

- per node: the decoded ``NodeInfo`` (re-decoded only when the node's
  ``resourceVersion`` changes, and kept as is when the decode is equal, so a node lock
  or handshake write does not invalidate anything), the ``DeviceUsage`` of its devices,
  a generation that changes exactly when either changes, a pre-filter summary, a
  small memo of fit results for that generation and its class signature
  (``nodeclass``);
- per pod: what it holds on each node it is assigned to and its quota charge, decoded
  once per (UID, resourceVersion); an update that charges nothing new (kubelet's
  status, the device plugin's progress keys) leaves its nodes' generations, and so
  their fits, as they were;
- per namespace: the quota charge of its live allocated pods (read from its first
  ResourceQuota, or the first read of its usage, on: a namespace without one costs no
  charge reading per pod event), and its parsed quotas;
- the held slices (``hold``): devices set aside for a pod that is not bound yet (a gang
  member's reservation, ``gangs``), counted on their node and in their namespace's quota
  charge as if the pod were bound there, left out for that pod's own fit (its uid), and
  dropped when the pod is bound, deleted or the holder lets go (``unhold``).

Without holds every number is the sum of the per-pod values the from-scratch functions
(``usage.node_usage``, ``quota.namespace_usage``) compute, over the same pods, so the
two agree after any sequence of events (a property test checks it).
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import logging
import threading
from collections.abc import Callable, Collection, Hashable, Mapping
from typing import Any

import attrs

from hami_core.cluster.base import KubeObject
from hami_core.errors import AnnotationError
from hami_core.facts.nodes import NodeDevicesReader, read_node
from hami_core.facts.priority import nominated_node
from hami_core.facts.quota import NO_CHARGE, QuotaCharge, QuotaLimit, QuotaView, quota_limits
from hami_core.facts.usage import NO_HOLDINGS, PodHoldings, usage_from_holdings
from hami_core.model import (
    MIG_PROFILE_INFO,
    DeviceRequest,
    DeviceTypeInfo,
    DeviceUsage,
    FitResult,
    NodeInfo,
    PodRequest,
    ReasonCode,
)
from hami_core.protocol.annotations import BIND_PHASE, NODE_LOCK
from hami_core.protocol.handshake import HANDSHAKE_TIMEOUT_S, HandshakeState, decode_handshake
from hami_core.protocol.lock import decode_lock
from hami_core.protocol.pods import is_live

from .nodeclass import labels_of, node_signature

log = logging.getLogger(__name__)

#: Fit results memoised per node generation (distinct pod shapes seen on that node).
MEMO_PER_NODE = 32

_FAR = dt.datetime.max.replace(tzinfo=dt.UTC)


def _node_names(pod: Mapping[str, Any]) -> frozenset[str]:
    """The nodes a pod is assigned to: ours (``hami.io/vgpu-node``) or kube-scheduler's."""
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    names = {ann.get("hami.io/vgpu-node"), (pod.get("spec") or {}).get("nodeName")}
    return frozenset(str(n) for n in names if n)


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name', '')}"


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@attrs.frozen
class VendorSummary:
    """A node's devices of one vendor that could take anything at all (healthy, not
    cordoned, a free sharer slot), by free memory: the pre-filter's O(1) answer.

    Attributes:
        total: devices of the vendor on the node.
        free_memory_mib: free memory of each open device, ascending.
        multi_instance: an open device is in ``mig`` mode with room for several instances
            (``split_count`` > 1: not a ``single``-strategy instance device).
    """

    total: int
    free_memory_mib: tuple[int, ...]
    multi_instance: bool = False

    def can_hold(self, request: DeviceRequest, memory_mib: int) -> bool:
        """False when fewer than ``request.count`` open devices have ``memory_mib`` free
        (PROTOCOL.md §1-2: N distinct devices, each with a sharer slot and the memory).
        A request naming a MIG profile (N instances, several per device), or any request
        on a node with a GPU in ``mig`` mode that holds several instances (HAMi 2.10
        ``pkg/scheduler/score.go`` ``isMIGRequest`` skips its device-count check there:
        N instances may share a GPU), needs one open device; the vendor's fit decides."""
        open_ = self.free_memory_mib
        if request.info(MIG_PROFILE_INFO) or self.multi_instance:
            return bool(open_) and open_[-1] >= memory_mib
        if len(open_) < request.count:
            return False
        return len(open_) - bisect.bisect_left(open_, memory_mib) >= request.count


@attrs.define
class NodeState:
    """One node's cached state (see the module docstring). Read under the state lock."""

    name: str
    obj: KubeObject
    info: NodeInfo
    info_until: dt.datetime
    pods: dict[str, PodHoldings] = attrs.field(factory=dict)  # pod key -> its holdings
    uids: dict[str, str] = attrs.field(factory=dict)  # pod uid -> pod key
    generation: int = 0
    usage: dict[str, DeviceUsage] | None = None
    summary: dict[str, VendorSummary] | None = None
    memo: dict[Hashable, Any] = attrs.field(factory=dict)
    #: The class of this generation (an id per distinct ``nodeclass.node_signature``,
    #: None: in no class) and the node's labels, once asked (``signed``).
    signature: int | None = None
    labels: tuple[str, ...] = ()
    signed: bool = False
    #: Who holds what per device, for preemption's bounds (``nodebounds.node_profile``).
    profile: Any = None


@attrs.frozen(kw_only=True)
class Hold:
    """Slices held for a pod that is not bound yet (``ClusterState.hold``).

    Attributes:
        uid / namespace / name: the pod the slices are held for.
        node: the node they are on.
        holdings: what is held there, as if the pod were bound (``usage.pod_holdings``
            of the pod with the allocation written in).
        quota: its charge against the namespace's quotas (the same rule).
        why: who holds it, for messages (``gang default/train``).
    """

    uid: str
    namespace: str
    name: str
    node: str
    holdings: PodHoldings
    quota: QuotaCharge = NO_CHARGE
    why: str = ""

    @property
    def key(self) -> str:
        """Its key among the node's pods (never a pod's ``namespace/name``)."""
        return f"held:{self.uid}"


@attrs.define
class PodState:
    uid: str
    rv: str
    namespace: str
    obj: KubeObject
    nodes: frozenset[str]
    quota: QuotaCharge
    nominated: str = ""  # status.nominatedNodeName of a pod not bound yet


class ClusterState:
    """Incremental usage, quotas and node infos over a ``ClusterStore``'s events.

    Thread-safe: the store's watch threads write, request threads read.
    """

    def __init__(
        self,
        device_types: tuple[DeviceTypeInfo, ...],
        *,
        clock: Callable[[], dt.datetime],
        holdings: Callable[[Mapping[str, Any], NodeInfo], PodHoldings],
        quota_charge: Callable[[Mapping[str, Any]], QuotaCharge],
        reader: NodeDevicesReader | None = None,
        quota_types: tuple[DeviceTypeInfo, ...] | None = None,
    ) -> None:
        """Args:
        device_types: every vendor's device type.
        clock: now, for handshake staleness of ``NodeInfo``.
        holdings: ``(pod, node) -> PodHoldings``: what a pod holds on a node, under the
            trust rule (``usage.pod_holdings``; the scheduler binds its own arguments).
        quota_charge: ``pod -> QuotaCharge`` under the same rule
            (``quota.pod_quota_charge``, bound likewise).
        reader: the backends' own reading of a node (``read_node``'s ``reader``).
        quota_types: the device types under the resource names quota keys are read by
            (``quota.quota_device_types``); ``device_types`` when not given.
        """
        self._types = device_types
        # what the device plugin writes as it serves a pod, read by no fit
        self._progress = frozenset({BIND_PHASE, *(t.to_allocate_annotation for t in device_types)})
        self._quota_types = device_types if quota_types is None else quota_types
        self._clock = clock
        self._holdings = holdings
        self._quota_charge = quota_charge
        self._reader = reader
        self._lock = threading.RLock()
        self._node_changed = threading.Condition(self._lock)
        self._nodes: dict[str, NodeState] = {}
        self._pods: dict[str, PodState] = {}
        self._by_node: dict[str, set[str]] = {}  # node name -> pod keys (nodes not seen yet too)
        self._nominated: dict[str, set[str]] = {}  # node name -> keys of pods nominated there
        self._ns_used: dict[str, QuotaCharge] = {}
        self._tracked: set[str] = set()  # namespaces whose pods' charges are kept
        self._quotas: dict[str, dict[str, KubeObject]] = {}
        self._limits: dict[str, tuple[QuotaLimit, ...]] = {}
        self.problems: list[str] = []  # unreadable allocations, for the caller's log
        self._ignored_logged: set[str] = set()  # node annotations left out, told once
        self._generations = 0
        self._locks: dict[str, str] = {}  # node name -> its node-lock annotation, if any
        self._classes: dict[Hashable, int] = {}  # node signature -> class id
        self._class_ids = itertools.count()
        self._holds: dict[str, Hold] = {}  # pod uid -> the slices held for it

    # -- events ----------------------------------------------------------------------

    def on_event(self, kind: str, old: KubeObject | None, new: KubeObject | None) -> None:
        """``ClusterStore.subscribe`` listener."""
        with self._lock:
            if kind == "Pod":
                self._on_pod(old, new)
            elif kind == "Node":
                self._on_node(old, new)
            elif kind == "ResourceQuota":
                self._on_quota(old, new)

    def _on_pod(self, old: KubeObject | None, new: KubeObject | None) -> None:
        key = _key(new if new is not None else old or {})
        prev = self._pods.get(key)
        if (
            new is not None
            and prev is not None
            and prev.rv == _rv(new)
            and prev.rv
            and (prev.obj is new or prev.obj == new)
        ):
            # The same version again (our own write, then its watch event). The same
            # version with other content is a write remembered at the version it was read
            # at (``KubeCluster.bind_pod``: the Binding answers no pod): charged at once.
            return
        if new is not None and prev is not None and self._charges_as_before(key, prev, new):
            prev.obj, prev.rv = new, _rv(new)
            return
        if prev is not None:
            self._drop_pod(key, prev)
        meta = (new if new is not None else old or {}).get("metadata") or {}
        held = self._holds.get(str(meta.get("uid") or ""))
        if held is not None and (new is None or not is_live(new) or _node_names(new)):
            self._unhold(held)  # bound (its own allocation counts now), gone or finished
        if new is None:
            return
        meta = new.get("metadata") or {}
        state = PodState(
            uid=str(meta.get("uid") or ""),
            rv=_rv(new),
            namespace=str(meta.get("namespace") or ""),
            obj=new,
            nodes=_node_names(new),
            quota=self._charge_of(new, str(meta.get("namespace") or "")),
            nominated=nominated_node(new),
        )
        self._pods[key] = state
        if state.nominated:
            self._nominated.setdefault(state.nominated, set()).add(key)
        if state.quota:
            self._ns_used[state.namespace] = self._ns_used.get(state.namespace, NO_CHARGE).plus(
                state.quota
            )
        for name in state.nodes:
            self._by_node.setdefault(name, set()).add(key)
            node = self._nodes.get(name)
            if node is not None:
                self._charge(node, key, state)
                self._changed(node)

    def _charges_as_before(self, key: str, prev: PodState, new: KubeObject) -> bool:
        """True when ``new``, a later version of ``prev``'s pod, is charged exactly as
        ``prev`` was (the same nodes, holdings, quota charge and nominated node, no hold
        for it) and its annotations differ at most in the device plugin's progress keys
        (``bind-phase``, each vendor's ``*-devices-to-allocate``), which no fit reads:
        kubelet's status updates and the device plugin's progress write. The new
        holdings are swapped in and the nodes' fits stand: without this each such update
        re-fitted the node for every pod shape (a bound pod is written 2-4 times after
        its Binding). Anything else (a user's annotation, a MIG instance realised, the
        pod finished) takes the full path."""
        meta = new.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if uid != prev.uid or uid in self._holds:
            return False
        if _node_names(new) != prev.nodes or nominated_node(new) != prev.nominated:
            return False
        before = (prev.obj.get("metadata") or {}).get("annotations") or {}
        after = meta.get("annotations") or {}
        if before != after:
            progress = self._progress
            if {k: v for k, v in before.items() if k not in progress} != {
                k: v for k, v in after.items() if k not in progress
            }:
                return False
        if self._charge_of(new, prev.namespace) != prev.quota:
            return False
        fresh: list[tuple[NodeState, PodHoldings]] = []
        for name in prev.nodes:
            node = self._nodes.get(name)
            if node is None:
                continue
            held = self._holdings(new, node.info)
            old = node.pods.get(key)
            if held.problem or held != (old if old is not None else NO_HOLDINGS):
                return False
            fresh.append((node, held))
        for node, held in fresh:
            if key in node.pods:
                node.pods[key] = held  # the same charges, the new annotations
        return True

    def _charge_of(self, pod: KubeObject, namespace: str) -> QuotaCharge:
        """``pod``'s quota charge where its namespace's charges are kept (``_track``),
        else none: a namespace without a ResourceQuota, which nothing reads the usage
        of, costs no charge reading per pod event."""
        return self._quota_charge(pod) if namespace in self._tracked else NO_CHARGE

    def _track(self, namespace: str) -> None:
        """Keep ``namespace``'s quota charges from now on: its first ResourceQuota, or
        the first read of its usage. Its pods' charges are read once here; the held
        slices' are counted already (``hold``)."""
        if namespace in self._tracked:
            return
        self._tracked.add(namespace)
        for pod in self._pods.values():
            if pod.namespace == namespace:
                pod.quota = self._quota_charge(pod.obj)
                if pod.quota:
                    self._ns_used[namespace] = self._ns_used.get(namespace, NO_CHARGE).plus(
                        pod.quota
                    )

    def _drop_pod(self, key: str, prev: PodState) -> None:
        del self._pods[key]
        if prev.nominated:
            keys = self._nominated.get(prev.nominated)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._nominated[prev.nominated]
        if prev.quota:
            left = self._ns_used.get(prev.namespace, NO_CHARGE).minus(prev.quota)
            if left:
                self._ns_used[prev.namespace] = left
            else:
                self._ns_used.pop(prev.namespace, None)
        for name in prev.nodes:
            self._by_node.get(name, set()).discard(key)
            node = self._nodes.get(name)
            if node is not None and node.pods.pop(key, None) is not None:
                node.uids.pop(prev.uid, None)
                self._changed(node)

    def _charge(self, node: NodeState, key: str, pod: PodState) -> None:
        held = self._holdings(pod.obj, node.info)
        if held.problem:
            self.problems.append(held.problem)
            del self.problems[:-64]
        if held.charges or held.whole:
            node.pods[key] = held
            node.uids[pod.uid] = key
        else:
            node.pods.pop(key, None)
            node.uids.pop(pod.uid, None)

    def _on_node(self, old: KubeObject | None, new: KubeObject | None) -> None:
        self._node_changed.notify_all()
        name = str(((new if new is not None else old) or {}).get("metadata", {}).get("name", ""))
        if new is None:
            self._nodes.pop(name, None)
            self._locks.pop(name, None)
            return
        node = self._nodes.get(name)
        if node is not None and _rv(node.obj) == _rv(new) and _rv(new):
            return
        lock = ((new.get("metadata") or {}).get("annotations") or {}).get(NODE_LOCK)
        if lock:
            self._locks[name] = str(lock)
        else:
            self._locks.pop(name, None)
        if node is not None and _same_inputs(node.obj, new):
            node.obj = new  # a lock or another annotation changed: the NodeInfo holds
            return
        info, until = self._read(new)
        if node is None:
            node = NodeState(name=name, obj=new, info=info, info_until=until)
            self._nodes[name] = node
            self._recharge(node)
            self._changed(node)
            return
        node.obj = new
        node.info_until = until
        if info != node.info:
            node.info = info
            self._recharge(node)
            self._changed(node)

    def _recharge(self, node: NodeState) -> None:
        """Recompute what every pod assigned to ``node`` holds there (its devices changed)."""
        node.pods.clear()
        node.uids.clear()
        for key in self._by_node.get(node.name, ()):
            self._charge(node, key, self._pods[key])
        for held in self._holds.values():
            if held.node == node.name:
                self._charge_hold(node, held)

    # -- held slices -----------------------------------------------------------------

    def hold(self, held: Hold) -> None:
        """Count ``held`` on its node and in its namespace until ``unhold``, the pod's
        bind or its deletion (a hold for the same pod is replaced). The holder's own
        fit leaves it out (``node_usage(exclude_uid=...)``, the engine's re-fit path);
        every other pod's fit and quota count it. Raises ``KeyError`` for a node the
        state does not hold."""
        with self._lock:
            node = self._nodes.get(held.node)
            if node is None:
                raise KeyError(held.node)
            old = self._holds.get(held.uid)
            if old is not None:
                self._unhold(old)
            self._holds[held.uid] = held
            if held.quota:
                self._ns_used[held.namespace] = self._ns_used.get(held.namespace, NO_CHARGE).plus(
                    held.quota
                )
            self._charge_hold(node, held)
            self._changed(node)

    def unhold(self, uid: str) -> Hold | None:
        """Let go of the slices held for pod ``uid``; the hold, or None when none was."""
        with self._lock:
            held = self._holds.get(uid)
            if held is not None:
                self._unhold(held)
            return held

    def holds(self) -> dict[str, Hold]:
        """Pod uid -> the slices held for it (a copy)."""
        with self._lock:
            return dict(self._holds)

    def _unhold(self, held: Hold) -> None:
        del self._holds[held.uid]
        if held.quota:
            left = self._ns_used.get(held.namespace, NO_CHARGE).minus(held.quota)
            if left:
                self._ns_used[held.namespace] = left
            else:
                self._ns_used.pop(held.namespace, None)
        node = self._nodes.get(held.node)
        if node is not None and node.pods.pop(held.key, None) is not None:
            if node.uids.get(held.uid) == held.key:
                del node.uids[held.uid]
            self._changed(node)

    def _charge_hold(self, node: NodeState, held: Hold) -> None:
        node.pods[held.key] = held.holdings
        node.uids.setdefault(held.uid, held.key)

    def _on_quota(self, old: KubeObject | None, new: KubeObject | None) -> None:
        obj = new if new is not None else old or {}
        meta = obj.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name", ""))
        self._track(ns)
        quotas = self._quotas.setdefault(ns, {})
        if new is None:
            quotas.pop(name, None)
        else:
            quotas[name] = new
        self._limits[ns] = tuple(
            quota_limits([quotas[n] for n in sorted(quotas)], self._quota_types)
        )

    def _changed(self, node: NodeState) -> None:
        self._generations += 1
        node.generation = self._generations
        node.usage = None
        node.summary = None
        node.memo.clear()
        node.signature = None
        node.signed = False
        node.profile = None

    def _read(self, obj: KubeObject) -> tuple[NodeInfo, dt.datetime]:
        """The node's info and until when it holds: a ``Requesting_`` handshake turns
        stale ``HANDSHAKE_TIMEOUT_S`` after its stamp, which changes the answer."""
        now = self._clock()
        try:
            info = read_node(obj, self._types, now=now, reader=self._reader)
        except Exception as exc:  # one node's garbage never breaks the others
            name = str((obj.get("metadata") or {}).get("name", ""))
            why = f"cannot read node: {type(exc).__name__}"
            return NodeInfo(name=name, unregistered={t.vendor: why for t in self._types}), _FAR
        for key, why in sorted(info.ignored.items()):
            message = f"node {info.name}: optional annotation {key} ignored: {why}"
            if message not in self._ignored_logged:  # once per node and reason
                if len(self._ignored_logged) > 4096:
                    self._ignored_logged.clear()
                self._ignored_logged.add(message)
                log.warning("%s (the node's devices stay usable)", message)
        until = _FAR
        ann = (obj.get("metadata") or {}).get("annotations") or {}
        for t in self._types:
            value = ann.get(t.handshake_annotation)
            if not value or not value.startswith(HandshakeState.REQUESTING.value):
                continue
            try:
                hs = decode_handshake(value)
            except AnnotationError:  # read_node ignores it as well
                continue
            stale_at = hs.at + dt.timedelta(seconds=HANDSHAKE_TIMEOUT_S)
            if stale_at >= now:
                until = min(until, stale_at + dt.timedelta(microseconds=1))
        return info, until

    # -- reads -----------------------------------------------------------------------

    def node(self, name: str, *, now: dt.datetime | None = None) -> NodeState | None:
        """The node's state with ``info``, ``usage`` and ``summary`` filled, or None when
        the node is unknown. The caller must hold ``lock`` while it reads the result."""
        node = self._nodes.get(name)
        if node is None:
            return None
        if (now or self._clock()) >= node.info_until:  # a pending handshake went stale meanwhile
            info, node.info_until = self._read(node.obj)
            if info != node.info:
                node.info = info
                self._recharge(node)
                self._changed(node)
        if node.usage is None:
            node.usage = usage_from_holdings(node.info, node.pods.values())
        if node.summary is None:
            node.summary = _summarise(node.info, node.usage)
        return node

    def signature(self, node: NodeState) -> int | None:
        """The node's class for its current generation: equal ids for nodes of one
        class (``nodeclass.node_signature``), None for a node in none. Computed once per
        generation; the caller holds ``lock`` and got ``node`` from ``node()``."""
        if not node.signed:
            assert node.usage is not None
            signature = node_signature(node.info, node.usage)
            if signature is None:
                node.signature = None
            else:
                if len(self._classes) > 65536:  # ids stay unique: the counter never restarts
                    self._classes.clear()
                found = self._classes.get(signature)
                if found is None:
                    found = self._classes[signature] = next(self._class_ids)
                node.signature = found
            node.labels = labels_of(node.info)
            node.signed = True
        return node.signature

    @property
    def lock(self) -> threading.RLock:
        return self._lock

    def wait_node_change(self, timeout_s: float) -> None:
        """Block until a node changes (e.g. a lock is released) or ``timeout_s`` passes."""
        with self._node_changed:
            self._node_changed.wait(timeout_s)

    def locked_by_others(
        self,
        names: Collection[str],
        *,
        namespace: str,
        pod: str,
        now: dt.datetime,
        expiry_s: float,
    ) -> set[str]:
        """The nodes of ``names`` whose unexpired lock names another pod (PROTOCOL.md §4),
        read from the cached node objects."""
        out: set[str] = set()
        with self._lock:
            # Few nodes are locked at once: look at those, not at every name.
            locked = [(n, v) for n, v in self._locks.items() if n in names]
        for name, value in locked:
            try:
                lock = decode_lock(value)
            except AnnotationError:
                continue
            if not lock.owned_by(namespace, pod) and not lock.expired(now, expiry_s=expiry_s):
                out.add(name)
        return out

    def node_names(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def node_usage(self, name: str, *, exclude_uid: str | None = None) -> dict[str, DeviceUsage]:
        """uuid -> usage of the node's devices (a copy); ``exclude_uid``'s share left out.

        Raises:
            KeyError: the node is unknown.
        """
        with self._lock:
            node = self.node(name)
            if node is None:
                raise KeyError(name)
            assert node.usage is not None
            if exclude_uid is not None and exclude_uid in node.uids:
                own = node.uids[exclude_uid]
                return usage_from_holdings(node.info, (h for k, h in node.pods.items() if k != own))
            return dict(node.usage)

    def namespace_usage(self, namespace: str, *, exclude_uid: str | None = None) -> QuotaCharge:
        """The namespace's charge (``quota.namespace_usage``), less the pod ``exclude_uid``'s."""
        with self._lock:
            self._track(namespace)
            used = self._ns_used.get(namespace, NO_CHARGE)
            if exclude_uid:
                for pod in self._pods.values():
                    if pod.uid == exclude_uid and pod.namespace == namespace:
                        used = used.minus(pod.quota)
                held = self._holds.get(exclude_uid)
                if held is not None and held.namespace == namespace and held.quota:
                    used = used.minus(held.quota)
            return used

    def quota_namespaces(self) -> list[str]:
        """The namespaces holding a ResourceQuota (of any resource), sorted."""
        with self._lock:
            return sorted(ns for ns, quotas in self._quotas.items() if quotas)

    def quota_limits(self, namespace: str) -> tuple[QuotaLimit, ...]:
        with self._lock:
            return self._limits.get(namespace, ())

    def quota_view(self, namespace: str, *, exclude_uid: str | None = None) -> QuotaView:
        """The namespace's quotas and usage, less the pod ``exclude_uid``'s charge (a
        pod being re-fitted); the usage is summed only when the namespace has quotas."""
        with self._lock:
            limits = self.quota_limits(namespace)
            if not limits:
                return QuotaView()
            return QuotaView(limits, self.namespace_usage(namespace, exclude_uid=exclude_uid))

    def nominated_on(self, name: str) -> list[KubeObject]:
        """The pods nominated to node ``name`` and not bound yet
        (``priority.nominated_node``), by key; the caller holds ``lock``."""
        return [self._pods[k].obj for k in sorted(self._nominated.get(name, ()))]

    def has_nominations(self) -> bool:
        """Whether any pod is nominated to a node (the filter's cheap test)."""
        return bool(self._nominated)

    def pod_object(self, key: str) -> KubeObject | None:
        """The pod of key ``namespace/name`` (None: no such pod, or a hold's key); the
        caller holds ``lock``."""
        pod = self._pods.get(key)
        return None if pod is None else pod.obj

    def holders(self, node: NodeState) -> list[tuple[KubeObject | None, PodHoldings, QuotaCharge]]:
        """What holds devices on ``node`` (got from ``node()``), by key: each pod's object,
        its holdings there and its quota charge; an entry that is no pod (slices held
        for a pod not bound yet) has None for object and no charge. The caller holds
        ``lock``."""
        out: list[tuple[KubeObject | None, PodHoldings, QuotaCharge]] = []
        for key, held in sorted(node.pods.items()):
            pod = self._pods.get(key)
            out.append((None, held, NO_CHARGE) if pod is None else (pod.obj, held, pod.quota))
        return out

    def pod_uid_on(self, name: str, uid: str) -> bool:
        """Whether a pod with ``uid`` holds devices on node ``name``."""
        with self._lock:
            node = self._nodes.get(name)
            return node is not None and uid in node.uids


def _same_inputs(old: KubeObject, new: KubeObject) -> bool:
    """Whether ``read_node`` reads the same from both versions of a node: equal labels,
    allocatable and annotations but the node lock (written twice per bind)."""
    om, nm = old.get("metadata") or {}, new.get("metadata") or {}
    oa = {k: v for k, v in (om.get("annotations") or {}).items() if k != NODE_LOCK}
    na = {k: v for k, v in (nm.get("annotations") or {}).items() if k != NODE_LOCK}
    return (
        oa == na
        and om.get("labels") == nm.get("labels")
        and (old.get("status") or {}).get("allocatable")
        == (new.get("status") or {}).get("allocatable")
        and (old.get("status") or {}).get("capacity") == (new.get("status") or {}).get("capacity")
    )


def _summarise(info: NodeInfo, usage: Mapping[str, DeviceUsage]) -> dict[str, VendorSummary]:
    totals: dict[str, int] = {}
    free: dict[str, list[int]] = {}
    multi: set[str] = set()
    for u in usage.values():
        v = u.device.vendor
        totals[v] = totals.get(v, 0) + 1
        if u.device.healthy and not u.cordoned and u.used_count < u.device.split_count:
            free.setdefault(v, []).append(u.free_memory_mib)
            if u.device.mode == "mig" and u.device.split_count > 1:
                multi.add(v)
    return {
        v: VendorSummary(
            total=n, free_memory_mib=tuple(sorted(free.get(v, ()))), multi_instance=v in multi
        )
        for v, n in totals.items()
    }


def prefilter_miss(node: NodeState, request: PodRequest) -> tuple[str, str, FitResult] | None:
    """Why the pre-filter rejects ``request`` on ``node``: ``(container, vendor,
    FitResult)`` of the first container that cannot fit, with each device's first
    failing sharing check in the fit's order (health, cordon, split count, memory), or
    None when the pre-filter lets the node through."""
    assert node.summary is not None and node.usage is not None
    for container in request.containers:
        for req in container.devices:
            if req.vendor in node.info.unregistered:
                continue
            summary = node.summary.get(req.vendor)
            need = req.memory_mib if req.memory_mib else 1
            if summary is not None and summary.can_hold(req, need):
                continue
            reasons: dict[str, ReasonCode] = {}
            usable = 0
            total = 0
            for u in node.usage.values():
                if u.device.vendor != req.vendor:
                    continue
                total += 1
                if not u.device.healthy:
                    reasons[u.device.uuid] = ReasonCode.CARD_NOT_HEALTH
                elif u.cordoned:
                    reasons[u.device.uuid] = ReasonCode.CARD_CORDONED
                elif u.used_count >= u.device.split_count:
                    reasons[u.device.uuid] = ReasonCode.CARD_TIME_SLICING_EXHAUSTED
                elif req.memory_on(u.device) > u.free_memory_mib or not req.memory_on(u.device):
                    reasons[u.device.uuid] = ReasonCode.CARD_INSUFFICIENT_MEMORY
                else:
                    usable += 1
            node_reason = None
            if total < req.count:
                node_reason = ReasonCode.NODE_INSUFFICIENT_DEVICE
            elif usable:
                node_reason = ReasonCode.ALLOCATED_CARDS_INSUFFICIENT_REQUEST
            return (
                container.name,
                req.vendor,
                FitResult(device_reasons=reasons, node_reason=node_reason),
            )
    return None
