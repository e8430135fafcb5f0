"""The table and the JSON of ``hami top``."""

from __future__ import annotations

import json
from collections.abc import Mapping

from hami_core.model import CORES_UNITS, PERCENT
from hami_core.protocol.documents import printable

from .view import TopView


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _cores(by_unit: Mapping[str, Mapping[str, int]]) -> str:
    """Compute allocated of total per unit: ``30/200%``, ``30/200%, 76/608 CU``, ``-``."""
    parts = [
        CORES_UNITS.get(name, PERCENT).show_ratio(s["allocated"], s["total"])
        for name, s in by_unit.items()
    ]
    return ", ".join(parts) or "-"


def _used(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def render_table(view: TopView, *, wide: bool = False) -> str:
    """A fixed-width table: one row per device, then one per node, then the totals.

    Columns: memory as ``allocated/total MiB (percent)``, used memory (MiB, ``-`` when no
    monitor figures were given), compute allocated of total in the vendor's unit
    (``30/100%``, ``76/304 CU``, ``1/2 NeuronCores``; per unit on node rows), utilization,
    sharers of
    the split count, health, the mode (``shim``, ``mps``, ``mig`` with the instances
    held) and the pods holding the device (the first two and a count).

    ``wide`` adds the device's UUID, its free memory, and every pod with its slice
    (``ns/pod(20000MiB,30%)``, ``ns/pod(mig 1g.10gb)``), then a table of one row per pod
    and device (``pod_rows``): priority (and PriorityClass), gang group, the slice's mode,
    memory used of the limit and compute used of the limit, "n/a" where the monitors'
    figures are not known, and under it why (none given, or each endpoint that could not
    be read).

    Every name comes from the cluster or a file: cells are ``printable`` (no terminal
    escape sequence or bidirectional override reaches the terminal).
    """
    header = ["NODE", "GPU", "TYPE", "MODE", "HEALTH", "MEMORY ALLOC/TOTAL", "USED", "CORES"]
    header += ["UTIL", "SHARERS", "PODS"]
    if wide:
        header[2:2] = ["UUID"]
        header[-1:-1] = ["MEMORY FREE"]
    rows = [header]
    for d in view.devices:
        health = "ok" if d.healthy else "UNHEALTHY"
        if d.cordoned:
            health += ",cordoned"
        if wide:
            pods = [s.show(d.unit) for s in d.slices] or list(d.pods)
        else:
            pods = list(d.pods) if len(d.pods) <= 2 else [*d.pods[:2], f"+{len(d.pods) - 2}"]
        row = [
            d.node,
            str(d.index),
            d.model or d.vendor,
            d.mode_shown,
            health,
            f"{d.memory_allocated_mib}/{d.memory_total_mib} MiB ({_pct(d.memory_allocated_mib, d.memory_total_mib)})",
            _used(d.memory_used_mib),
            d.unit.show_ratio(d.cores_allocated_pct, d.cores_total_pct),
            "-" if d.utilization_pct is None else f"{d.utilization_pct:.0f}%",
            f"{d.sharers}/{d.split_count}",
            ",".join(pods) or "-",
        ]
        if wide:
            row[2:2] = [d.uuid]
            row[-1:-1] = [f"{d.memory_free_mib} MiB"]
        rows.append(row)
    lines = _columns(rows)
    if wide:
        lines += ["", *_columns(pod_rows(view))]
        if view.usage_source is None:
            lines.append("usage: n/a (no --monitor or --prometheus given)")
    lines += [f"usage: n/a from {why}" for why in view.unreachable]
    node_rows = [
        [
            "NODE",
            "GPUS",
            "UNHEALTHY",
            "MEMORY FREE",
            "MEMORY ALLOC/TOTAL",
            "USED",
            "CORES",
            "INVENTORY",
        ]
    ]
    for n in view.nodes:
        inventory = "; ".join(f"{v}: {why}" for v, why in sorted(n.unregistered.items())) or "ok"
        node_rows.append(
            [
                n.node,
                str(n.devices),
                str(n.unhealthy),
                f"{n.memory_free_mib} MiB",
                f"{n.memory_allocated_mib}/{n.memory_total_mib} MiB ({_pct(n.memory_allocated_mib, n.memory_total_mib)})",
                _used(n.memory_used_mib),
                _cores(n.cores_by_unit),
                inventory,
            ]
        )
    t = view.totals()
    summary = (
        f"{t['devices']} devices ({t['unhealthy']} unhealthy): "
        f"{t['memory_free_mib']} MiB free of {t['memory_total_mib']} MiB, "
        f"{t['memory_allocated_mib']} MiB allocated ({_pct(t['memory_allocated_mib'], t['memory_total_mib'])}), "
        f"compute {_cores(t['cores_by_unit'])} allocated"
    )
    return "\n".join([*lines, "", *_columns(node_rows), "", printable(summary)]) + "\n"


def pod_rows(view: TopView) -> list[list[str]]:
    """The header and one row per pod and device, in the devices' order: ``POD NODE GPU
    UUID PRIORITY GROUP MODE MEMORY USED/LIMIT COMPUTE USED/LIMIT``; priority as
    ``1000 (high-priority)`` with its PriorityClass, memory as ``12288 of 40960 MiB``,
    compute as ``12% of 50%`` in the vendor's unit (``-`` where it accounts none)."""
    rows = [
        [
            "POD",
            "NODE",
            "GPU",
            "UUID",
            "PRIORITY",
            "GROUP",
            "MODE",
            "MEMORY USED/LIMIT",
            "COMPUTE USED/LIMIT",
        ]
    ]
    for d in view.devices:
        unit = d.unit
        for s in d.slices:
            priority = str(s.priority) + (f" ({s.priority_class})" if s.priority_class else "")
            used = "n/a" if s.memory_used_mib is None else f"{s.memory_used_mib:.0f}"
            limit = "whole" if s.whole else f"{s.memory_mib} MiB"
            if not unit.accounted:
                compute = "-"
            else:
                busy = "n/a" if s.utilization_pct is None else f"{s.utilization_pct:.0f}%"
                share = "whole" if s.whole else unit.show(unit.amount(s.cores_pct))
                compute = f"{busy} of {share}"
            rows.append(
                [
                    s.pod,
                    d.node,
                    str(d.index),
                    d.uuid,
                    priority,
                    s.group or "-",
                    d.slice_mode(s),
                    f"{used} of {limit}",
                    compute,
                ]
            )
    return rows


def render_json(view: TopView) -> str:
    """``{"devices": [...], "nodes": [...], "totals": {...}, "usage": {"source": str |
    null, "unreachable": [str]}}`` (each device's ``slices`` with the pod's priority,
    priority_class, group, memory_used_mib and utilization_pct), keys in snake_case with
    units in their names (MiB, pct); a device's ``cores_*_pct`` are in its
    ``cores_unit`` (percent for most vendors), node and total ``cores_*_pct`` sum the
    percent devices and ``cores_by_unit`` every unit."""
    return json.dumps(view.as_json(), indent=2) + "\n"


def _columns(rows: list[list[str]]) -> list[str]:
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
