"""The reservation state: which node ``/prioritize`` answered best for a pod whose bind
has not arrived yet (kube-scheduler binds asynchronously).

Until that bind comes (or ``EXPECTED_BIND_S`` passes) the node counts as taken by that
pod: another pod's ``/prioritize`` scores it 0 while a free feasible node exists, so a
burst of pods does not queue behind one node's lock. The bind itself takes the node
lock, which then speaks for the pod (``nodelock``), and releases its reservation.
"""

from __future__ import annotations

import threading
import time

#: How long a node answered best for a pod counts as taken by that pod's bind.
EXPECTED_BIND_S = 2.0


class Reservations:
    """Pod uid -> (node, when reserved). Thread-safe."""

    def __init__(self, *, expected_bind_s: float = EXPECTED_BIND_S) -> None:
        self.expected_bind_s = expected_bind_s
        self._lock = threading.Lock()
        self._by_uid: dict[str, tuple[str, float]] = {}

    def reserve(self, uid: str, node: str) -> None:
        """``node`` was answered best for pod ``uid``."""
        with self._lock:
            self._by_uid[uid] = (node, time.monotonic())

    def release(self, uid: str) -> None:
        """Pod ``uid``'s bind has run: its node lock (or nothing) speaks for it now."""
        with self._lock:
            self._by_uid.pop(uid, None)

    def nodes(self, *, exclude_uid: str) -> set[str]:
        """The nodes reserved for pods other than ``exclude_uid`` (expired ones dropped)."""
        now = time.monotonic()
        with self._lock:
            for uid in [u for u, (_, t) in self._by_uid.items() if now - t > self.expected_bind_s]:
                del self._by_uid[uid]
            return {n for u, (n, _) in self._by_uid.items() if u != exclude_uid}


__all__ = ["EXPECTED_BIND_S", "Reservations"]
