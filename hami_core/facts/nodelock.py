"""The node lock (PROTOCOL.md §4): one bind at a time per node.

Value ``<RFC3339 time>,<namespace>,<pod>`` in ``hami.io/mutex.lock``, taken with an
optimistic-concurrency patch. Released by its owner (exact match) or by the device
plugin after Allocate; expires ``expiry_s`` after its stamp, and a stamp in the future
(beyond ``CLOCK_SKEW_S``) is not trusted: such a lock counts as expired. Taken over at
once when the owner pod is gone, finished or bound to another node, and once older than
``takeover_after_s`` (the longest a bind can take) when the owner is not bound at all
(a scheduler that died mid-bind); a lock whose owner is bound to this node waits for the
device plugin's Allocate, and no longer once the owner is allocated (``hami.io/bind-phase``
``success`` or ``failed``), once kubelet reports it ``Running`` (every container passed
Allocate: nodes whose devices a vendor's own device plugin serves, such as Moore Threads'
or AWS Neuron's, never release our lock), or when the lock was not taken for the owner's
bind (its stamp far from the owner's ``hami.io/bind-time``: a retried bind re-took it).
Re-taking by the same pod is idempotent.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.cluster.base import ClusterStore
from hami_core.errors import AnnotationError, ConflictError, NotFoundError
from hami_core.protocol.annotations import (
    BIND_PHASE,
    BIND_PHASE_FAILED,
    BIND_PHASE_SUCCESS,
    BIND_TIME,
    NODE_LOCK,
)
from hami_core.protocol.lock import (
    DEFAULT_LOCK_EXPIRY_S,
    NodeLock,
    decode_lock,
    encode_lock,
    taken_for_bind,
)
from hami_core.protocol.pods import is_live

_ATTEMPTS = 5

#: The longest one bind can take (seconds): the lock wait (``--bind-lock-wait``, at most
#: a few seconds) plus four API calls, each bounded by the client's request timeout.
LONGEST_BIND_S = 30.0
#: How far in the future a stamp may be and still count as "now" (replicas' clocks).
CLOCK_SKEW_S = 5.0


def acquire_node_lock(
    store: ClusterStore,
    node: str,
    *,
    namespace: str,
    pod: str,
    now: dt.datetime,
    expiry_s: float = DEFAULT_LOCK_EXPIRY_S,
    wait_s: float = 0.0,
    takeover_after_s: float = LONGEST_BIND_S,
    wait: Callable[[float], object] | None = None,
) -> str | None:
    """Take the lock of ``node`` for ``namespace/pod``.

    Returns:
        The lock value written, or None when the lock already named the pod (an earlier
        bind of it took it: only that bind's outcome may release it).

    Args:
        takeover_after_s: a lock whose owner is not bound to any node is taken over
            once it is older than this (its bind cannot still be running).
        wait_s: how long to wait (polling every 0.1 s) for a lock held by another live
            pod to be released before giving up; 0 gives up at once. The device plugin
            releases a lock within a second of Allocate, so a short wait saves
            kube-scheduler a whole retry cycle with back-off.
        wait: blocks up to the given seconds for the node to change (the scheduler's
            state wakes it on the node's watch event, so a released lock is taken at
            once); default: sleep. Waits are at most 0.1 s, then the lock is read again.

    Raises:
        ConflictError: another live pod holds an unexpired lock, or the node kept
            changing under us (temporary: kube-scheduler retries the bind).
        NotFoundError: the node does not exist.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return _try_acquire(
                store,
                node,
                namespace=namespace,
                pod=pod,
                now=now,
                expiry_s=expiry_s,
                takeover_after_s=takeover_after_s,
            )
        except LockHeldError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            (wait or time.sleep)(min(0.1, left))


class LockHeldError(ConflictError):
    """Another live pod holds an unexpired lock on the node."""


def _try_acquire(
    store: ClusterStore,
    node: str,
    *,
    namespace: str,
    pod: str,
    now: dt.datetime,
    expiry_s: float,
    takeover_after_s: float,
) -> str | None:
    for attempt in range(_ATTEMPTS):
        # First from the cache (no read: the write's resourceVersion precondition refuses
        # a stale one with 409), then live after a conflict.
        obj = store.cached_node(node) if attempt == 0 else store.get_node(node)
        meta = obj.get("metadata") or {}
        current = (meta.get("annotations") or {}).get(NODE_LOCK)
        if current:
            lock = _decode(current)
            if lock is not None:
                if lock.owned_by(namespace, pod):
                    return None
                if _holds(store, lock, node, now, expiry_s=expiry_s, takeover_s=takeover_after_s):
                    owner = f"{lock.namespace}/{lock.pod}" if lock.pod else "an unnamed owner"
                    raise LockHeldError(
                        f"node {node} is locked by {owner} since {lock.acquired_at:%Y-%m-%dT%H:%M:%SZ}"
                    )
        value = encode_lock(now, namespace, pod)
        try:
            store.patch_node_annotations(
                node, {NODE_LOCK: value}, resource_version=meta.get("resourceVersion")
            )
            return value
        except ConflictError:
            continue
    raise ConflictError(f"node {node} changed {_ATTEMPTS} times while taking its lock")


def release_node_lock(store: ClusterStore, node: str, *, namespace: str, pod: str) -> bool:
    """Release the lock if ``namespace/pod`` owns it (exact match). Returns True if released."""
    for _ in range(_ATTEMPTS):
        try:
            obj = store.get_node(node)
        except NotFoundError:
            return False
        meta = obj.get("metadata") or {}
        current = (meta.get("annotations") or {}).get(NODE_LOCK)
        lock = _decode(current) if current else None
        if lock is None or not lock.owned_by(namespace, pod):
            return False
        try:
            store.patch_node_annotations(
                node, {NODE_LOCK: None}, resource_version=meta.get("resourceVersion")
            )
            return True
        except ConflictError:
            continue
    return False


def release_node_lock_value(store: ClusterStore, node: str, value: str) -> bool:
    """Release the lock of ``node`` if it still holds ``value`` exactly (the value the
    caller read, which names the owner): one conditional write, no read. Returns True
    if released."""
    return store.remove_node_annotation(node, NODE_LOCK, value=value)


def _decode(value: str) -> NodeLock | None:
    try:
        return decode_lock(value)
    except AnnotationError:
        return None  # a malformed lock protects nothing: take it over


def lock_age_s(lock: NodeLock, now: dt.datetime) -> float | None:
    """Seconds since the lock's stamp; None for a stamp further in the future than
    ``CLOCK_SKEW_S`` (untrusted: it would otherwise be honoured past its expiry)."""
    age = (now - lock.acquired_at).total_seconds()
    if age < -CLOCK_SKEW_S:
        return None
    return max(age, 0.0)


def _holds(
    store: ClusterStore,
    lock: NodeLock,
    node: str,
    now: dt.datetime,
    *,
    expiry_s: float,
    takeover_s: float,
) -> bool:
    """True while ``lock`` still protects ``node`` from another bind."""
    age = lock_age_s(lock, now)
    if age is None or age > expiry_s:
        return False
    if not lock.pod:
        return True  # HAMi's old time-only lock: only expiry frees it
    try:
        owner = store.get_pod(lock.namespace, lock.pod)
    except NotFoundError:
        return False
    if not is_live(owner):
        return False
    bound_to = (owner.get("spec") or {}).get("nodeName")
    if bound_to:
        if bound_to != node:
            return False
        ann = (owner.get("metadata") or {}).get("annotations") or {}
        if ann.get(BIND_PHASE) in (BIND_PHASE_SUCCESS, BIND_PHASE_FAILED):
            return False  # allocated (or failed): no device plugin needs the lock for it
        if taken_for_bind(lock, ann.get(BIND_TIME)) is False:
            # Stamped long after the owner was bound (a retried bind of a bound pod took
            # it, e.g. after an API-server restart): not its bind's lock, and no device
            # plugin serves the owner under it.
            return False
        # Bound here: wait for the device plugin's Allocate. kubelet allocates every
        # container's devices at pod admission, before any container starts, so a Running
        # owner is past Allocate even where nothing released the lock (a vendor's own
        # device plugin knows nothing of hami.io/mutex.lock).
        return (owner.get("status") or {}).get("phase") != "Running"
    return age <= takeover_s  # not bound: its bind may still run, for so long at most


def holds_node_lock(node: Mapping[str, Any], *, namespace: str, pod: str) -> bool:
    """True when the Node object's lock names ``namespace/pod`` (exact match)."""
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(NODE_LOCK)
    lock = _decode(value) if value else None
    return lock is not None and lock.owned_by(namespace, pod)
