"""The bind stage: lock the node, re-fit the pod there against current usage, and
write the allocation on the Binding (PROTOCOL.md §3-4).

kube-scheduler's Reserve, Permit and Bind in one call: the node lock (``nodelock``) is
our reservation, the re-fit under it (``refit``, the filter engine on one node) our
Permit, and the Binding carries the allocation annotations, so a pod is never seen
annotated but unbound. On any failure only what this call wrote is undone.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from hami_core.cluster.base import ClusterStore, KubeObject
from hami_core.errors import ConflictError, HamiError, NotFoundError
from hami_core.facts.lockmode import needs_node_lock
from hami_core.facts.nodelock import (
    LONGEST_BIND_S,
    acquire_node_lock,
    holds_node_lock,
    release_node_lock,
    release_node_lock_value,
)
from hami_core.facts.podrequest import read_pod_request
from hami_core.model import PERCENT, Allocation, CoresUnit, NodeInfo
from hami_core.plugin import BackendManager
from hami_core.protocol import annotations as keys
from hami_core.protocol.devicelist import encode_pod_devices
from hami_core.protocol.migallocations import encode_mig_allocations, mig_allocations_of
from hami_core.protocol.signature import AllocationSigner

from .filtering import FilterResult
from .reservations import Reservations
from .state import ClusterState

log = logging.getLogger(__name__)


class EventSink(Protocol):
    """Where the scheduler's events go: a ``ClusterStore`` or an ``EventRecorder``."""

    def record_event(self, obj: KubeObject, *, type: str, reason: str, message: str) -> None: ...


