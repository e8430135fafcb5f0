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

A GPU in ``mig`` mode by its geometry: one binary per placement of each profile (an
instance there), no two instances on one memory slice (the instances of pods that stay
keep theirs), at most its split count, its memory booked at the profiles' memory; a pod
of N GPUs there takes N instances of the node's MIG GPUs (several on one GPU allowed, as
``hami_nvidia.fit.several_instances``), each of a profile with the request's memory and
share of the SMs at least. The program may choose any such profile; the fit takes the
smallest with a free placement (HAMi's order), so smaller profiles are preferred (a cost
below one eviction) and the replay through the fit (``exactplan``) decides: an answer
the fit does not follow is dropped for the search.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

import attrs

from hami_core.model import MigPlacement, MigProfile

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


def describe(time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> str:
    """Which planner this process has, in one line for its start log: the integer
    program first (HiGHS's version, its size bound and time per priority) then the
    search, or the search alone and why (``available``; with ``time_limit_s`` 0 the
    program is off, ``Planner``'s ``exact_time_limit_s``)."""
    if not time_limit_s:
        return "the search alone (the integer program is off)"
    if not available():
        return (
            "the search alone (no HiGHS: the defrag extra, pip install 'hami-core[defrag]', "
            "is not installed; plans may evict more pods than the fewest that suffice, "
            "docs/consolidation.md)"
        )
    from importlib.metadata import PackageNotFoundError, version

    try:
        highs = f"highspy {version('highspy')}"
    except PackageNotFoundError:  # importable but not installed as a distribution
        highs = "highspy"
    return (
        f"the integer program ({highs}, up to {MAX_TERMS} terms, {time_limit_s:g} s per "
        "priority), then the search"
    )


_BANNER_LOCK = threading.Lock()
_banner_swallowed = False


def _quiet_highs() -> Any:
    """A new ``highspy.Highs``, HiGHS's banner kept off the process's standard output.

    HiGHS writes ``Running HiGHS <version> ... Copyright ...`` to file descriptor 1
    (C's stdio, not ``sys.stdout``) when the first ``Highs`` of a process is built,
    before any option can silence it: the standard output of ``hami defrag -o json``
    and ``hami explain -o json`` was then not JSON. The first one is built with
    descriptor 1 on ``os.devnull`` (under a lock; another thread's write to it in that
    instant is lost too); later ones print nothing.
    """
    global _banner_swallowed
    import highspy

    with _BANNER_LOCK:
        if _banner_swallowed:
            return highspy.Highs()
        sys.stdout.flush()  # what Python holds goes out before descriptor 1 moves
        saved = os.dup(1)
        try:
            with open(os.devnull, "wb") as null:
                os.dup2(null.fileno(), 1)
            try:
                h = highspy.Highs()
            finally:
                _flush_c_stdio()
                os.dup2(saved, 1)
        finally:
            os.close(saved)
        _banner_swallowed = True
        return h


def _flush_c_stdio() -> None:
    """``fflush(NULL)``: C's buffered output goes where descriptor 1 points now."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to ask: nothing buffered there
        pass


@attrs.frozen(kw_only=True)
class Shape:
    """What a pod asks of each of ``count`` distinct GPUs of one node."""

    vendor: str
    count: int
    memory_mib: int
    memory_pct: int
    cores_pct: int
    #: the one GPU mode the pod accepts (``nvidia.com/vgpu-mode``), "" for any
    mode: str = ""

    def memory_on(self, gpu_memory_mib: int) -> int:
        return self.memory_mib or gpu_memory_mib * self.memory_pct // 100

    def profiles_on(self, gpu: Gpu) -> list[MigProfile]:
        """The profiles of a MIG GPU an instance for this shape may be of (memory and
        share of the SMs at least the request's; ``hami_nvidia.mig``)."""
        if self.vendor != gpu.vendor or self.mode not in ("", "mig"):
            return []
        memory = self.memory_on(gpu.memory_mib)
        return [p for p in gpu.profiles if p.memory_mib >= memory and p.cores_pct >= self.cores_pct]


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
    #: a GPU in ``mig`` mode: its profiles, and where the instances that stay are
    profiles: tuple[MigProfile, ...] = ()
    fixed_instances: tuple[MigPlacement, ...] = ()


@attrs.frozen(kw_only=True)
class Mover:
    """A movable running pod: what it holds per GPU now, and its shape if moved."""

    key: str
    shape: Shape
    holds: tuple[tuple[str, int, int], ...]  # (uuid, MiB, percent)
    budgets: tuple[str, ...]  # the disruption budgets that cover it
    instances: tuple[tuple[str, MigPlacement], ...] = ()  # (uuid, where) on MIG GPUs


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

    h = _quiet_highs()
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
        groups.setdefault((m.shape, m.holds, m.budgets, m.instances), []).append(m)
    kinds = list(groups.values())
    stay = [h.addIntegral(lb=0, ub=len(k)) for k in kinds]
    placed = [h.addBinary() for _ in pending]
    bound = len(movers) + len(pending)
    y: dict[tuple[int, str], Any] = {}  # pods of a shape placed on a node's shared GPUs
    c: dict[tuple[int, str], Any] = {}  # pods of a shape on a GPU
    ym: dict[tuple[int, str], Any] = {}  # pods of a shape placed on a node's MIG GPUs
    z: dict[tuple[int, str, str], Any] = {}  # their instances of a profile on a GPU
    for s, shape in enumerate(shapes):
        exclusive = shape.cores_pct >= 100
        for n in nodes:
            mig = {g.uuid: shape.profiles_on(g) for g in on_node[n] if g.profiles}
            if any(mig.values()):
                ym[s, n] = h.addIntegral(lb=0, ub=bound)
                for gpu_uuid, profiles in mig.items():
                    for p in profiles:
                        z[s, gpu_uuid, p.name] = h.addIntegral(lb=0, ub=bound * shape.count)
                mine = [v for (t, u, _), v in z.items() if t == s and u in mig]
                h.addConstr(sum(mine) - shape.count * ym[s, n] == 0)
            fits = [
                g
                for g in on_node[n]
                if not g.profiles
                and shape.mode in ("", "hami-core")
                and g.vendor == shape.vendor
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
        here = [v for (t, _), v in [*y.items(), *ym.items()] if t == s]
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
    slices_cost: list[Any] = []  # slices of new instances: smaller profiles first
    for g in gpus:
        if g.profiles:
            slices_cost.extend(
                _mig_gpu(
                    h, g, kinds, stay, {(s, p): v for (s, u, p), v in z.items() if u == g.uuid}
                )
            )
            continue
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
    # below one eviction (or one rank of the queue) in all: a tie-break only
    eps = 1.0 / (1 + sum(_SLICES_MAX for g in gpus if g.profiles))
    smaller = eps * sum(slices_cost) if slices_cost else 0
    h.minimize(
        evicted
        - sum(unit * (waits * waits + 1 + waits - j) * placed[j] for j in range(waits))
        + smaller
        if kinds
        else sum(-(waits - j + 1) * placed[j] for j in range(waits)) + smaller
    )
    status = h.getModelStatus()
    proven = status == highspy.HighsModelStatus.kOptimal
    if not proven and h.getInfo().primal_solution_status != 2:  # no feasible answer
        return None
    values = h.getSolution().col_value
    return _answer(values, kinds, pending, shapes, y, c, stay, placed, on_node, proven, ym, z)


#: The most compute slices (and instances) of one MIG GPU: a bound for the tie-break.
_SLICES_MAX = 8


def _mig_gpu(
    h: Any,
    g: Gpu,
    kinds: Sequence[Sequence[Mover]],
    stay: Sequence[Any],
    z: dict[tuple[int, str], Any],
) -> list[Any]:
    """The constraints of MIG GPU ``g``: an instance binary per free placement of each
    profile; per profile, as many instances as the shapes' ``z`` take there; per memory
    slice, at most one instance (of a pod that stays, or new); the split count; the
    booked memory. Returns the new instances' slices (for the tie-break)."""
    u = {
        (p.name, pl.start): (p, pl, h.addBinary())
        for p in g.profiles
        for pl in p.placements
        if not any(pl.overlaps(f) for f in g.fixed_instances)
    }
    for p in g.profiles:
        taken = [v for (_, name), v in z.items() if name == p.name]
        made = [v for (name, _), (_, _, v) in u.items() if name == p.name]
        if taken or made:
            h.addConstr(sum(made) - sum(taken) == 0)
    staying = [
        (stay[i], pl) for i, k in enumerate(kinds) for uuid, pl in k[0].instances if uuid == g.uuid
    ]
    held = [
        (stay[i], mem) for i, k in enumerate(kinds) for uuid, mem, _ in k[0].holds if uuid == g.uuid
    ]
    ends = [pl.start + pl.size for p in g.profiles for pl in p.placements]
    for t in range(max(ends, default=0)):
        over = [v for _, pl, v in u.values() if pl.start <= t < pl.start + pl.size]
        kept = [v for v, pl in staying if pl.start <= t < pl.start + pl.size]
        if over:
            h.addConstr(sum(over) + sum(kept) <= 1)
    new = [v for _, _, v in u.values()]
    if new:
        h.addConstr(sum(new) + sum(v for v, _ in held) <= g.slots - g.fixed_slots)
        h.addConstr(
            sum(p.memory_mib * v for p, _, v in u.values()) + sum(m * v for v, m in held)
            <= g.memory_mib - g.fixed_memory_mib
        )
    return [p.slice_count * v for p, _, v in u.values()]


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
    ym: dict[tuple[int, str], Any],
    z: dict[tuple[int, str, str], Any],
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
    for (s, n), var in ym.items():
        # the node's instances of the shape, dealt round the GPUs so that a pod's are on
        # distinct GPUs where they can be (the fit tries distinct GPUs first)
        per_gpu = {
            g.uuid: sum(val(v) for (t, u, _), v in z.items() if t == s and u == g.uuid)
            for g in on_node[n]
        }
        dealt: list[str] = []
        while any(per_gpu.values()):
            for uuid in sorted(per_gpu):
                if per_gpu[uuid]:
                    dealt.append(uuid)
                    per_gpu[uuid] -= 1
        count = shapes[s].count
        for i in range(val(var)):
            chunk = dealt[i * count : (i + 1) * count]
            slots.setdefault(s, []).append((n, tuple(sorted(set(chunk)))))
    places: dict[str, tuple[str, tuple[str, ...]]] = {}
    index = {shape: s for s, shape in enumerate(shapes)}
    wanting = [(k, sh) for j, (k, sh) in enumerate(pending) if val(placed[j])]
    shape_of = {m.key: m.shape for k in kinds for m in k}
    wanting += [(key, shape_of[key]) for key in evict]
    for key, shape in wanting:
        places[key] = slots[index[shape]].pop(0)
    return Answer(evict=tuple(evict), places=places, proven=proven)
