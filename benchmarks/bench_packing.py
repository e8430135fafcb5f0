"""Packing: pods our binpack policy places versus an exact optimum (HiGHS, from PyPI).

Seeded streams shaped like the bundled examples (``workload.pod_shape``: fractional
1-GPU pods, exclusive whole cards, 2-4 GPU pods at half a card each) arrive one by one
at ``hami simulate``'s pipeline (webhook, filter, prioritize, bind) with the binpack
node and device policies. The same stream is then solved offline as an integer program
by HiGHS:

- overloaded streams (demand ~1.6x the cluster): maximise the pods placed; the ratio is
  ours / optimum (the solver's proven upper bound when it stops at its time limit, so the
  ratio never flatters us);
- the same overloaded streams in arrival order, none skipped (what an online scheduler
  does: kube-scheduler never holds back a pod that fits): the pods we place before our
  first refusal / the longest head of the stream that any placement holds (exact
  feasibility of each prefix). This isolates the packing (device and node choice) from
  admission (which pods to leave out), which only the offline optimum above can choose;
- streams that fit: minimise the GPUs used while placing every pod; the ratio is
  optimum / ours (1.0 = we open no more GPUs than needed).

The model is the fit's sharing rules: per GPU at most ``split`` containers, the memory,
100 % compute; a pod's N GPUs are N distinct GPUs of one node.

    .venv/bin/python benchmarks/bench_packing.py [--quick]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import highspy
from workload import GPU_MEMORY_MIB, SPLIT, node_object, pod_object, pod_shape

from hami_core.cluster import MemoryCluster
from hami_core.model import DevicePolicy, NodePolicy
from hami_core.plugin import BackendManager
from hami_core.simulate.pipeline import Pipeline

NODES = 4
GPUS = 8
TIME_LIMIT_S = 60.0


def demand(limits: dict[str, str]) -> tuple[int, int, int]:
    """(devices, MiB per device, cores per device) of a pod's limits."""
    count = int(limits["nvidia.com/gpu"])
    cores = int(limits.get("nvidia.com/gpucores", "0"))
    mem = int(limits.get("nvidia.com/gpumem", str(GPU_MEMORY_MIB)))
    return count, mem, cores


def stream(seed: int, load: float) -> list[dict[str, str]]:
    """Pods until their memory demand reaches ``load`` x the cluster's memory."""
    rng = random.Random(seed)
    total = NODES * GPUS * GPU_MEMORY_MIB
    out: list[dict[str, str]] = []
    asked = 0
    while asked < load * total:
        shape = pod_shape(rng)
        n, mem, _ = demand(shape)
        out.append(shape)
        asked += n * mem
    return out


def ours(pods: list[dict[str, str]], manager: BackendManager) -> tuple[int, int]:
    """(pods placed, GPUs used) by the pipeline under binpack / binpack."""
    placed, used, _ = ours_in_order(pods, manager)
    return placed, used


def ours_in_order(pods: list[dict[str, str]], manager: BackendManager) -> tuple[int, int, int]:
    """(pods placed, GPUs used, pods placed before the first refusal)."""
    c = MemoryCluster()
    for n in range(NODES):
        c.add_node(node_object(f"node-{n}", GPUS))
    p = Pipeline(c, manager, node_policy=NodePolicy.BINPACK, device_policy=DevicePolicy.BINPACK)
    placed = 0
    first_refusal = len(pods)
    used: set[str] = set()
    for i, limits in enumerate(pods):
        obj = pod_object(f"p{i}", limits)
        obj["spec"].pop("schedulerName")
        out = p.submit(obj)
        if out.scheduled and out.allocation is not None:
            placed += 1
            used.update(d.uuid for d in out.allocation.all_devices())
        elif first_refusal == len(pods):
            first_refusal = i
    return placed, len(used), first_refusal


