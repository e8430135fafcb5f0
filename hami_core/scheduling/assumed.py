"""Slices assumed for a pod between the filter's answer and its bind: kube-scheduler's
``AssumePod`` for the devices it ignores.

kube-scheduler 1.20 binds asynchronously: it filters the next pod while the previous
pod's ``/bind`` is still in flight. With no node lock on the signed path (PROTOCOL.md
§4a) nothing told the filter that the previous pod's slices were taken, so a later pod
could be answered the same node and refused at its bind ("no longer fits"), to wait in
kube-scheduler's backoff, or until its 60 s flush of unschedulable pods when nothing
else moves (seen in ``bench_pipeline``: about 2 % of a mixed burst, and a run whose
last pod waited 90 s). ``AssumedSlices.assume`` holds the answered placement in
``ClusterState`` (``ClusterState.hold``: every other pod's fit and quota count it, the
pod's own re-fit at bind leaves it out) until the pod is bound (the state lets go when
it sees ``spec.nodeName``), deleted, answered again (the hold is replaced) or
``ttl_s`` passes (kube-scheduler dropped the pod between its filter and its bind).
A gang member's reservation is never replaced: it already holds the member's slices.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.facts.holdings import HoldingsReader
from hami_core.model import Allocation
from hami_core.plugin import BackendManager

from .gangs import held_pod
from .state import ClusterState, Hold

#: Seconds an assumed placement is held without its bind: far above a bind's latency on
#: a loaded machine (hundreds of ms in ``bench_pipeline``), short enough that slices a
#: dropped pod never binds are free again soon.
ASSUMED_TTL_S = 10.0
#: ``Hold.why`` of an assumed placement.
WHY = "assumed until its bind"


class AssumedSlices:
    """The placements ``/filter`` answered and their pods' binds have not yet turned
    into bound pods. Thread-safe."""

    def __init__(
        self,
        state: ClusterState,
        manager: BackendManager,
        reader: HoldingsReader,
        *,
        ttl_s: float = ASSUMED_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        state: where the slices are held.
        manager / reader: how a bound pod's allocation annotations read (the same
            rule as a bound pod's holdings and quota charge).
        ttl_s: how long a placement is held without its bind.
        clock: monotonic seconds (tests pass a fake).
        """
        self._state = state
        self._manager = manager
        self._reader = reader
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._since: dict[str, float] = {}  # pod uid -> when its placement was assumed

    def assume(self, pod: Mapping[str, Any], allocation: Allocation) -> bool:
        """Hold ``allocation`` (the placement answered on ``allocation.node``) for
        ``pod`` until its bind; False when nothing was held: the pod has no UID, the
        node is not in the state, or a gang reservation already holds the pod's slices.
        Placements past ``ttl_s`` are let go first."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return False
        self.expire()
        existing = self._state.holds().get(uid)
        if existing is not None and existing.why != WHY:
            return False  # a gang's reservation speaks for this pod
        node = self._state.node(allocation.node)
        if node is None:
            return False
        bound = held_pod(pod, allocation, self._manager)
        held = Hold(
            uid=uid,
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            node=allocation.node,
            holdings=self._reader.holdings(bound, node.info),
            quota=self._reader.quota_charge(bound),
            why=WHY,
        )
        try:
            self._state.hold(held)
        except KeyError:  # the node left the state meanwhile
            return False
        with self._lock:
            self._since[uid] = self._clock()
        return True

    def expire(self) -> int:
        """Let go of placements held past ``ttl_s``; forget those the state let go
        (bound, deleted, replaced by a gang's reservation). Returns how many expired."""
        now = self._clock()
        holds = self._state.holds()
        expired = 0
        with self._lock:
            for uid, since in list(self._since.items()):
                held = holds.get(uid)
                if held is None or held.why != WHY:
                    del self._since[uid]
                elif now - since > self._ttl_s:
                    del self._since[uid]
                    self._state.unhold(uid)
                    expired += 1
        return expired

    def __len__(self) -> int:
        """Placements currently held."""
        with self._lock:
            return len(self._since)


__all__ = ["ASSUMED_TTL_S", "WHY", "AssumedSlices"]
