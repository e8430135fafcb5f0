"""The nodes a filter judges (kube-scheduler's snapshot): the cached ``ClusterState``,
or Node objects given with the request (kube-scheduler's ``nodeCacheCapable: false``
form and the cluster autoscaler's template nodes).

A source answers per node name its ``NodeState`` or the wire reason it cannot be judged
(not in the cache, not selected by ``--node-label-selector``). A node the cache does not
know is judged from the object given: zero usage, no memo, no namespace quota (the
object is a simulation's, nothing is placed on it yet).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from hami_core.model import DeviceUsage, NodeInfo, ReasonCode

from .state import ClusterState, NodeState

#: Why a node the scheduler's cache does not hold cannot be judged.
NOT_CACHED = f"{ReasonCode.NODE_UNREGISTERED.value} (node not in the scheduler's cache)"


def unselected(node: Mapping[str, Any], selector: Mapping[str, str]) -> str:
    """The reason ``node`` is not ours under ``selector`` (HAMi's
    ``--node-label-selector``), or ""."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if all(labels.get(k) == v for k, v in selector.items()):
        return ""
    wanted = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    return f"{ReasonCode.NODE_UNREGISTERED.value} (node labels do not match {wanted})"


class NodeSource(Protocol):
    """Where the filter engine reads the nodes it judges. Read under the state lock."""

    @property
    def names(self) -> Sequence[str]:
        """The nodes to judge, each once, in the order asked."""
        ...

    def node(self, name: str, now: dt.datetime) -> NodeState | str:
        """The node's state, or the wire reason it cannot be judged. Raises when the
        node's object cannot be read (the engine marks that node unusable)."""
        ...

    def given(self, name: str) -> bool:
        """True for a node judged from a given object (zero usage, no memo, no quota)."""
        ...


class CachedNodes:
    """The named nodes from the incremental state (no API request, no copy)."""

    def __init__(
        self, state: ClusterState, names: Sequence[str], selector: Mapping[str, str]
    ) -> None:
        self.state = state
        self.names = list(dict.fromkeys(names))  # a node named twice is judged once
        self.selector = selector

    def node(self, name: str, now: dt.datetime) -> NodeState | str:
        node = self.state.node(name, now=now)
        if node is None:
            # A node we cannot see cannot be checked: say so rather than guess.
            return NOT_CACHED
        if self.selector:
            return unselected(node.obj, self.selector) or node
        return node

    def given(self, name: str) -> bool:
        return False


class GivenNodes:
    """Full Node objects: a node the cache knows is judged from the cache (its cached
    object and live usage, as ``CachedNodes``), another one from the object given."""

    def __init__(
        self,
        state: ClusterState,
        objects: Sequence[Mapping[str, Any]],
        selector: Mapping[str, str],
        read: Callable[[Mapping[str, Any]], NodeInfo],
    ) -> None:
        self.objects: dict[str, Mapping[str, Any]] = {}
        for obj in objects:  # a node given twice is judged once, as first given
            self.objects.setdefault(str((obj.get("metadata") or {}).get("name", "")), obj)
        self.names = list(self.objects)
        self.cached = CachedNodes(state, self.names, selector)
        self.templates = {n for n in self.names if state.node(n) is None}
        self.selector = selector
        self.read = read

    def node(self, name: str, now: dt.datetime) -> NodeState | str:
        if name not in self.templates:
            return self.cached.node(name, now)
        obj = self.objects[name]
        reason = unselected(obj, self.selector)
        if reason:
            return reason
        info = self.read(obj)
        usage = {
            d.uuid: DeviceUsage(device=d, cordoned=d.uuid in info.cordoned_uuids)
            for d in info.devices
        }
        return NodeState(name=info.name, obj=dict(obj), info=info, info_until=now, usage=usage)

    def given(self, name: str) -> bool:
        return name in self.templates


__all__ = ["NOT_CACHED", "CachedNodes", "GivenNodes", "NodeSource", "unselected"]
