"""Packing on any seeds: the arrival-order and fitting-stream figures of
``bench_packing.py`` only (not its offline optima, which are slow), so that a change
of the binpack policy can be checked on streams it was not designed on.

- arrival order (demand 1.6x the cluster, seeds ``--seeds``): pods placed before our
  first refusal / the longest head of the stream that any placement holds. The
  prefix is found by exact feasibility (HiGHS) counting up from our first refusal,
  whose prefix our own placement proves feasible; a prefix is feasible iff every
  shorter one is, so the first infeasible one ends the count (the same numbers as
  ``bench_packing.longest_prefix``'s binary search, with fewer integer programs);
- streams that fit (demand 0.6x, seeds ``--fit-seeds``): optimum GPUs / GPUs used.

    .venv/bin/python benchmarks/packing_seeds.py [--seeds 1-60] [--fit-seeds 101-125]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import highspy
from bench_packing import ISSUE_LOAD, _model, optimum_gpus, ours, ours_in_order, stream

from hami_core.plugin import BackendManager


def seed_range(text: str) -> range:
    """``"21-60"`` -> range(21, 61); ``"7"`` -> range(7, 8).

    Raises:
        argparse.ArgumentTypeError: not ``N`` or ``A-B`` with A <= B.
    """
    first, _, last = text.partition("-")
    try:
        lo, hi = int(first), int(last or first)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not N or A-B") from None
    if lo > hi:
        raise argparse.ArgumentTypeError(f"{text!r}: the first seed is above the last")
    return range(lo, hi + 1)


def prefix_fits(pods: list[dict[str, str]], n: int) -> bool | None:
    """Whether some placement holds the first ``n`` pods; None when HiGHS stops at
    its time limit without deciding."""
    h, _, _, used = _model(pods[:n], all_placed=True)
    h.minimize(sum(used.values()))
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kOptimal:
        return True
    if status == highspy.HighsModelStatus.kInfeasible:
        return False
    return True if h.getInfo().primal_solution_status else None


def arrival_order(seed: int, manager: BackendManager) -> tuple[int, int, bool]:
    """(pods before our first refusal, longest prefix any placement holds, proven)."""
    pods = stream(seed, ISSUE_LOAD)
    first = ours_in_order(pods, manager)[2]
    n = first
    while n < len(pods):
        fits = prefix_fits(pods, n + 1)
        if fits is None:
            return first, n, False
        if not fits:
            break
        n += 1
    return first, n, True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=seed_range, default=range(1, 61), metavar="A-B")
    ap.add_argument("--fit-seeds", type=seed_range, default=range(101, 126), metavar="A-B")
    args = ap.parse_args()
    manager = BackendManager.from_entry_points()
    t0 = time.perf_counter()
    ratios: dict[int, float] = {}
    print(f"{'stream':>8} {'ours 1st refusal':>16} {'longest prefix':>14} {'ratio':>6}")
    for seed in args.seeds:
        first, prefix, proven = arrival_order(seed, manager)
        ratios[seed] = min(1.0, first / prefix) if prefix else 1.0
        mark = "" if proven else "*"
        print(f"{'over-' + str(seed):>8} {first:>16} {prefix:>13}{mark:1} {ratios[seed]:>6.3f}")
    fit: dict[int, float] = {}
    print(f"{'stream':>8} {'pods':>5} {'GPUs':>5} {'optimum':>8} {'ratio':>6}")
    for seed in args.fit_seeds:
        pods = stream(seed, 0.6)
        placed, gpus = ours(pods, manager)
        if placed < len(pods):
            print(f"{'fit-' + str(seed):>8} {len(pods):>5} placed only {placed}")
            fit[seed] = 0.0
            continue
        fewest, proven = optimum_gpus(pods)
        fit[seed] = fewest / gpus if gpus else 1.0
        print(
            f"{'fit-' + str(seed):>8} {len(pods):>5} {gpus:>5} {fewest:>7.1f}"
            f"{'' if proven else '*'} {fit[seed]:>6.3f}"
        )
    print("(* not proven within the solver's time limit)")
    print(f"({time.perf_counter() - t0:.0f} s)")
    values = list(ratios.values())
    met = sum(r >= 0.95 for r in values)
    fits = list(fit.values())
    print(
        f"headline: arrival order, streams {args.seeds[0]}-{args.seeds[-1]}: pods before our "
        f"first refusal / longest prefix any placement holds: worst {min(values):.3f}, mean "
        f"{sum(values) / len(values):.3f}, >= 0.95 on {met} of {len(values)}; optimum GPUs / "
        f"GPUs used, fitting streams {args.fit_seeds[0]}-{args.fit_seeds[-1]}: worst "
        f"{min(fits):.3f}, mean {sum(fits) / len(fits):.3f}"
    )


if __name__ == "__main__":
    main()