def longest_prefix(pods: list[dict[str, str]]) -> int:
    """The most pods of the stream's head, in arrival order and none left out, that any
    placement holds (binary search over the exact feasibility of each prefix)."""
    lo, hi = 0, len(pods)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        h, _, used = _model(pods[:mid], all_placed=True)
        h.minimize(sum(used.values()))
        if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _model(
    pods: list[dict[str, str]], *, all_placed: bool
) -> tuple[highspy.Highs, list[Any], dict[tuple[int, int], Any]]:
    """The integer program, aggregated by pod shape (identical pods are interchangeable,
    which removes the symmetry that makes a per-pod model hard): ``y[s, n]`` pods of
    shape ``s`` on node ``n``, ``c[s, g]`` of them on GPU ``g`` of that node. A pod of N
    GPUs takes N distinct GPUs: ``sum_g c[s, g] = N y[s, n]`` with ``c[s, g] <= y[s, n]``
    (such counts always split into pods of N distinct GPUs: deal the GPUs round-robin)."""
    shapes: dict[tuple[int, int, int], int] = {}
    for limits in pods:
        d = demand(limits)
        shapes[d] = shapes.get(d, 0) + 1
    kinds = sorted(shapes)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", TIME_LIMIT_S)
    h.setOptionValue("mip_rel_gap", 0.0)
    gpus = [(n, g) for n in range(NODES) for g in range(GPUS)]
    y = {
        (s, n): h.addIntegral(lb=0, ub=shapes[k]) for s, k in enumerate(kinds) for n in range(NODES)
    }
    c = {(s, ng): h.addIntegral(lb=0, ub=shapes[k]) for s, k in enumerate(kinds) for ng in gpus}
    used = {ng: h.addBinary() for ng in gpus}
    for s, (k, _, _) in enumerate(kinds):
        for n in range(NODES):
            h.addConstr(sum(c[s, (n, g)] for g in range(GPUS)) - k * y[s, n] == 0)
            for g in range(GPUS):
                h.addConstr(c[s, (n, g)] - y[s, n] <= 0)
        placed = sum(y[s, n] for n in range(NODES))
        h.addConstr(placed == shapes[kinds[s]]) if all_placed else h.addConstr(
            placed <= shapes[kinds[s]]
        )
    for ng in gpus:
        h.addConstr(sum(kinds[s][1] * c[s, ng] for s in range(len(kinds))) <= GPU_MEMORY_MIB)
        h.addConstr(sum(kinds[s][2] * c[s, ng] for s in range(len(kinds))) <= 100)
        h.addConstr(sum(c[s, ng] for s in range(len(kinds))) - SPLIT * used[ng] <= 0)
    # GPUs of a node are alike, and so are nodes: break the symmetry (used GPUs first).
    for n in range(NODES):
        for g in range(GPUS - 1):
            h.addConstr(used[(n, g)] - used[(n, g + 1)] >= 0)
    for n in range(NODES - 1):
        h.addConstr(
            sum(used[(n, g)] for g in range(GPUS)) - sum(used[(n + 1, g)] for g in range(GPUS)) >= 0
        )
    return h, list(y.values()), used


def optimum_placed(pods: list[dict[str, str]]) -> tuple[float, bool]:
    """Most pods any placement fits (upper bound if not proven), and whether proven."""
    h, placed, _ = _model(pods, all_placed=False)
    h.maximize(sum(placed))
    info = h.getInfo()
    proven = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return (info.objective_function_value if proven else info.mip_dual_bound), proven


def optimum_gpus(pods: list[dict[str, str]]) -> tuple[float, bool]:
    """Fewest GPUs that hold every pod (lower bound if not proven), and whether proven."""
    h, _, used = _model(pods, all_placed=True)
    h.minimize(sum(used.values()))
    info = h.getInfo()
    proven = h.getModelStatus() == highspy.HighsModelStatus.kOptimal
    return (info.objective_function_value if proven else info.mip_dual_bound), proven


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer streams")
    args = ap.parse_args()
    manager = BackendManager.from_entry_points()
    seeds = range(1, 3) if args.quick else range(1, 6)
    print(f"packing on {NODES} nodes x {GPUS} GPUs (A100-80GB, split {SPLIT}); HiGHS optimum")
    print(
        f"{'stream':>8} {'pods':>5} {'ours':>5} {'optimum':>8} {'proven':>6} {'ratio':>6}"
        f" {'ours 1st refusal':>16} {'longest prefix':>14} {'ratio':>6}"
    )
    worst_over = worst_prefix = 1.0
    t0 = time.perf_counter()
    for seed in seeds:
        pods = stream(seed, 1.6)
        placed, _, first = ours_in_order(pods, manager)
        best, proven = optimum_placed(pods)
        prefix = longest_prefix(pods)
        ratio = placed / best if best else 1.0
        worst_over = min(worst_over, ratio)
        worst_prefix = min(worst_prefix, first / prefix if prefix else 1.0)
        print(
            f"{'over-' + str(seed):>8} {len(pods):>5} {placed:>5} {best:>8.1f} "
            f"{'yes' if proven else 'bound':>6} {ratio:>6.3f} {first:>16} {prefix:>14} "
            f"{first / prefix if prefix else 1.0:>6.3f}"
        )
    print(f"{'stream':>8} {'pods':>5} {'GPUs':>5} {'optimum':>8} {'proven':>6} {'ratio':>6}")
    worst_fit = 1.0
    for seed in seeds:
        pods = stream(100 + seed, 0.6)
        placed, gpus = ours(pods, manager)
        if placed < len(pods):
            print(
                f"{'fit-' + str(seed):>8} {len(pods):>5} placed only {placed}: not a fitting stream"
            )
            worst_fit = 0.0
            continue
        fewest, proven = optimum_gpus(pods)
        ratio = fewest / gpus if gpus else 1.0
        worst_fit = min(worst_fit, ratio)
        print(
            f"{'fit-' + str(seed):>8} {len(pods):>5} {gpus:>5} {fewest:>8.1f} "
            f"{'yes' if proven else 'bound':>6} {ratio:>6.3f}"
        )
    print(f"({time.perf_counter() - t0:.0f} s)")
    print(
        f"headline: pods placed / optimum, worst overloaded stream = {worst_over:.3f} (target >= 0.95); "
        f"in arrival order, pods before our first refusal / longest prefix any placement holds = "
        f"{worst_prefix:.3f}; "
        f"optimum GPUs / GPUs used, worst fitting stream = {worst_fit:.3f} (target >= 0.95)"
    )


if __name__ == "__main__":
    main()
