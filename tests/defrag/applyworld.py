"""A live cluster for the apply loop's tests: a ``MemoryCluster`` read afresh each round,
an Eviction API that may refuse (429) or leave the pod terminating, and ReplicaSets that
create a pending replacement for every pod evicted."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

from hami_core.cluster import MemoryCluster
from hami_core.cluster.eviction import MemoryEvictions
from hami_core.defrag.sources import DefragInput, is_pending_for
from hami_core.protocol.pods import is_live
from tests.defrag.world import SCHEDULER

_serial = itertools.count()


class Clock:
    """Wall time that only ``sleep`` moves."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Live:
    """The cluster the applier acts on (``read`` gives it a copy each round)."""

    def __init__(self, cluster: MemoryCluster, budgets: list[dict[str, Any]] | None = None):
        self.cluster = cluster
        self.budgets = [copy.deepcopy(b) for b in budgets or ()]
        self.evictions = FakeEvictions(self)
        for b in self.budgets:
            self.evictions.memory.add_budget(b)
        self.reads = 0
        self.namespace_labels: dict[str, dict[str, str]] = {}

    def read(self) -> DefragInput:
        self.reads += 1
        c = MemoryCluster()
        for n in self.cluster.list_nodes():
            c.add_node(n)
        pending = []
        for p in self.cluster.list_pods():
            if is_pending_for(p, SCHEDULER):
                pending.append(p)
            elif is_live(p) and p["spec"].get("nodeName"):
                c.add_pod(p)
        return DefragInput(
            cluster=c,
            pending=tuple(pending),
            budgets=tuple(copy.deepcopy(self.evictions.memory._budgets)),
            namespace_labels=self.namespace_labels,
        )

    def pod(self, key: str) -> dict[str, Any]:
        ns, _, name = key.partition("/")
        return self.cluster.get_pod(ns, name)

    def nominated(self) -> dict[str, str]:
        return {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["status"][
                "nominatedNodeName"
            ]
            for p in self.cluster.list_pods()
            if (p.get("status") or {}).get("nominatedNodeName")
        }


class FakeEvictions:
    """``Evictions`` over ``Live``: budgets as ``MemoryEvictions``; ``refuse`` answers 429
    for the pods it names (a number: that many times, then accept); ``terminating`` leaves
    an evicted pod being deleted instead of gone; every accepted eviction of an owned pod
    creates its pending replacement (the ReplicaSet controller)."""

    def __init__(self, live: Live) -> None:
        self.live = live
        self.memory = MemoryEvictions(live.cluster)
        self.refuse: dict[str, int] = {}
        self.terminating = False
        self.asked: list[str] = []
        self.evicted: list[str] = []
        self.nominations: list[tuple[str, str]] = []
        self.on_evict: Callable[[str], None] | None = None

    def evict(self, namespace: str, name: str, *, uid: str) -> bool:
        key = f"{namespace}/{name}"
        self.asked.append(key)
        if self.refuse.get(key, 0) > 0:
            self.refuse[key] -= 1
            self.memory._check(namespace, name, uid)
            return False
        pod = self.memory._check(namespace, name, uid)
        if pod["metadata"].get("deletionTimestamp"):
            return True  # already leaving: the API server accepts, nothing changes
        if self.terminating:
            if not self._spend(pod):
                return False
            pod["metadata"]["deletionTimestamp"] = "2026-12-02T06:00:00Z"
            self.live.cluster.add_pod(pod)
        elif not self.memory.evict(namespace, name, uid=uid):
            return False
        self.evicted.append(key)
        owners = pod["metadata"].get("ownerReferences")
        if owners:
            self._replace(pod)
        if self.on_evict is not None:
            self.on_evict(key)
        return True

    def _spend(self, pod: dict[str, Any]) -> bool:
        from hami_core.cluster.eviction import disruptions_allowed, selects

        mine = [b for b in self.memory._budgets if selects(b, pod)]
        if any(disruptions_allowed(b) <= 0 for b in mine):
            return False
        for b in mine:
            b["status"]["disruptionsAllowed"] = disruptions_allowed(b) - 1
        return True

    def _replace(self, pod: dict[str, Any]) -> None:
        new = copy.deepcopy(pod)
        meta = new["metadata"]
        meta["name"] = f"{meta['name'].split('~')[0]}~{next(_serial)}"
        meta["uid"] = f"uid-replacement-{meta['name']}"
        meta.pop("deletionTimestamp", None)
        meta.pop("resourceVersion", None)
        meta["creationTimestamp"] = "2026-12-02T06:00:00Z"
        meta["annotations"] = {
            k: v for k, v in meta.get("annotations", {}).items() if not k.startswith("hami.io/")
        }
        meta["labels"] = {
            k: v for k, v in meta.get("labels", {}).items() if k != "hami.io/vgpu-node"
        }
        new["spec"].pop("nodeName", None)
        new["status"] = {"phase": "Pending"}
        self.live.cluster.add_pod(new)

    def nominate(self, namespace: str, name: str, node: str) -> None:
        self.nominations.append((f"{namespace}/{name}", node))
        self.memory.nominate(namespace, name, node)

    def budgets(self, namespace: str) -> Any:
        return self.memory.budgets(namespace)
