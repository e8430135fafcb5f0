"""Consolidation: the ``hami defrag`` planner against exact optima (HiGHS) and HAMi's ordering.

On ``bench_packing``'s cluster (4 nodes x 8 A100-80GB, split 10) and pod shapes
(``workload.pod_shape``: fractional 1-GPU pods, whole cards, 2-4 GPU pods at half a card):

- churn traces: seeded arrivals and departures (each pod lives 20-60 steps; one arrival
  a step); pods that fit nowhere wait and are retried, in order, after each step. At
  checkpoints, the *blocked demand* is the waiting pods (none fits now); the ideal
  repack is the most compute (devices x cores) of them that any placement holds with
  every running pod placed too (exact). The planner (``hami_core.defrag.planner``,
  every running pod owned by a ReplicaSet) plans one round for them; its figure is the
  compute it places / the ideal's. Its moves are compared with the fewest evictions
  that let the same pending pods fit (exact: which running pods stay, where the moved
  and pending ones go);
- overloaded arrival streams (``bench_packing.stream``, demand 1.6x): each arrival goes
  through the planner (moves only: it is placed where it fits, or after moves, or
  waits forever; a placed pod is never refused later); compute placed / the most
  compute any placement of the stream holds (``bench_packing.optimum_work``), beside
  the same without consolidation and the evictions made;
- HAMi's ordering on the same streams and traces, without consolidation: its node
  score and device order re-expressed from its source (``hami_order``), binpack and
  spread; ours / HAMi's, pods and compute placed;
- plan time on 1000 nodes x 8 GPUs, every GPU about half full (``workload.preload``),
  20 whole-card pods blocked: the whole plan's wall and CPU seconds, on 10 snapshots
  (p50 and p99; of 10, the p99 is the worst).

The planner is the product's: with HiGHS installed (it is, here) it asks its integer
program first on these small clusters (``hami_core.defrag.exact``), and searches alone
at 1000 nodes (the program's size bound).

A trace or stream where the exact solver stops at its time limit reports its bound (the
ratio then never flatters us).

    .venv/bin/python benchmarks/bench_defrag.py [--quick]
"""

from __future__ import annotations

import argparse
import functools
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import highspy
from bench_packing import GPUS, ISSUE_LOAD, NODES, _highs, _model, demand, optimum_work, stream
from workload import GPU_MEMORY_MIB, SPLIT, node_object, pod_object, pod_shape, preload

from hami_core.cluster import MemoryCluster
from hami_core.defrag.exact import DEFAULT_TIME_LIMIT_S
from hami_core.defrag.movable import MovePolicy
from hami_core.defrag.planner import Planner, bound_pod
from hami_core.model import DevicePolicy, NodePolicy
from hami_core.plugin import BackendManager
from hami_core.scheduling.scheduler import Scheduler, utcnow

TIME_LIMIT_S = 60.0
#: Steps of a churn trace, and the steps at which the blocked demand is measured.
STEPS = 240
CHECKPOINTS = (80, 160, 240)
#: A pod's lifetime in steps (uniform).
LIFETIME = (20, 60)
OWNER = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "rs",
    "uid": "rs",
    "controller": True,
}

Where = list[tuple[int, int]]


def work(limits: dict[str, str]) -> int:
    """Compute of a pod: devices x cores (GPU-percent)."""
    n, _, cores = demand(limits)
    return n * cores


def owned(name: str, limits: dict[str, str]) -> dict[str, Any]:
    pod = pod_object(name, limits)
    pod["metadata"]["ownerReferences"] = [dict(OWNER)]
    return pod


# -- the allocators: ours (the scheduler's own filter) and HAMi's ordering ----------------