class Binder:
    """Binds pods asking for managed devices (``bind``)."""

    def __init__(
        self,
        store: ClusterStore,
        manager: BackendManager,
        state: ClusterState,
        *,
        refit: Callable[[KubeObject, str], FilterResult],
        node_info: Callable[[Mapping[str, Any]], NodeInfo],
        reservations: Reservations,
        clock: Callable[[], dt.datetime],
        events: EventSink,
        lock_wait_s: float = 0.0,
        longest_bind_s: float = LONGEST_BIND_S,
        signer: AllocationSigner | None = None,
        success_events: bool = False,
    ) -> None:
        """Args:
        refit: ``(pod, node) -> FilterResult`` of the pod on that one node, against
            current usage (``Scheduler.filter``).
        node_info: a node object's devices (``Scheduler.node_info``), for a node the
            state does not hold.
        reservations: released when the bind has run.
        events / lock_wait_s / longest_bind_s / success_events: as ``Scheduler``'s.
        signer: signs each allocation written (``hami.io/allocation-signature``,
            PROTOCOL.md §4a); ``hami scheduler`` always sets one (``signer``
            attribute), None writes none (``hami simulate``, HAMi's unsigned protocol).
        """
        self.store = store
        self.manager = manager
        self.state = state
        self.refit = refit
        self.node_info = node_info
        self.reservations = reservations
        self.clock = clock
        self.events = events
        self.lock_wait_s = lock_wait_s
        self.longest_bind_s = longest_bind_s
        self.signer = signer
        self.success_events = success_events
        #: Called after each node-lock attempt with (seconds waited, acquired); the
        #: metrics server installs one.
        self.lock_observer: Callable[[float, bool], None] | None = None
        self._bind_locks = KeyedLocks()
        self._node_guards = KeyedLocks()

    def bind(
        self,
        namespace: str,
        name: str,
        *,
        uid: str,
        node: str,
        lock_wait_s: float | None = None,
    ) -> Allocation | None:
        """Lock ``node``, re-fit the pod there against current usage, write the
        allocation annotations, create the Binding; on any failure undo what this call
        wrote (and nothing else) and release the lock. Emits ``BindingFailed``, and
        ``BindingSucceed`` with ``success_events``.

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

        ``lock_wait_s``: how long to wait for another pod's node lock when longer than
        ``--bind-lock-wait`` (a gang member whose fellow member binds on the same node).
        """
        try:
            with self._bind_locks.hold(uid):
                return self._bind(namespace, name, uid=uid, node=node, wait_s=lock_wait_s)
        finally:
            self.reservations.release(uid)  # its lock (or nothing) speaks for it now

    def _bind(
        self, namespace: str, name: str, *, uid: str, node: str, wait_s: float | None
    ) -> Allocation | None:
        pod = self.store.get_pod(namespace, name)
        if not (pod.get("spec") or {}).get("nodeName") and not self.store.pods_settled():
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
        request = read_pod_request(pod, self.manager)
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
        # The node lock only where a device plugin could not tell this pod from another in
        # flight (facts.lockmode): HAMi's protocol there, none where PodResources tells.
        try:
            locked = needs_node_lock(
                self.store.cached_node(node),
                [self.manager.device_type(v) for v in sorted(request.vendors)],
            )
        except HamiError as exc:
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {exc}")
            raise
        written: str | None = None
        if locked:
            written = self._lock(pod, node, now, wait_s=wait_s)
        try:
            with self._node_guards.hold(node):
                # One refit and Binding at a time per node in this process: without a node
                # lock, two binds must not both fit the last slice (the Binding puts the
                # pod in the cache at once, so the next refit counts it).
                allocation = self._write_binding(pod, node, now, locked=locked, written=written)
        except _Done as done:
            return done.allocation
        except _KeepLock as keep:
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {keep.cause}")
            raise keep.cause from None
        except Exception as exc:
            if locked:
                self._undo(pod, node, written=written)
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {exc}")
            raise
        if locked:
            # HAMi's lock-mode nodes keep HAMi's label too (PROTOCOL.md §3: HAMi's
            # vGPUmonitor selects its node's pods by it; nothing of ours reads it). The pod
            # is bound and annotated already: a failure here is only logged.
            try:
                self.store.patch_pod_metadata(namespace, name, labels={keys.VGPU_NODE: node})
            except HamiError as exc:
                log.warning(
                    "pod %s/%s: cannot set the %s label: %s", namespace, name, keys.VGPU_NODE, exc
                )
        if self.success_events:
            self._event(
                pod,
                "Normal",
                "BindingSucceed",
                f"bound to {node}: {describe(allocation, self._cores_units())}",
            )
        return allocation

    def _lock(
        self, pod: KubeObject, node: str, now: dt.datetime, *, wait_s: float | None = None
    ) -> str | None:
        """Take the node lock for ``pod`` (``acquire_node_lock``), waiting ``wait_s`` for
        another pod's when longer than ``--bind-lock-wait``; the value written, or None
        when an earlier bind of the pod holds it."""
        meta = pod["metadata"]
        started = time.monotonic()
        try:
            written = acquire_node_lock(
                self.store,
                node,
                namespace=meta["namespace"],
                pod=meta["name"],
                now=now,
                expiry_s=self.manager.config.node_lock_expiry_s,
                wait_s=self.lock_wait_s if wait_s is None else max(wait_s, self.lock_wait_s),
                takeover_after_s=self.longest_bind_s,
                wait=self.state.wait_node_change,
            )
        except HamiError as exc:
            self._observe_lock(started, acquired=False)
            self._event(pod, "Warning", "BindingFailed", f"node {node}: {exc}")
            raise
        self._observe_lock(started, acquired=True)
        return written

    def _write_binding(
        self, pod: KubeObject, node: str, now: dt.datetime, *, locked: bool, written: str | None
    ) -> Allocation:
        """Refit ``pod`` on ``node`` and create the Binding carrying its allocation.
        Raises ``_Done`` when the Binding's outcome says the bind is over (landed, or the
        pod was bound here before)."""
        meta = pod["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        result = self.refit(pod, node)
        fit = result.fits.get(node)
        if fit is None or fit.allocation is None:
            reason = fit.reason if fit is not None else "node not found"
            raise ConflictError(f"pod {namespace}/{name} no longer fits node {node}: {reason}")
        allocation = fit.allocation
        annotations = allocation_annotations(allocation, self.manager, now)
        # From the cache (no read): our lock write is in it at once, a takeover (only
        # after ``longest_bind_s``) arrives by the watch long before.
        node_obj = self.store.cached_node(node)
        if locked and not holds_node_lock(node_obj, namespace=namespace, pod=name):
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
        if self.signer is not None:
            annotations[keys.ALLOCATION_SIGNATURE] = wire[keys.ALLOCATION_SIGNATURE] = self._sign(
                pod, node, wire
            )
        try:
            # The allocation rides on the Binding: one write, and the pod is never
            # seen annotated but unbound (an update of a pod kube-scheduler has
            # assumed but not yet seen bound sends it back to its queue).
            self.store.bind_pod(namespace, name, uid=uid, node=node, annotations=wire)
        except HamiError as exc:
            outcome = self._binding_outcome(pod, node, annotations, exc, written=written)
            if outcome is _BOUND_BY_US:
                raise _Done(allocation) from None
            if outcome is _BOUND_BEFORE:
                raise _Done(None) from None
            raise
        return allocation

    def _sign(self, pod: KubeObject, node: str, wire: Mapping[str, str]) -> str:
        """The signature of the allocation annotations ``wire`` of ``pod`` on ``node``:
        all of them but what the device plugin rewrites as it serves the pod (each
        vendor's ``*-devices-to-allocate`` and MIG-instance keys, the phase)."""
        assert self.signer is not None
        progress = set()
        for dtype in self.manager.device_types():
            progress.add(dtype.to_allocate_annotation)
            if dtype.mig_annotation:
                progress.add(dtype.mig_annotation)
        return self.signer.sign(pod, node=node, annotations=wire, unsigned=progress)

    def _cores_units(self) -> dict[str, CoresUnit]:
        """Vendor key -> the unit its compute is written in (``describe``)."""
        return {t.vendor: t.cores_unit for t in self.manager.device_types()}

    def _live_pod(self, namespace: str, name: str) -> KubeObject:
        """The pod as the API server has it now (not a cache that may lag our writes)."""
        return self.store.read_pod_live(namespace, name)

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
        """Give back the lock this bind wrote (conditional on its exact value). When the
        write fails (the API server unreachable, as around a restart), it is retried in
        the background until it lands or the lock is no longer ours, instead of leaving a
        lock that names a pod past its bind until it is taken over or expires."""
        try:
            release_node_lock_value(self.store, node, value)
        except HamiError as exc:
            log.warning("bind rollback: cannot release the lock of %s yet: %s", node, exc)
            threading.Thread(
                target=_release_later,
                args=(self.store, node, value),
                name=f"release-lock-{node}",
                daemon=True,
            ).start()

    def _observe_lock(self, started: float, *, acquired: bool) -> None:
        if self.lock_observer is not None:
            self.lock_observer(time.monotonic() - started, acquired)

    def _event(self, pod: KubeObject, type_: str, reason: str, message: str) -> None:
        try:
            self.events.record_event(pod, type=type_, reason=reason, message=message)
        except Exception as exc:  # events are best effort; never fail a bind for one
            log.warning("cannot record event %s: %s", reason, exc)


#: ``Binder._binding_outcome``'s answers.
_BOUND_BY_US = object()
_BOUND_BEFORE = object()


class _Done(Exception):  # a control-flow signal, not an error
    """The Binding's outcome ended the bind: return ``allocation``."""

    def __init__(self, allocation: Allocation | None) -> None:
        super().__init__("bind done")
        self.allocation = allocation


class _KeepLock(Exception):
    """The Binding's outcome is unknown: raise ``cause`` without releasing the lock."""

    def __init__(self, cause: HamiError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def allocation_annotations(
    allocation: Allocation, manager: BackendManager, now: dt.datetime
) -> dict[str, str | None]:
    """The annotations a bind writes for ``allocation`` (PROTOCOL.md §3): node, times,
    ``bind-phase: allocating``, each vendor's device list (to-allocate and allocated) and
    its MIG instances. The planner (``hami_core.defrag``) writes the same on the pods it
    places in its copy of the cluster, so their usage reads as a bound pod's."""
    stamp = str(int(now.timestamp()))
    out: dict[str, str | None] = {
        keys.VGPU_NODE: allocation.node,
        keys.VGPU_TIME: stamp,
        keys.BIND_TIME: stamp,
        keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
    }
    for vendor, devices in allocation.devices.items():
        dtype = manager.device_type(vendor)
        encoded = encode_pod_devices(devices)
        out[dtype.to_allocate_annotation] = encoded
        out[dtype.allocated_annotation] = encoded
        instances = mig_allocations_of(devices)
        if dtype.mig_annotation and instances:
            # HAMi's PatchAnnotations: the MIG instances chosen, for the device plugin
            out[dtype.mig_annotation] = encode_mig_allocations(instances)
    return out


#: How long a failed give-back of a written lock is retried (seconds between tries,
#: doubling): past the lock's own expiry nothing is left to give back.
RELEASE_RETRY_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0)


def _release_later(store: ClusterStore, node: str, value: str) -> None:
    """Retry ``release_node_lock_value`` until it lands (or finds the lock changed)."""
    for pause in RELEASE_RETRY_S:
        time.sleep(pause)
        try:
            release_node_lock_value(store, node, value)
        except NotFoundError:
            return  # the node is gone, and its lock with it
        except HamiError as exc:
            log.debug("bind rollback: the lock of %s is still not released: %s", node, exc)
            continue
        log.info("bind rollback: the lock of %s is released (retried)", node)
        return
    log.error("bind rollback: cannot release the lock of %s; it expires on its own", node)


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


__all__ = ["Binder", "EventSink", "KeyedLocks", "describe"]
