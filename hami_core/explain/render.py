"""``hami explain``'s text: the answer of ``engine.explain`` for a person. Every name in
it comes from the cluster (tenants write pod names, annotations, node labels), so the
whole text is made ``printable``: no terminal escape reaches the terminal raw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.protocol.documents import printable
from hami_core.simulate.report import describe_request, unit_named


def _cores(amount: int | None, unit_name: str | None) -> str:
    return unit_named(unit_name).show(amount or 0)


def _devices(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for d in entries:
        if d["migProfile"]:
            mode = f"mig {d['migProfile']}"
        else:
            mode = {"hami-core": "shim"}.get(d["mode"], d["mode"] or "shim")
        out.append(
            f"    {d['container']}: #{d['index']} {d['uuid']} {d['model']}, "
            f"{d['memoryMiB']} MiB, {_cores(d['coresPct'], d['coresUnit'])} ({mode})"
        )
    return out


#: Nodes shown one by one in the text (the rest summed up by reason); JSON has them all.
NODES_SHOWN = 8


def _closeness(n: Mapping[str, Any]) -> tuple[int, int, int, str]:
    """Fitting nodes first, then those offering the most memory, then compute, by name."""
    return (
        0 if n["fits"] else 1,
        -(n["largestMemoryMiB"] or 0),
        -(n["largestCoresPct"] or 0),
        n["node"],
    )


def _node_lines(nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ``NODES_SHOWN`` nodes closest to taking the pod, each with its GPUs' codes
    (one line when every refused GPU has the same code), then the others by reason."""
    ordered = sorted(nodes, key=_closeness)
    out = []
    for n in ordered[:NODES_SHOWN]:
        if n["fits"]:
            out.append(f"    {n['node']}: fits")
            continue
        who = f" (container {n['container']})" if n["container"] else ""
        out.append(f"    {n['node']}: {n['reason']}{who}")
        refused = [d for d in n["devices"] if d["reason"] is not None]
        codes = {d["reason"] for d in refused}
        if len(refused) > 2 and len(codes) == 1:
            out.append(f"      {len(refused)} GPUs: {codes.pop()}")
            continue
        for d in refused:
            out.append(f"      #{d['index']} {d['uuid']}: {d['reason']}")
    rest = ordered[NODES_SHOWN:]
    if rest:
        counts: dict[str, int] = {}
        for n in rest:
            why = "fits" if n["fits"] else n["reason"]
            counts[why] = counts.get(why, 0) + 1
        summed = ", ".join(
            f"{k} x {why}" for why, k in sorted(counts.items(), key=lambda kv: -kv[1])
        )
        out.append(f"    and {len(rest)} more node(s): {summed} (-o json lists each)")
    return out


def render_text(data: Mapping[str, Any]) -> str:
    """The answer as lines of text (the same facts as ``-o json``)."""
    lines = [f"Pod {data['namespace']}/{data['name']}: {data['status']}"]
    if data["reason"]:
        lines.append(f"  reason: {data['reason']}")
    if data["status"] == "refused":  # nothing else was read of it
        return printable("\n".join(lines) + "\n", keep_newlines=True)
    lines.append(
        f"  scheduler: {data['schedulerName'] or '(unset)'}, priority {data['priority']}"
        + (f", group {data['group']}" if data["group"] else "")
    )
    if data["request"]:
        lines.append(f"  request: {describe_request(data['request'])}")
    if data["status"] == "placed":
        phase = f" (bind-phase {data['bindPhase']})" if data.get("bindPhase") else ""
        lines.append(f"  node: {data['node']}{phase}")
        lines += _devices(data["devices"]) or ["    no device slices"]
    if data["status"] == "pending" and "nodes" in data:
        lines.append("  nodes:")
        lines += _node_lines(data["nodes"]) or ["    no node to try"]
        largest = data["largest"]
        if largest is not None:
            hint = []
            if largest["memoryMiB"] is not None:
                hint.append(f"{largest['memoryMiB']} MiB")
            if largest["coresPct"] is not None:
                hint.append(_cores(largest["coresPct"], largest["coresUnit"]))
            lines.append(f"  largest that fits now: {', '.join(hint)} per GPU on {largest['node']}")
        for q in data["quota"]:
            over = ": over the quota" if q["over"] else ""
            lines.append(
                f"  quota {q['quota']}: {q['key']} used {q['used']} of {q['hard']}, "
                f"this pod {q['thisPod']}{over}"
            )
        for lock in data["nodeLocks"]:
            lines.append(
                f"  node lock: {lock['node']} held by {lock['holder']} since {lock['since']}"
            )
        pre = data["preemption"]
        if pre["victims"]:
            who = ", ".join(f"{v['pod']} (priority {v['priority']})" for v in pre["victims"])
            lines.append(f"  preemption would evict on {pre['node']}: {who}")
            tried, lower = pre.get("nodesTried", 0), pre.get("nodesWithLowerPriority", 0)
            if tried < lower or not pre.get("exact", True):
                scope = (
                    f"the {tried} of {lower} node(s) running lower-priority pods closest to fitting"
                )
                proof = (
                    "" if pre.get("exact", True) else "; victims that work, maybe not the fewest"
                )
                lines.append(f"    (a bounded dry run: {scope}{proof})")
        else:
            lines.append(f"  preemption: {pre['reason']}")
        con = data["consolidation"]
        if con["moves"]:
            lines.append(f"  consolidation: {con['reason']}")
            for m in con["moves"]:
                lines.append(
                    f"    move {m['pod']}: {m['fromNode']} {','.join(m['fromGpus'])}"
                    f" -> {m['toNode']} {','.join(m['toGpus'])}"
                )
        else:
            lines.append(f"  consolidation: {con['reason']}")
    return printable("\n".join(lines) + "\n", keep_newlines=True)
