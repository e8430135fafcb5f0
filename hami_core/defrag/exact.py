"""The fewest evictions by an integer program (HiGHS), for clusters small enough to solve.

The planner's search (``planner``) chooses one eviction set per node and pending pod in
turn; an integer program chooses, for all the pending pods of one priority at once,
which movable pods stay and where the moved and pending ones go, over the whole
cluster: the most pending pods placed (older first among equals), then the fewest
evictions. The planner asks it first when HiGHS is installed (``hami-core[defrag]``)
and the program is small (``MAX_TERMS``), and carries its answer out through the
scheduler's own fit, GPU by GPU (``Planner._exact``); when HiGHS is absent, the
program is too large, finds nothing in its time, or the fit refuses any step, the
planner's search plans as before. So the program never decides a placement alone.

The model (a placement's facts as the scheduler counts them, ``DeviceUsage``): per GPU,
memory (MiB), compute (percent) and sharer slots; a request of ``count`` GPUs on one
node, each distinct, with the same memory (MiB, or percent of each GPU) and compute on
each; an exclusive request (compute 100) alone on its GPU. Pods of one shape are
interchangeable, so placements are counted per shape (node, GPU), as
``benchmarks/bench_defrag.py``'s proof of the fewest evictions counts them.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
from collections.abc import Sequence
from typing import Any

import attrs

#: Annotations that change where an NVIDIA pod may go (docs/PROTOCOL.md §5).
log = logging.getLogger(__name__)

FILTERS = frozenset(
    {
        "nvidia.com/use-gputype",
        "hami.io/gpu-type",
        "nvidia.com/nouse-gputype",
        "nvidia.com/use-gpuuuid",
        "hami.io/gpu-uuid-include",
        "hami.io/gpu-uuid-white-list",
        "nvidia.com/nouse-gpuuuid",
        "hami.io/gpu-uuid-exclude",
        "nvidia.com/numa-bind",
        "hami.io/numa-hint",
        "nvidia.com/vgpu-mode",
        "hami.io/gpu-scheduler-policy",
    }
)
#: The largest program tried: (shapes x GPUs) + movable pods. Above it, the search alone.
MAX_TERMS = 6000
#: Seconds HiGHS may take for one priority's program (its best answer then, if any).
DEFAULT_TIME_LIMIT_S = 2.0


@functools.cache
def available() -> bool:
    """Whether HiGHS (``highspy``, the ``defrag`` extra) imports: an installed but broken
    one (its numpy missing, say) leaves the planner to its search, as an absent one does."""
    try:
        importlib.import_module("highspy")
    except ImportError as exc:
        if importlib.util.find_spec("highspy") is not None:
            log.warning("highspy is installed but does not import (%s): search alone", exc)
        return False
    return True


@attrs.frozen(kw_only=True)
class Shape:
    """What a pod asks of each of ``count`` distinct GPUs of one node."""

    vendor: str
    count: int
    memory_mib: int
    memory_pct: int
    cores_pct: int

    def memory_on(self, gpu_memory_mib: int) -> int:
        return self.memory_mib or gpu_memory_mib * self.memory_pct // 100


@attrs.frozen(kw_only=True)
class Gpu:
    """One GPU the program may place on: its size, and the load of the pods that stay
    whatever the program chooses (unmovable ones)."""

    node: str
    uuid: str
    vendor: str
    memory_mib: int
    cores_pct: int
    slots: int
    fixed_memory_mib: int
    fixed_cores_pct: int
    fixed_slots: int


@attrs.frozen(kw_only=True)
class Mover:
    """A movable running pod: what it holds per GPU now, and its shape if moved."""

    key: str
    shape: Shape
    holds: tuple[tuple[str, int, int], ...]  # (uuid, MiB, percent)
    budgets: tuple[str, ...]  # the disruption budgets that cover it


@attrs.frozen(kw_only=True)
class Answer:
    """The program's answer: the pods to evict, and per placed pod (pending or moved)
    its node and GPUs; ``proven``: optimal (else the best found in the time)."""

    evict: tuple[str, ...]
    places: dict[str, tuple[str, tuple[str, ...]]]
    proven: bool


def solve(
    gpus: Sequence[Gpu],
    movers: Sequence[Mover],
    pending: Sequence[tuple[str, Shape]],
    budgets_left: dict[str, int],
    *,
    max_evictions: int,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
) -> Answer | None:
    """The most of ``pending`` (in queue order: older first among equals) placed, then
    the fewest of ``movers`` evicted, every evicted one placed again, at most
    ``max_evictions`` and ``budgets_left[b]`` of those a budget ``b`` covers.

    Returns None when the program is too large (``MAX_TERMS``), HiGHS is not installed,
    or no answer was found in ``time_limit_s``."""
    shapes = sorted({m.shape for m in movers} | {s for _, s in pending}, key=attrs.astuple)
    if not pending or len(shapes) * len(gpus) + len(movers) > MAX_TERMS or not available():
        return None
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 0.0)
    nodes = sorted({g.node for g in gpus})
    on_node = {n: [g for g in gpus if g.node == n] for n in nodes}
    # movers alike (shape, what they hold where, budgets) are interchangeable: one
    # integer per group, how many of it stay
    groups: dict[tuple[Any, ...], list[Mover]] = {}
    for m in movers:
        groups.setdefault((m.shape, m.holds, m.budgets), []).append(m)
    kinds = list(groups.values())
    stay = [h.addIntegral(lb=0, ub=len(k)) for k in kinds]
    placed = [h.addBinary() for _ in pending]
    bound = len(movers) + len(pending)
    y: dict[tuple[int, str], Any] = {}  # pods of a shape placed on a node
    c: dict[tuple[int, str], Any] = {}  # pods of a shape on a GPU
    for s, shape in enumerate(shapes):
        exclusive = shape.cores_pct >= 100
        for n in nodes:
            fits = [
                g
                for g in on_node[n]
                if g.vendor == shape.vendor
                and g.memory_mib - g.fixed_memory_mib >= shape.memory_on(g.memory_mib)
                and g.cores_pct - g.fixed_cores_pct >= shape.cores_pct
                and g.slots - g.fixed_slots >= 1
                and not (exclusive and g.fixed_slots)
            ]
            if len(fits) < shape.count:
                continue
            y[s, n] = h.addIntegral(lb=0, ub=bound)
            for g in fits:
                c[s, g.uuid] = h.addIntegral(lb=0, ub=1 if exclusive else bound)
                h.addConstr(c[s, g.uuid] - y[s, n] <= 0)
            h.addConstr(sum(c[s, g.uuid] for g in fits) - shape.count * y[s, n] == 0)
        moved = [len(k) - stay[i] for i, k in enumerate(kinds) if k[0].shape == shape]
        new = [placed[j] for j, (_, p) in enumerate(pending) if p == shape]
        here = [v for (t, _), v in y.items() if t == s]
        if here:
            h.addConstr(sum(here) - sum(moved) - sum(new) == 0)
        else:  # no node takes the shape: none of it moves or is placed
            for i, k in enumerate(kinds):
                if k[0].shape == shape:
                    h.addConstr(stay[i] >= len(k))
            for v in new:
                h.addConstr(v <= 0)
    holders: dict[str, list[tuple[int, int, int]]] = {}
    for i, k in enumerate(kinds):
        for uuid, mem, cores in k[0].holds:
            holders.setdefault(uuid, []).append((i, mem, cores))
    for g in gpus:
        here_c = [(shapes[s], v) for (s, uuid), v in c.items() if uuid == g.uuid]
        held = holders.get(g.uuid, [])
        if not here_c:
            continue
        h.addConstr(
            sum(mem * stay[i] for i, mem, _ in held)
            + sum(sh.memory_on(g.memory_mib) * v for sh, v in here_c)
            <= g.memory_mib - g.fixed_memory_mib
        )
        h.addConstr(
            sum(cores * stay[i] for i, _, cores in held) + sum(sh.cores_pct * v for sh, v in here_c)
            <= g.cores_pct - g.fixed_cores_pct
        )
        # slots; an exclusive pod leaves none to anyone else
        h.addConstr(
            sum(stay[i] for i, _, _ in held)
            + sum((g.slots if sh.cores_pct >= 100 else 1) * v for sh, v in here_c)
            <= g.slots - g.fixed_slots
        )
    evicted = sum(len(k) - stay[i] for i, k in enumerate(kinds))
    for key, left in budgets_left.items():
        covered = [len(k) - stay[i] for i, k in enumerate(kinds) if key in k[0].budgets]
        if covered:
            h.addConstr(sum(covered) <= max(left, 0))
    if kinds:
        h.addConstr(evicted <= max_evictions)
    # lexicographic: more pending placed > older ones placed > fewer evictions
    waits = len(pending)
    unit = len(movers) + 1
    h.minimize(
        evicted - sum(unit * (waits * waits + 1 + waits - j) * placed[j] for j in range(waits))
        if kinds
        else sum(-(waits - j + 1) * placed[j] for j in range(waits))
    )
    status = h.getModelStatus()
    proven = status == highspy.HighsModelStatus.kOptimal
    if not proven and h.getInfo().primal_solution_status != 2:  # no feasible answer
        return None
    values = h.getSolution().col_value
    return _answer(values, kinds, pending, shapes, y, c, stay, placed, on_node, proven)


def _answer(
    values: Sequence[float],
    kinds: Sequence[Sequence[Mover]],
    pending: Sequence[tuple[str, Shape]],
    shapes: Sequence[Shape],
    y: dict[tuple[int, str], Any],
    c: dict[tuple[int, str], Any],
    stay: Sequence[Any],
    placed: Sequence[Any],
    on_node: dict[str, list[Gpu]],
    proven: bool,
) -> Answer:
    """The program's values as pods' places: per shape and node, its count's GPU sets
    (each time the ``count`` GPUs with the most of that shape left, which splits any
    per-GPU counts within the node's total and at most one per pod and GPU), handed to
    the placed pending pods in queue order, then to the evicted pods."""

    def val(var: Any) -> int:
        value: float = values[var.index]
        return round(value)

    # of a group, the last ones by key go (any would do: they are alike)
    evict = [
        m.key for i, k in enumerate(kinds) for m in sorted(k, key=lambda m: m.key)[val(stay[i]) :]
    ]
    slots: dict[int, list[tuple[str, tuple[str, ...]]]] = {}
    for (s, n), var in y.items():
        left = {g.uuid: val(c[s, g.uuid]) for g in on_node[n] if (s, g.uuid) in c}
        for _ in range(val(var)):
            chosen = sorted(left, key=lambda u: (-left[u], u))[: shapes[s].count]
            for u in chosen:
                left[u] -= 1
            slots.setdefault(s, []).append((n, tuple(sorted(chosen))))
    places: dict[str, tuple[str, tuple[str, ...]]] = {}
    index = {shape: s for s, shape in enumerate(shapes)}
    wanting = [(k, sh) for j, (k, sh) in enumerate(pending) if val(placed[j])]
    shape_of = {m.key: m.shape for k in kinds for m in k}
    wanting += [(key, shape_of[key]) for key in evict]
    for key, shape in wanting:
        places[key] = slots[index[shape]].pop(0)
    return Answer(evict=tuple(evict), places=places, proven=proven)
