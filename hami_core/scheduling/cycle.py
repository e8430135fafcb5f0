"""One pod's scheduling cycle: what every stage reads, computed once per pod and request.

kube-scheduler's framework keeps a ``CycleState`` per pod (``pkg/scheduler/framework/
cycle_state.go``) that its PreFilter plugins fill once and its Filter plugins read back
per node (``plugins/noderesources/fit.go`` computes the pod's request in PreFilter). Here
``begin_cycle`` is that PreFilter: the pod's device request, its policies, the view the
fit reads (the device policy chain written in), the pod's shape id (the per-node memo's
key) and its namespace's quota view; the filter engine (``filtering``) then reads it per
node.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import attrs

from hami_core.facts.podrequest import read_pod_request
from hami_core.facts.policy import (
    Policies,
    default_device_chain,
    resolve_policies,
    with_device_policy,
)
from hami_core.facts.quota import NO_QUOTA, QuotaView
from hami_core.model import DevicePolicy, DevicePolicyChain, NodePolicy, PodRequest
from hami_core.plugin import BackendManager


@attrs.frozen(kw_only=True)
class PodCycle:
    """One pod's cycle state, read by every stage.

    Attributes:
        pod: the Pod object as given.
        request: its device requests (``read_pod_request``).
        policies: the node and device policies in force (pod annotations over defaults).
        fit_view: the pod as the fit reads it: ``pod`` with its device policy chain
            written in (``policy.with_device_policy``).
        shape: a small int per distinct pod shape (requests, policies, annotations): the
            key of each node's memo of answers; -1 for a pod that asks no managed device.
        annotations: the pod's annotations as ``key=value`` lines, for the UUIDs a pod
            may name (``nodeclass.mentions``).
        quota: the namespace's quotas and what its other pods count against them.
        default_chain: the device policy of a pod that names none (the scheduler's
            override, else the configured default): what a holder without the
            annotation was placed under (``fitting.fit_pod_nodes``' ``mutex``).
    """

    pod: Mapping[str, Any]
    request: PodRequest
    policies: Policies
    fit_view: Mapping[str, Any]
    shape: int = -1
    annotations: str = ""
    quota: QuotaView = NO_QUOTA
    default_chain: DevicePolicyChain | None = None


class ShapeIds:
    """A small int per distinct pod shape, so the per-node memo lookup hashes an int
    rather than the request (hashed once per cycle here). Thread-safe; ids stay unique
    when the table is cleared (the counter never restarts)."""

    def __init__(self, *, size: int = 4096) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._ids: dict[Hashable, int] = {}
        self._next = itertools.count()

    def of(self, shape: Hashable) -> int:
        with self._lock:
            found = self._ids.get(shape)
            if found is None:
                if len(self._ids) > self._size:
                    self._ids.clear()
                found = self._ids[shape] = next(self._next)
            return found


def begin_cycle(
    pod: Mapping[str, Any],
    manager: BackendManager,
    *,
    shapes: ShapeIds,
    quota: Callable[..., QuotaView],
    node_policy: NodePolicy | None = None,
    device_policy: DevicePolicy | DevicePolicyChain | None = None,
) -> PodCycle:
    """The pod's cycle state (the PreFilter stage).

    Args:
        shapes: the scheduler's shape ids.
        quota: ``(namespace, exclude_uid=uid) ->`` the namespace's quota view, the
            pod's own charge left out (``ClusterState.quota_view``); asked only for a pod
            asking managed devices.
        node_policy / device_policy: the scheduler's overrides of the configured defaults.

    Raises:
        InvalidInputError: the pod's requests or policy annotations are invalid.
    """
    request = read_pod_request(pod, manager)
    policies = resolve_policies(pod, manager.config, node=node_policy, device=device_policy)
    if not request.wants_devices:  # not ours to judge: no stage reads more
        return PodCycle(pod=pod, request=request, policies=policies, fit_view=pod)
    ann = (pod.get("metadata") or {}).get("annotations") or {}
    return PodCycle(
        pod=pod,
        request=request,
        policies=policies,
        fit_view=with_device_policy(pod, policies.device_chain),
        shape=shapes.of((request.containers, policies, frozenset(ann.items()))),
        annotations="\n".join(f"{k}={v}" for k, v in ann.items()),
        quota=quota(request.namespace, exclude_uid=request.uid),
        default_chain=default_device_chain(manager.config, device_policy),
    )


__all__ = ["PodCycle", "ShapeIds", "begin_cycle"]
