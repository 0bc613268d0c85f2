"""Exact spans of small windows in the bypass bound (placement/window_exact.py): the bound with
and without them, the best lower bound with and without, their times and the pieces solved
(bench/results_scale.md, "Session 24").

    python bench/bench_window_exact.py [--model static|peak] [--devices K ...] GRAPH.json ...

One line per graph and K: the bypass bound without (EXACT off; with ``--against no-colocation``,
exact spans whose pieces ignore colocation: session 25) and with the exact spans, the
best of lower_bounds() without and with, the bypass part's seconds each way, the pieces CP-SAT
solved (distinct shapes) and the load average.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import placement.bypass_bound as bb  # noqa: E402
import placement.window_exact as we  # noqa: E402
from placement.bounds import lower_bounds  # noqa: E402
from placement.comm_bound import heads  # noqa: E402
from placement.formats import load_problem  # noqa: E402
from placement.memory_path_bound import best_path  # noqa: E402


def measure(prob, model: str, exact: bool, colocation: bool = True) -> tuple[float, float, float, int]:
    """(bypass bound, its seconds, best lower bound, pieces solved) with EXACT set to ``exact`` and
    the pieces' colocation (window_exact.COLOCATION) to ``colocation``."""
    saved, bb.EXACT = bb.EXACT, exact
    saved_colocation, we.COLOCATION = we.COLOCATION, colocation
    solved = [0]
    real = we.solve_piece

    def counted(*args):
        solved[0] += 1
        return real(*args)
    we.solve_piece = counted
    try:
        chain = best_path(prob, prob.time, np.zeros(prob.m))
        head, tail = heads(prob), heads(prob, reverse=True)
        t0 = time.perf_counter()
        bypass = bb.chain_bound(prob, chain, head, tail)
        seconds = time.perf_counter() - t0
        pieces = solved[0]
        best = lower_bounds(prob, model).best
    finally:
        bb.EXACT, we.solve_piece, we.COLOCATION = saved, real, saved_colocation
    return bypass, seconds, best, pieces


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--model", default="static")
    ap.add_argument("--devices", type=int, nargs="*", default=[])
    ap.add_argument("--against", choices=("no-pieces", "no-colocation"), default="no-pieces",
                    help="the 'without' columns: the bound without exact spans, or with spans whose pieces ignore colocation")
    args = ap.parse_args()
    print("| graph | n | K | bypass without | with | gain | best bound without | with | gain | bypass s (without / with) | pieces | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.graphs:
        base = load_problem(path)
        for k in args.devices or [base.k]:
            prob = base.with_devices(k, None) if k != base.k else base
            b0, s0, l0, _ = (measure(prob, args.model, False) if args.against == "no-pieces"
                             else measure(prob, args.model, True, colocation=False))
            b1, s1, l1, pieces = measure(prob, args.model, True)
            name = os.path.basename(path).removesuffix(".json")
            print(f"| {name} | {prob.n} | {k} | {b0:.6g} | {b1:.6g} | {(b1 / b0 - 1) * 100:+.2f}% | {l0:.6g} | {l1:.6g} | "
                  f"{(l1 / l0 - 1) * 100:+.2f}% | {s0:.2f} / {s1:.2f} | {pieces} | {os.getloadavg()[0]:.2f} |", flush=True)


if __name__ == "__main__":
    main()