class Ours:
    """Our scheduler (binpack / binpack) on an embedded cluster."""

    def __init__(self, manager: BackendManager) -> None:
        self.manager = manager
        self.cluster = MemoryCluster()
        for n in range(NODES):
            self.cluster.add_node(node_object(f"node-{n}", GPUS))
        self.scheduler = Scheduler(
            self.cluster,
            manager,
            node_policy=NodePolicy.BINPACK,
            device_policy=DevicePolicy.BINPACK,
        )

    def place(self, name: str, limits: dict[str, str]) -> Where | None:
        pod = owned(name, limits)
        result = self.scheduler.filter(pod)
        best = result.best()
        if best is None:
            return None
        allocation = result.fits[best].allocation
        assert allocation is not None
        self.cluster.add_pod(bound_pod(pod, allocation, self.manager, utcnow()))
        return _where(allocation)

    def remove(self, name: str) -> None:
        self.cluster.delete_pod("default", name)


def _where(allocation: Any) -> Where:
    out = []
    for d in allocation.all_devices():
        _, node, index = d.uuid.rsplit("-", 2)
        out.append((int(node), int(index)))
    return out


class HamiOrder:
    """HAMi's node and device ordering on the bench's model (facts from HAMi's source):

    - node score (``pkg/scheduler/policy/node_policy.go`` ``ComputeDefaultScore``,
      called in ``pkg/scheduler/score.go`` ``scoreNode`` before the pod is placed):
      ``Weight (10) x (used slots / slots + used cores / cores + used MiB / MiB)`` over
      the node's GPUs; NVIDIA's ``ScoreNode`` adds 0 (``pkg/device/nvidia/device.go``);
      the list is sorted (``NodeScoreList.Less``: binpack ascending, spread descending)
      and the last taken (``pkg/scheduler/scheduler.go``): binpack the highest score,
      spread the lowest; ``sort.Sort`` leaves ties in no set order: here the first node;
    - device order (``policy/gpu_policy.go`` ``ComputeScore`` and ``Less``): per GPU
      ``10 x (slots + cores + MiB used, the request included, each over its total)``,
      sorted ascending for binpack, descending for spread, NUMA breaking ties; NVIDIA's
      ``Fit`` walks the list from its end, so binpack takes the fullest GPUs first and
      spread the emptiest;
    - a GPU fits when a slot, the MiB and the cores are free, an exclusive request
      (cores 100) only on an unused GPU, none on a GPU whose cores are all taken.
    """

    def __init__(self, node_policy: str, device_policy: str) -> None:
        self.node_policy, self.device_policy = node_policy, device_policy
        self.held = {(n, g): (0, 0, 0) for n in range(NODES) for g in range(GPUS)}
        self.pods: dict[str, tuple[dict[str, str], Where]] = {}

    def _fits(self, ng: tuple[int, int], mem: int, cores: int) -> bool:
        m, c, k = self.held[ng]
        if k >= SPLIT or m + mem > GPU_MEMORY_MIB or c + cores > 100 or c >= 100:
            return False
        return not (cores == 100 and k > 0)

    def place(self, name: str, limits: dict[str, str]) -> Where | None:
        count, mem, cores = demand(limits)
        options = []
        for n in range(NODES):
            gpus = [(n, g) for g in range(GPUS)]
            node_score = 10 * sum(
                (
                    sum(self.held[x][2] for x in gpus) / (SPLIT * GPUS),
                    sum(self.held[x][1] for x in gpus) / (100 * GPUS),
                    sum(self.held[x][0] for x in gpus) / (GPU_MEMORY_MIB * GPUS),
                )
            )

            def device_score(x: tuple[int, int]) -> float:
                m, c, k = self.held[x]
                return 10 * ((k + 1) / SPLIT + (c + cores) / 100 + (m + mem) / GPU_MEMORY_MIB)

            numa = {x: x[1] * 2 // GPUS for x in gpus}
            if self.device_policy == "binpack":
                ordered = sorted(gpus, key=lambda x: (device_score(x), numa[x]))
            else:
                ordered = sorted(gpus, key=lambda x: (-device_score(x), numa[x]))
            chosen = [x for x in reversed(ordered) if self._fits(x, mem, cores)][:count]
            if len(chosen) == count:
                options.append((node_score, n, chosen))
        if not options:
            return None
        if self.node_policy == "binpack":
            best = max(options, key=lambda o: (o[0], -o[1]))
        else:
            best = min(options, key=lambda o: (o[0], o[1]))
        for x in best[2]:
            m, c, k = self.held[x]
            self.held[x] = (m + mem, c + cores, k + 1)
        self.pods[name] = (limits, best[2])
        return best[2]

    def remove(self, name: str) -> None:
        limits, where = self.pods.pop(name)
        _, mem, cores = demand(limits)
        for x in where:
            m, c, k = self.held[x]
            self.held[x] = (m - mem, c - cores, k - 1)


# -- churn traces ---------------------------------------------------------------------------


def churn_trace(seed: int) -> list[tuple[dict[str, str], int]]:
    """One arrival a step: (limits, lifetime in steps once placed)."""
    rng = random.Random(1000 + seed)
    return [(pod_shape(rng), rng.randint(*LIFETIME)) for _ in range(STEPS)]


def run_churn(
    alloc: Any,
    trace: list[tuple[dict[str, str], int]],
    checkpoint: Callable[[int, dict[str, tuple[dict[str, str], Where]], list[Any]], None]
    | None = None,
) -> tuple[int, int]:
    """Drive ``alloc`` through ``trace``; returns (placements, compute placed); calls
    ``checkpoint(step, running {name: (limits, where)}, waiting [(name, limits)])`` at
    each of ``CHECKPOINTS``."""
    waiting: list[tuple[str, dict[str, str], int]] = []
    ends: dict[int, list[str]] = {}
    running: dict[str, tuple[dict[str, str], Where]] = {}
    placed = computed = 0
    for step, (limits, life) in enumerate(trace, start=1):
        for name in ends.pop(step, ()):
            alloc.remove(name)
            del running[name]
        waiting.append((f"p{step}", limits, life))
        still = []
        for name, lim, lf in waiting:
            where = alloc.place(name, lim)
            if where is None:
                still.append((name, lim, lf))
                continue
            running[name] = (lim, where)
            ends.setdefault(step + lf, []).append(name)
            placed += 1
            computed += work(lim)
        waiting = still
        if checkpoint is not None and step in CHECKPOINTS:
            checkpoint(step, dict(running), [(n, lim) for n, lim, _ in waiting])
    return placed, computed


def ideal_repack(running: Sequence[dict[str, str]], waiting: Sequence[dict[str, str]]):
    """The most compute of ``waiting`` any placement holds with all of ``running`` placed
    too (upper bound if not proven), and whether proven."""
    if not waiting:
        return 0.0, True
    m = _model([*running, *waiting], all_placed=False, cuts=(len(running),))
    h = m.h
    h.addConstr(m.placed[0] >= len(running))
    h.maximize(
        sum(m.kinds[s][0] * m.kinds[s][2] * v for (s, _), v in m.y.items() if m.segment[s] == 1)
    )
    info = h.getInfo()
    proven = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return (info.objective_function_value if proven else info.mip_dual_bound), proven


def fewest_evictions(
    running: Sequence[tuple[dict[str, str], Where]], extra: Sequence[dict[str, str]]
):
    """The fewest running pods to move so that ``extra`` (pending pods) fit too (lower
    bound if not proven), and whether proven. A moved pod may go anywhere, the same node
    included; one that stays keeps its GPUs."""
    h = _highs()
    h.setOptionValue("time_limit", TIME_LIMIT_S)
    h.setOptionValue("mip_rel_gap", 0.0)
    stay = [h.addBinary() for _ in running]
    shapes = sorted({demand(lim) for lim, _ in running} | {demand(lim) for lim in extra})
    gpus = [(n, g) for n in range(NODES) for g in range(GPUS)]
    bound = len(running) + len(extra)
    y = {(s, n): h.addIntegral(lb=0, ub=bound) for s in range(len(shapes)) for n in range(NODES)}
    c = {(s, x): h.addIntegral(lb=0, ub=bound) for s in range(len(shapes)) for x in gpus}
    for s, (k, _, _) in enumerate(shapes):
        for n in range(NODES):
            h.addConstr(sum(c[s, (n, g)] for g in range(GPUS)) - k * y[s, n] == 0)
            for g in range(GPUS):
                h.addConstr(c[s, (n, g)] - y[s, n] <= 0)
        moved = sum(1 - stay[i] for i, (lim, _) in enumerate(running) if demand(lim) == shapes[s])
        new = sum(1 for lim in extra if demand(lim) == shapes[s])
        h.addConstr(sum(y[s, n] for n in range(NODES)) - moved == new)
    for x in gpus:
        holders = [(i, demand(lim)) for i, (lim, where) in enumerate(running) if x in where]
        h.addConstr(
            sum(mem * stay[i] for i, (_, mem, _) in holders)
            + sum(shapes[s][1] * c[s, x] for s in range(len(shapes)))
            <= GPU_MEMORY_MIB
        )
        h.addConstr(
            sum(cores * stay[i] for i, (_, _, cores) in holders)
            + sum(shapes[s][2] * c[s, x] for s in range(len(shapes)))
            <= 100
        )
        h.addConstr(
            sum(stay[i] for i, _ in holders) + sum(c[s, x] for s in range(len(shapes))) <= SPLIT
        )
    h.minimize(sum(1 - v for v in stay) if stay else 0 * y[0, 0])
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        raise AssertionError("the planner's end state is a placement: the model must hold it")
    info = h.getInfo()
    proven = status == highspy.HighsModelStatus.kOptimal
    return (info.objective_function_value if proven else info.mip_dual_bound), proven


def plan_round(
    manager: BackendManager,
    ours: Ours,
    waiting: list[tuple[str, dict[str, str]]],
    exact_s: float = DEFAULT_TIME_LIMIT_S,
):
    """The planner's one round on a copy of ``ours``' cluster: (compute placed of the
    waiting, the placed pending limits, moves); ``exact_s`` 0: its search alone."""
    copy = MemoryCluster()
    for node in ours.cluster.list_nodes():
        copy.add_node(node)
    for pod in ours.cluster.list_pods():
        copy.add_pod(pod)
    planner = Planner(
        copy,
        manager,
        MovePolicy.build(),
        node_policy=NodePolicy.BINPACK,
        device_policy=DevicePolicy.BINPACK,
        exact_time_limit_s=exact_s,
    )
    by_name = dict(waiting)
    plan = planner.plan([owned(n, lim) for n, lim in waiting])
    placed = [by_name[o.pod.split("/")[1]] for o in plan.outcomes if o.placed]
    return sum(work(lim) for lim in placed), placed, len(plan.moves)


# -- overloaded streams with consolidation --------------------------------------------------


def consolidating_stream(manager: BackendManager, pods: list[dict[str, str]]) -> tuple[int, int]:
    """(compute placed, evictions): each arrival planned for (moves only)."""
    cluster = MemoryCluster()
    for n in range(NODES):
        cluster.add_node(node_object(f"node-{n}", GPUS))
    moves = 0
    for i, limits in enumerate(pods):
        planner = Planner(
            cluster,
            manager,
            MovePolicy.build(),
            node_policy=NodePolicy.BINPACK,
            device_policy=DevicePolicy.BINPACK,
        )
        moves += len(planner.plan([owned(f"p{i}", limits)]).moves)
    total = 0
    for pod in cluster.list_pods():
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        total += work(limits)
    return total, moves


def arrival(alloc: Any, pods: list[dict[str, str]]) -> tuple[int, int]:
    """(pods placed, compute placed) in arrival order, refusals skipped."""
    placed = computed = 0
    for i, limits in enumerate(pods):
        if alloc.place(f"p{i}", limits) is not None:
            placed += 1
            computed += work(limits)
    return placed, computed


# -- plan time at scale ---------------------------------------------------------------------


def plan_time(
    manager: BackendManager, nodes: int, runs: int
) -> list[tuple[float, float, int, int]]:
    """Per run: (wall s, CPU s, pending placed, moves) of one plan for 20 whole cards,
    each run on its own snapshot (``preload`` seeded by the run)."""
    names = [f"node-{i}" for i in range(nodes)]
    out = []
    for run in range(runs):
        cluster = MemoryCluster()
        for name in names:
            cluster.add_node(node_object(name, 8))
        for pod in preload(names, fill=0.5, seed=7 + run):
            pod["metadata"]["ownerReferences"] = [dict(OWNER)]
            cluster.add_pod(pod)
        planner = Planner(cluster, manager, MovePolicy.build())
        pending = [
            owned(f"big-{i}", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "100"})
            for i in range(20)
        ]
        w0, c0 = time.perf_counter(), time.process_time()
        plan = planner.plan(pending)
        out.append(
            (
                time.perf_counter() - w0,
                time.process_time() - c0,
                sum(o.placed for o in plan.outcomes),
                len(plan.moves),
            )
        )
    return out


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank: of 10 values, p99 is the largest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(len(ordered) * q) - 1))]


