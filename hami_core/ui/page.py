"""What the web view shows, as JSON (``GET /api/view``), built from one reading of the
cluster with the views of ``hami top`` (``hami_core.top.view``) and ``hami explain``
(``hami_core.explain.summary``), and cut down to what one viewer may see.

Shape (memory in MiB; compute in the ``coresUnit`` beside it, percent for most vendors)::

    {"schema": "hami.ui/v1", "generated": ISO-8601 time, "refreshSeconds": float,
     "viewer": {"user": str | null, "namespaces": null | [str]},   # null: all of them
     "usage": {"source": "prometheus" | null, "problem": str | null},
     "nodes": [{"name": str, "unregistered": {vendor: why},
                "gpus": [{"uuid", "index", "vendor", "model", "mode", "modeShown",
                          "healthy", "cordoned", "memoryTotalMiB", "memoryAllocatedMiB",
                          "memoryFreeMiB", "coresTotal", "coresAllocated", "coresUnit",
                          "sharers", "splitCount", "memoryUsedMiB": float | null,
                          "utilizationPct": float | null, "migInstances": [str],
                          "slices": [{"pod": "ns/name" | null,   # null: a namespace
                                      "namespace": str | null,   # the viewer may not see
                                      "memoryMiB": int, "cores": int,
                                      "mig": [str], "whole": bool}]}]}],
     "namespaces": [{"name": str, "pods": int, "pending": int,
                     "quota": [{"quota", "key", "used", "hard"}]}],
     "pending": [{"pod", "namespace", "name", "reason", "request", "quota"}],
     "pendingLeftOut": int,     # pending pods past the limit, not explained this time
     "refused": [{"pod", "namespace", "reason"}],  # a snapshot's Pods no API server
                                # could have stored: in nothing above (DefragInput.refused)
     "problem": str}            # only when the last reading failed: this page is older
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from typing import Any

from hami_core.defrag.sources import DefragInput
from hami_core.explain.summary import summarize
from hami_core.plugin import BackendManager
from hami_core.top.view import DeviceRow, DeviceUse, PodSlice, build_view

SCHEMA = "hami.ui/v1"


def build_page(
    read: DefragInput,
    manager: BackendManager,
    *,
    usage: Mapping[str, DeviceUse] | None = None,
    usage_problem: str | None = None,
    quota_namespaces: Collection[str] = (),
    pending_limit: int = 50,
    refresh_s: float = 5.0,
) -> dict[str, Any]:
    """Everything the page shows, for a viewer who may see every namespace.

    Args:
        read: the cluster as read once (nodes, bound pods, pending pods of ours).
        usage: device UUID -> what the monitors measure (None: no Prometheus given).
        usage_problem: why ``usage`` is missing although a Prometheus was given.
        quota_namespaces: namespaces holding ResourceQuotas (besides the pods' own).
        pending_limit: pending pods explained at most (the first ones read); the
            rest are counted in ``pendingLeftOut``.
        refresh_s: seconds between the page's polls.
    """
    view = build_view(read.cluster, manager, usage=usage)
    by_node: dict[str, list[dict[str, Any]]] = {}
    for row in view.devices:
        by_node.setdefault(row.node, []).append(_gpu(row))
    nodes = [
        {"name": n.node, "unregistered": dict(n.unregistered), "gpus": by_node.get(n.node, [])}
        for n in view.nodes
    ]
    pending = list(read.pending)
    holders: dict[str, set[str]] = {}
    for row in view.devices:
        for s in row.slices:
            holders.setdefault(_namespace(s.pod), set()).add(s.pod)
    waiting: dict[str, int] = {}
    for pod in pending:
        ns = str((pod.get("metadata") or {}).get("namespace") or "")
        waiting[ns] = waiting.get(ns, 0) + 1
    names = {*holders, *waiting, *quota_namespaces}
    summary = summarize(read, manager, pending[:pending_limit], names)
    namespaces = [
        {
            "name": ns,
            "pods": len(holders.get(ns, ())),
            "pending": waiting.get(ns, 0),
            "quota": list(summary.quotas.get(ns, ())),
        }
        for ns in sorted(names)
        if ns in holders or ns in waiting or ns in summary.quotas
    ]
    return {
        "schema": SCHEMA,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "refreshSeconds": refresh_s,
        "viewer": {"user": None, "namespaces": None},
        "usage": {"source": "prometheus" if usage is not None else None, "problem": usage_problem},
        "nodes": nodes,
        "namespaces": namespaces,
        "pending": list(summary.pending),
        "pendingLeftOut": max(0, len(pending) - pending_limit),
        "refused": [
            {"pod": pod, "namespace": _namespace(pod), "reason": why}
            for pod, why in sorted(read.refused.items())
        ],
    }


def for_viewer(
    page: Mapping[str, Any], *, user: str | None, namespaces: Collection[str] | None
) -> dict[str, Any]:
    """``page`` as a viewer sees it who may list pods in ``namespaces`` only (None: in
    all): other namespaces' slices keep their sizes (the GPU's totals show them anyway)
    but lose their pod and namespace; other namespaces' quotas, pending and refused pods
    are left out."""
    out = dict(page)
    if namespaces is None:
        out["viewer"] = {"user": user, "namespaces": None}
        return out
    allowed = set(namespaces)
    out["viewer"] = {"user": user, "namespaces": sorted(allowed)}
    out["nodes"] = [{**n, "gpus": [_gpu_for(g, allowed) for g in n["gpus"]]} for n in page["nodes"]]
    out["namespaces"] = [n for n in page["namespaces"] if n["name"] in allowed]
    out["pending"] = [p for p in page["pending"] if p["namespace"] in allowed]
    out["refused"] = [p for p in page["refused"] if p["namespace"] in allowed]
    return out


def page_namespaces(page: Mapping[str, Any]) -> set[str]:
    """Every namespace ``page`` names (slices, namespaces, pending and refused pods):
    those whose rights a viewer is checked for."""
    names = {n["name"] for n in page["namespaces"]}
    names |= {p["namespace"] for p in (*page["pending"], *page["refused"])}
    for node in page["nodes"]:
        for gpu in node["gpus"]:
            names |= {s["namespace"] for s in gpu["slices"] if s["namespace"] is not None}
    return names


def _gpu_for(gpu: Mapping[str, Any], allowed: set[str]) -> dict[str, Any]:
    slices = [
        s if s["namespace"] in allowed else {**s, "pod": None, "namespace": None}
        for s in gpu["slices"]
    ]
    return {**gpu, "slices": slices}


def _namespace(pod: str) -> str:
    return pod.split("/", 1)[0]


def _gpu(row: DeviceRow) -> dict[str, Any]:
    return {
        "uuid": row.uuid,
        "index": row.index,
        "vendor": row.vendor,
        "model": row.model,
        "mode": row.mode,
        "modeShown": row.mode_shown,
        "healthy": row.healthy,
        "cordoned": row.cordoned,
        "memoryTotalMiB": row.memory_total_mib,
        "memoryAllocatedMiB": row.memory_allocated_mib,
        "memoryFreeMiB": row.memory_free_mib,
        "coresTotal": row.cores_total_pct,
        "coresAllocated": row.cores_allocated_pct,
        "coresUnit": row.cores_unit,
        "sharers": row.sharers,
        "splitCount": row.split_count,
        "memoryUsedMiB": row.memory_used_mib,
        "utilizationPct": row.utilization_pct,
        "migInstances": list(row.mig_instances),
        "slices": [_slice(s, row) for s in row.slices],
    }


def _slice(s: PodSlice, row: DeviceRow) -> dict[str, Any]:
    """A slice's sizes in the GPU's own units: a pod holding it whole (its allocation
    unreadable, PROTOCOL.md §6) is drawn as the whole GPU."""
    return {
        "pod": s.pod,
        "namespace": _namespace(s.pod),
        "memoryMiB": row.memory_total_mib if s.whole else s.memory_mib,
        "cores": row.cores_total_pct if s.whole else row.unit.amount(s.cores_pct),
        "mig": list(s.mig_profiles),
        "whole": s.whole,
    }
