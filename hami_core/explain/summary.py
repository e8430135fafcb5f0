"""Many pending pods' reasons at once, and the quotas of many namespaces, for the web view
(``hami ui``): for each pod the line ``hami explain`` gives as its ``reason``, from one
scheduler over one reading of the cluster. The dry runs of preemption and consolidation
are left to ``hami explain NAMESPACE/POD`` (they cost a search each)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from hami_core.defrag.movable import pod_key
from hami_core.defrag.sources import DefragInput
from hami_core.errors import InvalidInputError
from hami_core.plugin import BackendManager
from hami_core.scheduling.scheduler import Scheduler
from hami_core.simulate.report import request_entries

from .engine import _nodes, _quota, _reason, _request, _types, _with_quota


@attrs.frozen(kw_only=True)
class Summary:
    """What ``summarize`` found.

    Attributes:
        pending: one entry per pod asked about, in order::

            {"pod": "namespace/name", "namespace": str, "name": str,
             "reason": str,      # as ``hami explain``'s "reason" for a pending pod
             "request": [...],   # as ``hami explain``'s "request" (webhook-resolved)
             "quota": [...]}     # as ``hami explain``'s "quota" (used / hard, MiB or unit)

        quotas: namespace -> its enforced device quotas, each ``{"quota": name, "key":
            "limits.nvidia.com/gpumem", "used": int, "hard": int}`` (namespaces without
            an enforced quota left out).
    """

    pending: tuple[dict[str, Any], ...]
    quotas: Mapping[str, tuple[dict[str, Any], ...]]


def summarize(
    read: DefragInput,
    manager: BackendManager,
    pods: Iterable[Mapping[str, Any]],
    namespaces: Iterable[str],
) -> Summary:
    """The reasons of ``pods`` (pending pods of ``read``) and the quotas of ``namespaces``.

    A pod whose request cannot be read gets that problem as its reason. Nothing is
    written anywhere.
    """
    scheduler = Scheduler(read.cluster, manager, prefilter=False)  # every node names its reason
    types = _types(manager)
    pending = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        entry: dict[str, Any] = {
            "pod": pod_key(pod),
            "namespace": str(meta.get("namespace") or ""),
            "name": str(meta.get("name") or ""),
            "reason": "",
            "request": [],
            "quota": [],
        }
        pending.append(entry)
        request, problem = _request(pod, manager)
        if request is None:
            entry["reason"] = problem
            continue
        if not request.wants_devices:
            entry["reason"] = "asks no managed device"
            continue
        try:
            result = scheduler.filter(pod)
        except InvalidInputError as exc:  # a bad policy annotation
            entry["reason"] = str(exc)
            continue
        nodes = _nodes(read, scheduler, result, request, types)
        entry["request"] = request_entries(request, types)
        entry["quota"] = _quota(scheduler, entry["namespace"], request)
        entry["reason"] = _with_quota(_reason(result, nodes), entry["quota"], result)
    quotas: dict[str, tuple[dict[str, Any], ...]] = {}
    for namespace in sorted(set(namespaces)):
        view = scheduler.state.quota_view(namespace)
        if view.limits:
            quotas[namespace] = tuple(
                {
                    "quota": limit.quota,
                    "key": limit.key,
                    "used": view.used.of(limit.vendor, limit.measure),
                    "hard": limit.hard,
                }
                for limit in view.limits
            )
    return Summary(pending=tuple(pending), quotas=quotas)