def moves_ratio(moves: int, fewest: float) -> float:
    """Moves / the fewest (1.0 for none of either)."""
    if fewest > 1e-9:
        return moves / round(fewest, 6)
    return 1.0 if moves == 0 else float("inf")


def checkpoint_row(
    manager: BackendManager,
    ours: Ours,
    rows: list[Any],
    step: int,
    running: dict[str, tuple[dict[str, str], Where]],
    waiting: list[tuple[str, dict[str, str]]],
) -> None:
    """One checkpoint's figures: the ideal repack, the planner's round, the fewest moves;
    and the planner's search alone (its integer program off), with the fewest moves for
    what it placed."""
    ideal, proven = ideal_repack([lim for lim, _ in running.values()], [lim for _, lim in waiting])
    got, placed, moves = plan_round(manager, ours, waiting)
    fewest, f_proven = fewest_evictions(list(running.values()), placed)
    _, placed_s, moves_s = plan_round(manager, ours, waiting, 0)
    fewest_s = (
        fewest
        if sorted(map(demand, placed_s)) == sorted(map(demand, placed))
        else fewest_evictions(list(running.values()), placed_s)[0]
    )
    rows.append(
        (step, len(waiting), ideal, proven, got, moves, fewest, f_proven, moves_s, fewest_s)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer traces and streams, 200 nodes")
    args = ap.parse_args()
    manager = BackendManager.from_entry_points()
    seeds = range(1, 3) if args.quick else range(1, 6)
    t0 = time.perf_counter()
    print(f"consolidation on {NODES} nodes x {GPUS} GPUs (A100-80GB, split {SPLIT}); HiGHS optima")
    print("churn traces: blocked demand (compute of the waiting pods, GPU-%) at each checkpoint")
    print(
        f"{'trace':>6} {'step':>5} {'waiting':>7} {'ideal':>7} {'planner':>7} {'ratio':>6}"
        f" {'moves':>5} {'fewest':>6} {'ratio':>6} {'search':>6} {'ratio':>6}"
    )
    print(
        "(search: the planner's moves with its integer program off, / the fewest for what it placed)"
    )
    placed_ratios: list[float] = []
    move_ratios: list[float] = []
    search_ratios: list[float] = []
    peers: list[tuple[str, float, float, float, float]] = []
    for seed in seeds:
        trace = churn_trace(seed)
        ours = Ours(manager)
        rows: list[tuple[int, int, float, bool, int, int, float, bool]] = []
        # plans at each checkpoint as the trace passes it (on a copy: the trace goes on)
        measure = functools.partial(checkpoint_row, manager, ours, rows)
        ours_churn = run_churn(ours, trace, measure)
        hami_churn = run_churn(HamiOrder("binpack", "binpack"), trace)
        peers.append(
            (
                f"churn-{seed}",
                ours_churn[0] / max(1, hami_churn[0]),
                ours_churn[1] / max(1, hami_churn[1]),
                *run_churn(HamiOrder("binpack", "spread"), trace),
            )
        )
        for step, n, ideal, proven, got, moves, fewest, f_proven, moves_s, fewest_s in rows:
            ratio = got / ideal if ideal > 1e-9 else 1.0
            placed_ratios.append(ratio)
            mr, ms = moves_ratio(moves, fewest), moves_ratio(moves_s, fewest_s)
            if n:  # a plan was asked for: blocked demand
                move_ratios.append(mr)
                search_ratios.append(ms)
            print(
                f"{'churn-' + str(seed):>6} {step:>5} {n:>7} {ideal:>6.0f}{'' if proven else '*'}"
                f" {got:>7} {ratio:>6.3f} {moves:>5} {fewest:>5.0f}{'' if f_proven else '*'}"
                f" {mr:>6.3f} {moves_s:>6} {ms:>6.3f}"
            )
    print("(* not proven within the time limit: the solver's bound)")
    print(
        f"overloaded arrival streams (demand {ISSUE_LOAD}x): compute placed / most any placement holds"
    )
    print(
        f"{'stream':>8} {'most':>6} {'without':>8} {'with':>8} {'evictions':>9}"
        f" {'ours/HAMi pods':>14} {'ours/HAMi compute':>17}"
    )
    with_ratios, without_ratios = [], []
    for seed in seeds:
        pods = stream(seed, ISSUE_LOAD)
        most, _ = optimum_work(pods)
        ours_pods, ours_work = arrival(Ours(manager), pods)
        hami_pods, hami_work = arrival(HamiOrder("binpack", "binpack"), pods)
        with_work, evictions = consolidating_stream(manager, pods)
        without_ratios.append(ours_work / most)
        with_ratios.append(with_work / most)
        peers.append((f"over-{seed}", ours_pods / hami_pods, ours_work / hami_work, 0, 0))
        print(
            f"{'over-' + str(seed):>8} {most:>6.0f} {ours_work / most:>8.3f} {with_work / most:>8.3f}"
            f" {evictions:>9} {ours_pods / hami_pods:>14.3f} {ours_work / hami_work:>17.3f}"
        )
    print("ours / HAMi's ordering (binpack / binpack), without consolidation:")
    for name, pods_ratio, work_ratio, *_ in peers:
        print(f"  {name:>8}: pods {pods_ratio:.3f}, compute {work_ratio:.3f}")
    nodes, runs = (200, 3) if args.quick else (1000, 10)
    times = plan_time(manager, nodes, runs)
    for wall, cpu, placed, moves in times:
        print(
            f"plan on {nodes} nodes x 8 GPUs, 20 whole cards blocked: {wall:.2f} s wall, "
            f"{cpu:.2f} s CPU, {placed} placed, {moves} moves"
        )
    walls, cpus = [t[0] for t in times], [t[1] for t in times]
    print(
        f"plan time over {runs} snapshots: p50 {quantile(walls, 0.5):.2f} s wall "
        f"({quantile(cpus, 0.5):.2f} s CPU), p99 {quantile(walls, 0.99):.2f} s wall "
        f"({quantile(cpus, 0.99):.2f} s CPU)"
    )
    print(f"({time.perf_counter() - t0:.0f} s)")
    peer_min = min(min(p[1], p[2]) for p in peers)
    move_ratios, search_ratios = move_ratios or [1.0], search_ratios or [1.0]
    print(
        "headline: churn blocked demand placed in one round / ideal repack, worst = "
        f"{min(placed_ratios):.3f} (target >= 0.95); evictions / fewest, worst = "
        f"{max(move_ratios):.3f}, mean = {sum(move_ratios) / len(move_ratios):.3f} over "
        f"{len(move_ratios)} plans (targets <= 1.5, <= 1.1; the search alone: worst "
        f"{max(search_ratios):.3f}, mean {sum(search_ratios) / len(search_ratios):.3f}); overloaded streams compute / most, with consolidation "
        f"worst = {min(with_ratios):.3f} (target >= 0.99), without = {min(without_ratios):.3f}; "
        f"ours / HAMi ordering worst = {peer_min:.3f} (target >= 1.0); plan time on "
        f"{nodes} nodes, p99 of {runs}: {quantile(walls, 0.99):.2f} s wall, "
        f"{quantile(cpus, 0.99):.2f} s CPU (target <= 2 s)"
    )


if __name__ == "__main__":
    main()
