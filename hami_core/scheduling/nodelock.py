"""The node lock (PROTOCOL.md §4): one bind at a time per node.

Value ``<RFC3339 time>,<namespace>,<pod>`` in ``hami.io/mutex.lock``, taken with an
optimistic-concurrency patch. Released by its owner (exact match) or by the device
plugin after Allocate; expires after ``expiry_s``; taken over at once when the owner
pod is gone or finished; re-taking by the same pod is idempotent.
"""

from __future__ import annotations

import datetime as dt
import time

from hami_core.cluster.base import ClusterStore
from hami_core.errors import AnnotationError, ConflictError, NotFoundError
from hami_core.protocol.annotations import NODE_LOCK
from hami_core.protocol.lock import DEFAULT_LOCK_EXPIRY_S, NodeLock, decode_lock, encode_lock

from .usage import is_live

_ATTEMPTS = 5


def acquire_node_lock(
    store: ClusterStore,
    node: str,
    *,
    namespace: str,
    pod: str,
    now: dt.datetime,
    expiry_s: float = DEFAULT_LOCK_EXPIRY_S,
    wait_s: float = 0.0,
) -> None:
    """Take the lock of ``node`` for ``namespace/pod``.

    Args:
        wait_s: how long to wait (polling every 0.1 s) for a lock held by another live
            pod to be released before giving up; 0 gives up at once. The device plugin
            releases a lock within a second of Allocate, so a short wait saves
            kube-scheduler a whole retry cycle with back-off.

    Raises:
        ConflictError: another live pod holds an unexpired lock, or the node kept
            changing under us (temporary: kube-scheduler retries the bind).
        NotFoundError: the node does not exist.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            _try_acquire(store, node, namespace=namespace, pod=pod, now=now, expiry_s=expiry_s)
            return
        except LockHeldError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


class LockHeldError(ConflictError):
    """Another live pod holds an unexpired lock on the node."""


def _try_acquire(
    store: ClusterStore, node: str, *, namespace: str, pod: str, now: dt.datetime, expiry_s: float
) -> None:
    for _ in range(_ATTEMPTS):
        obj = store.get_node(node)
        meta = obj.get("metadata") or {}
        current = (meta.get("annotations") or {}).get(NODE_LOCK)
        if current:
            lock = _decode(current)
            if lock is not None:
                if lock.owned_by(namespace, pod):
                    return
                if not lock.expired(now, expiry_s=expiry_s) and _owner_alive(store, lock):
                    owner = f"{lock.namespace}/{lock.pod}" if lock.pod else "an unnamed owner"
                    raise LockHeldError(
                        f"node {node} is locked by {owner} since {lock.acquired_at:%Y-%m-%dT%H:%M:%SZ}"
                    )
        try:
            store.patch_node_annotations(
                node,
                {NODE_LOCK: encode_lock(now, namespace, pod)},
                resource_version=meta.get("resourceVersion"),
            )
            return
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


def _decode(value: str) -> NodeLock | None:
    try:
        return decode_lock(value)
    except AnnotationError:
        return None  # a malformed lock protects nothing: take it over


def _owner_alive(store: ClusterStore, lock: NodeLock) -> bool:
    if not lock.pod:
        return True  # HAMi's old time-only lock: only expiry frees it
    try:
        return is_live(store.get_pod(lock.namespace, lock.pod))
    except NotFoundError:
        return False
