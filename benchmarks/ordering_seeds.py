"""Ours against HAMi 2.10's ordering on any seeds, without consolidation: the peers
figure of ``bench_defrag.py`` (its ``Ours`` and ``HamiOrder``, binpack / binpack) on
seeds it was not designed on, per seed.

- overloaded arrival streams (``bench_packing.stream``, demand 1.6x the cluster), in
  arrival order, a pod that fits nowhere refused: pods placed and compute placed
  (devices x cores, GPU-percent);
- churn traces (``bench_defrag.churn_trace``: one arrival a step for 240 steps, each
  pod living 20-60 steps once placed, waiting pods retried after each step): pods
  placed within the 240 steps and their compute.

Each row gives ours and HAMi's counts and ours / HAMi's; the headline the worst ratio,
the rows below 1.0 and the totals. No solver: it runs in about a second a seed.

``--ranking`` replaces our binpack device ranking for the run (``RANKINGS``: the rules
weighed in docs/performance.md), and ``--node-score hami`` our binpack node score by
HAMi's; both through ``hami_core.backend.fit``'s module functions, so ``Ours`` runs the
whole scheduler with them. ``--ranking hami --node-score hami`` must give 1.000 on
every row: our fit with HAMi's two rules is HAMi's ordering.

    .venv/bin/python benchmarks/ordering_seeds.py [--seeds 1-12] [--ranking NAME]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collections.abc import Callable, Iterable, Sequence

from bench_defrag import HamiOrder, Ours, arrival, churn_trace, run_churn
from bench_packing import ISSUE_LOAD, stream
from packing_seeds import seed_range

from hami_core.backend import fit
from hami_core.model import (
    ContainerDevices,
    DevicePolicy,
    DeviceRequest,
    DeviceScoringWeights,
    DeviceUsage,
    FitRules,
    NodePolicy,
)
from hami_core.plugin import BackendManager

#: One row: (name, ours pods, HAMi pods, ours compute, HAMi compute).
Row = tuple[str, int, int, int, int]

Key = Callable[[DeviceUsage, DeviceRequest, FitRules], tuple[float, ...]]


def _left(u: DeviceUsage, request: DeviceRequest, rules: FitRules) -> tuple[float, float, float]:
    """(memory, compute, sharer slots) the placement leaves free, each a fraction of the
    device."""
    dev = u.device
    mem = (u.free_memory_mib - request.memory_on(dev)) / dev.memory_mib
    capacity = rules.cores_capacity(u)
    cores = (fit.free_cores(u, rules) - request.cores_pct) / capacity if capacity else 1.0
    return max(mem, 0.0), max(cores, 0.0), (dev.split_count - u.used_count - 1) / dev.split_count


def _stranded(u: DeviceUsage, request: DeviceRequest, rules: FitRules) -> float:
    """Room the placement leaves that no request can use (``fit.capacity_reason``): all
    of it once the sharer slots are taken; the compute once the memory is (a request
    asks for memory); the memory once the compute is (no cores-0 sharer joins then)."""
    mem, cores, slots = _left(u, request, rules)
    if slots <= 0:
        return round(mem + cores, 9)
    if mem <= 1e-9 or cores <= 1e-9:
        return round(mem + cores, 9)
    return 0.0


def _opened(u: DeviceUsage) -> int:
    return 0 if u.used_count else 1


#: Candidate binpack device rankings, each a sort key (lowest first; ties by index).
RANKINGS: dict[str, Key] = {
    # ours now: devices in use first, then the least room in the roomier dimension
    "now": lambda u, r, rules: (_opened(u), fit.fit_leftover(u, r, rules), -fit.load(u, rules)),
    # HAMi 2.10: the fullest device (memory + compute + slots used, the request's too)
    "hami": lambda u, r, rules: (-fit.load(u, rules),),
    # best fit by the sum of memory and compute left, in use first
    "sum": lambda u, r, rules: (_opened(u), round(sum(_left(u, r, rules)[:2]), 9)),
    # best fit by the tighter dimension left, then the roomier, in use first
    "tighter": lambda u, r, rules: (
        _opened(u),
        round(min(_left(u, r, rules)[:2]), 9),
        round(max(_left(u, r, rules)[:2]), 9),
    ),
    # the least room left stranded first, then ours now
    "stranded": lambda u, r, rules: (
        _opened(u),
        _stranded(u, r, rules),
        fit.fit_leftover(u, r, rules),
        -fit.load(u, rules),
    ),
}


def install(ranking: str | None, node_score: str | None) -> None:
    """Replace our binpack device ranking by ``RANKINGS[ranking]`` and, with
    ``node_score`` ``"hami"``, the binpack node score by HAMi's (the node's used
    fractions before the placement), for the rest of the process."""
    if ranking is not None:
        key, rank = RANKINGS[ranking], fit.rank

        def ranked(
            devices: Iterable[DeviceUsage],
            policy: DevicePolicy,
            rules: FitRules = fit.GENERIC,
            ties: Sequence[DevicePolicy] = (),
            *,
            request: DeviceRequest | None = None,
            weights: DeviceScoringWeights | None = None,
        ) -> list[DeviceUsage]:
            if policy is DevicePolicy.BINPACK and request is not None and weights is None:
                return sorted(devices, key=lambda u: (*key(u, request, rules), u.device.index))
            return rank(devices, policy, rules, ties, request=request, weights=weights)

        fit.rank = ranked
    if node_score == "hami":
        score = fit.node_score

        def hami(
            usage: Sequence[DeviceUsage],
            devices: ContainerDevices,
            policy: NodePolicy,
            rules: FitRules = fit.GENERIC,
        ) -> float:
            if policy is not NodePolicy.BINPACK or not usage:
                return score(usage, devices, policy, rules)
            return round(100 * sum(min(fit.load(u, rules) / 3, 1.0) for u in usage) / len(usage), 9)

        fit.node_score = hami


def rows_for(seed: int, manager: BackendManager) -> list[Row]:
    """The stream and the churn trace of ``seed``, each under both orderings."""
    pods = stream(seed, ISSUE_LOAD)
    ours_s = arrival(Ours(manager), pods)
    hami_s = arrival(HamiOrder("binpack", "binpack"), pods)
    trace = churn_trace(seed, mig_share=0)  # the figures of docs/performance.md: no MIG
    ours_c = run_churn(Ours(manager), trace)
    hami_c = run_churn(HamiOrder("binpack", "binpack"), trace)
    return [
        (f"over-{seed}", ours_s[0], hami_s[0], ours_s[1], hami_s[1]),
        (f"churn-{seed}", ours_c[0], hami_c[0], ours_c[1], hami_c[1]),
    ]


def ratio(ours: int, hami: int) -> float:
    """ours / HAMi's (1.0 when both are 0)."""
    return ours / hami if hami else (1.0 if ours == 0 else float("inf"))


