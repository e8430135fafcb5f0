"""A plan as text for people and as JSON for tools (``hami defrag -o json``).

JSON keys (stable; counts are integers, memory MiB, compute percent of one GPU):

- ``dry_run``: true (``hami defrag`` only plans);
- ``seconds``: planning time;
- ``summary``: ``pending``, ``fit_now`` (placed with no move), ``placed_after_moves``,
  ``without_plan``, ``moves``;
- ``pending``: per pending pod, in the order planned: ``pod`` (namespace/name),
  ``priority``, ``node`` (null: no plan), ``gpus``, ``moves`` (how many), ``reason``;
- ``moves``: in order: ``pod``, ``priority``, ``for`` (the pending pod), ``from``
  and ``to`` (each ``{"node", "gpus"}``);
- ``gpus``: every GPU the plan changes: ``node``, ``uuid``, ``memory_mib`` (its
  size), ``before`` and ``after`` (each ``{"memory_mib", "cores_pct", "sharers"}``);
- ``goal``: null for a plan of pending pods; for ``--goal``: ``asked`` (the goal as
  written back), ``met``, ``free_before`` (whole free GPUs found without moves),
  ``reached`` (after the plan), ``gpus`` (each ``{"node", "uuid"}``, in the order
  found). A goal plan's ``pending`` are the goal's pods (``(goal)/whole-gpu-K``), one
  per GPU sought, and each move's ``for`` names one;
- ``refused``: the snapshot's Pods left out of the plan because no API server could
  have stored them (``DefragInput.refused``), each ``{"pod", "reason"}``; empty when
  reading the API server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hami_core.protocol.documents import shown_text

from .apply import ApplyReport
from .planner import GpuLoad, Plan


def plan_data(plan: Plan, *, refused: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The plan as JSON-ready data (the module docstring's keys); ``refused``: the
    reading's refused pods (``DefragInput.refused``)."""

    def load(x: GpuLoad) -> dict[str, int]:
        return {"memory_mib": x.memory_mib, "cores_pct": x.cores_pct, "sharers": x.sharers}

    outcomes = plan.outcomes
    return {
        "dry_run": True,
        "seconds": round(plan.seconds, 3),
        "summary": {
            "pending": len(outcomes),
            "fit_now": sum(o.placed and not o.moves for o in outcomes),
            "placed_after_moves": sum(o.placed and bool(o.moves) for o in outcomes),
            "without_plan": sum(not o.placed for o in outcomes),
            "moves": len(plan.moves),
        },
        "pending": [
            {
                "pod": o.pod,
                "priority": o.priority,
                "node": o.node,
                "gpus": list(o.gpus),
                "moves": len(o.moves),
                "reason": o.reason,
            }
            for o in outcomes
        ],
        "moves": [
            {
                "pod": m.pod,
                "priority": m.priority,
                "for": m.for_pod,
                "from": {"node": m.from_node, "gpus": list(m.from_gpus)},
                "to": {"node": m.to_node, "gpus": list(m.to_gpus)},
            }
            for m in plan.moves
        ],
        "gpus": [
            {
                "node": g.node,
                "uuid": g.uuid,
                "memory_mib": g.memory_mib,
                "before": load(g.before),
                "after": load(g.after),
            }
            for g in plan.gpus
        ],
        "goal": None
        if plan.goal is None
        else {
            "asked": plan.goal.goal.text(),
            "met": plan.goal.met,
            "free_before": plan.goal.free_before,
            "reached": plan.goal.reached,
            "gpus": [{"node": n, "uuid": u} for n, u in plan.goal.gpus],
        },
        "refused": [{"pod": pod, "reason": why} for pod, why in (refused or {}).items()],
    }


def render_json(plan: Plan, *, refused: Mapping[str, str] | None = None) -> str:
    """The plan as ``hami defrag -o json`` prints it (``plan_data``)."""
    return json.dumps(plan_data(plan, refused=refused), indent=2) + "\n"


def render_text(plan: Plan) -> str:
    """The plan for people; names from the cluster are shown escaped (nothing in them
    may act on the terminal)."""
    data = plan_data(plan)
    s = data["summary"]
    lines = [
        f"{s['pending']} pending pod(s): {s['fit_now']} fit now, {s['placed_after_moves']} "
        f"fit after {s['moves']} move(s), {s['without_plan']} without a plan "
        f"({data['seconds']:.2f} s; dry run: nothing is evicted)"
    ]
    if plan.goal is not None:
        aim = plan.goal
        lines[0] = (
            f"goal {shown_text(aim.goal.text())}: {aim.reached} of {aim.goal.count} whole free GPU(s)"
            f" ({aim.free_before} free now, {aim.reached - aim.free_before} after {s['moves']} "
            f"move(s); {data['seconds']:.2f} s; dry run: nothing is evicted)"
        )
    for o in plan.outcomes:
        head = f"pod {shown_text(o.pod)} (priority {o.priority}): "
        if not o.placed:
            lines.append(head + f"no plan: {o.reason}")
            continue
        how = f"after {len(o.moves)} move(s)" if o.moves else "fits now"
        lines.append(head + f"{shown_text(str(o.node))} {', '.join(o.gpus)} {how}")
        for m in o.moves:
            lines.append(
                f"  move {shown_text(m.pod)} (priority {m.priority}): "
                f"{shown_text(m.from_node)} {', '.join(m.from_gpus)} -> "
                f"{shown_text(m.to_node)} {', '.join(m.to_gpus)}"
            )
    if plan.gpus:
        lines.append("GPUs changed (memory MiB, compute %, sharers: before -> after):")
        for g in plan.gpus:
            b, a = g.before, g.after
            lines.append(
                f"  {shown_text(g.node)} {g.uuid} ({g.memory_mib} MiB): "
                f"{b.memory_mib} MiB {b.cores_pct} % {b.sharers} -> "
                f"{a.memory_mib} MiB {a.cores_pct} % {a.sharers}"
            )
    return "\n".join(lines) + "\n"


def render_apply(report: ApplyReport) -> dict[str, Any]:
    """An ``apply.ApplyReport`` as JSON (``hami defrag --apply -o json``): ``steps`` (per
    eviction asked: ``pod``, ``fromNode``, ``fromGpus``, ``toNode``, ``toGpus`` (where
    the plan put its replacement), ``forPod``, ``result``: evicted, blocked-by-budget or
    gone), ``skipped`` (pending pod -> why it was not helped), ``evicted``, ``stopped``
    (why the run ended)."""
    return {
        "steps": [
            {
                "pod": s.move.pod,
                "fromNode": s.move.from_node,
                "fromGpus": list(s.move.from_gpus),
                "toNode": s.move.to_node,
                "toGpus": list(s.move.to_gpus),
                "forPod": s.move.for_pod,
                "result": s.result,
            }
            for s in report.steps
        ],
        "skipped": dict(report.skipped),
        "evicted": report.evicted,
        "stopped": report.stopped,
    }
