"""What this device plugin has answered but the API server may not show yet.

``Allocate`` answers kubelet first and writes the pod's progress (answered entries
emptied in ``*-devices-to-allocate``, then ``hami.io/bind-phase: success``) after it
(issue #13 item 4: nothing on kubelet's critical path but reads of the watch caches).
Until that write is back through the pod watch, the cache still shows the pod as it
was; kubelet's next ``Allocate`` for the pod's next container must nevertheless see the
first container as answered. ``ProgressOverlay`` keeps the annotations written (or
being written) per pod UID and lays them over the cached pod, until the cache carries
them itself.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping

from hami_core.cluster.base import KubeObject

#: How long an entry outlives its write at most (seconds): the watch delivers our own
#: write in milliseconds; this bounds the memory of a pod deleted meanwhile.
KEPT_S = 120.0
KEPT = 256


class ProgressOverlay:
    """Annotations this process wrote, or will write, per pod UID (thread-safe)."""

    def __init__(self, *, kept_s: float = KEPT_S, kept: int = KEPT) -> None:
        self._kept_s = kept_s
        self._kept = kept
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, dict[str, str | None]]] = OrderedDict()

    def record(self, uid: str, annotations: Mapping[str, str | None]) -> None:
        """Remember ``annotations`` (None: removed) as the pod's, newest last."""
        if not uid:
            return
        with self._lock:
            _, have = self._entries.pop(uid, (0.0, {}))
            self._entries[uid] = (time.monotonic(), {**have, **annotations})
            while len(self._entries) > self._kept:
                self._entries.popitem(last=False)

    def forget(self, uid: str) -> None:
        """Drop the entry of ``uid`` (its write failed for good: the cache is the truth)."""
        with self._lock:
            self._entries.pop(uid, None)

    def apply(self, pod: KubeObject) -> KubeObject:
        """``pod`` with this process's annotations laid over it (a shallow copy; the
        cached object is never modified), or ``pod`` itself when there are none or the
        pod already carries them all (the entry is then dropped)."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        now = time.monotonic()
        with self._lock:
            hit = self._entries.get(uid)
            if hit is None:
                return pod
            stamp, ours = hit
            have = meta.get("annotations") or {}
            if now - stamp > self._kept_s or all(have.get(k) == v for k, v in ours.items()):
                del self._entries[uid]
                return pod
        merged = {k: v for k, v in {**have, **ours}.items() if v is not None}
        return {**pod, "metadata": {**meta, "annotations": merged}}