def summary(rows: list[Row], kind: str) -> str:
    """Worst ratio (pods, compute), rows below 1.0 and above, totals, for one kind."""
    mine = [r for r in rows if r[0].startswith(kind)]
    pods = [ratio(r[1], r[2]) for r in mine]
    work = [ratio(r[3], r[4]) for r in mine]
    below = sum(1 for p, w in zip(pods, work, strict=True) if min(p, w) < 1.0)
    above = sum(1 for p, w in zip(pods, work, strict=True) if min(p, w) >= 1.0 and max(p, w) > 1.0)
    return (
        f"{kind}: pods worst {min(pods):.3f}, compute worst {min(work):.3f}; "
        f"below 1.0 on {below} of {len(mine)}, above on {above}; pods "
        f"{sum(r[1] for r in mine)} / {sum(r[2] for r in mine)}, compute "
        f"{sum(r[3] for r in mine)} / {sum(r[4] for r in mine)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=seed_range, default=range(1, 13), metavar="A-B")
    ap.add_argument("--ranking", choices=sorted(RANKINGS), help="our binpack device ranking")
    ap.add_argument("--node-score", choices=["hami"], help="HAMi's binpack node score")
    args = ap.parse_args()
    install(args.ranking, args.node_score)
    manager = BackendManager.from_entry_points()
    t0 = time.perf_counter()
    print(
        "ours / HAMi's ordering (binpack / binpack), without consolidation; device ranking "
        f"{args.ranking or 'ours'}, node score {args.node_score or 'ours'}"
    )
    print(
        f"{'stream':>9} {'ours pods':>9} {'HAMi pods':>9} {'ratio':>6}"
        f" {'ours compute':>12} {'HAMi compute':>12} {'ratio':>6}"
    )
    rows: list[Row] = []
    for seed in args.seeds:
        for row in rows_for(seed, manager):
            rows.append(row)
            name, op, hp, ow, hw = row
            print(
                f"{name:>9} {op:>9} {hp:>9} {ratio(op, hp):>6.3f}"
                f" {ow:>12} {hw:>12} {ratio(ow, hw):>6.3f}"
            )
    print(f"({time.perf_counter() - t0:.0f} s)")
    span = f"seeds {args.seeds[0]}-{args.seeds[-1]}"
    print(f"headline, {span}: {summary(rows, 'over')}; {summary(rows, 'churn')}")


if __name__ == "__main__":
    main()
