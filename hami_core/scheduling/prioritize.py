"""The prioritize stage: a filter's 0..100 scores as kube-scheduler's 0..10, with the
nodes another pod is being bound to set aside.

kube-scheduler calls ``/prioritize`` right after ``/filter`` with the same pod, so the
answer comes from that filter's result (``FilterCache``) rather than a second fit.
"""

from __future__ import annotations

import collections
import datetime as dt
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .filtering import FilterResult
from .reservations import Reservations
from .scoring import extender_score
from .state import ClusterState


def prioritize(
    pod: Mapping[str, Any],
    names: Sequence[str],
    result: FilterResult,
    *,
    state: ClusterState,
    reservations: Reservations,
    now: dt.datetime,
    expiry_s: float,
) -> list[tuple[str, int]]:
    """``[(node, 0..10)]`` for ``names`` (each once) from the filter ``result`` holding
    them; infeasible nodes score 0.

    A feasible node that another pod is being bound to scores 0 while a free feasible
    node exists: its lock is held (the bind or the ``Allocate`` is still running; a lock
    older than ``expiry_s`` does not count), or it is reserved for another pod
    (``reservations``). The best node is reserved for this pod and left alone at the top.
    """
    meta = pod.get("metadata") or {}
    scores = result.scores
    busy = state.locked_by_others(
        {n for n in names if n in scores},
        namespace=str(meta.get("namespace") or "default"),
        pod=str(meta.get("name") or ""),
        now=now,
        expiry_s=expiry_s,
    )
    uid = str(meta.get("uid") or "")
    busy |= reservations.nodes(exclude_uid=uid)
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
        reservations.reserve(uid, best[2])
        out = unique_top(out, best[2])
    return out


def unique_top(scores: list[tuple[str, int]], best: str) -> list[tuple[str, int]]:
    """``scores`` with ``best`` alone at the top: the 0..10 scale ties many nodes, and
    kube-scheduler picks at random among equal totals, so a tie would send the pod to
    another node than the one reserved for its bind, and the burst's next pod to the
    same node, to wait for its lock. Others tied at the top go one below (best 1 when
    all are 0)."""
    top = max(score for _, score in scores)
    if top == 0:
        return [(n, 1 if n == best else score) for n, score in scores]
    return [(n, top - 1 if n != best and score == top else score) for n, score in scores]


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


__all__ = ["FilterCache", "prioritize", "unique_top"]
