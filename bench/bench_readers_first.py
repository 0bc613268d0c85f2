"""Exclusive readers (heuristics/exclusive.py): ETF against readers-first, and chain-home's plain
variants against its readers-first variant, on generated LSTMs (training steps, and the forward
pass alone: the ancestors of the loss, an inference step). Warm starts only, static model, memory
unlimited; whole-run figures come from `solve` (bench/results_scale.md, session 38).

    python bench/bench_readers_first.py [--quick]

Prints one markdown row per graph and device count.
"""
from __future__ import annotations

import argparse
import math
import time

from heuristics.chain_home import ancestors, chain_home
from heuristics.list_scheduling import etf, readers_first
from placement.generate import generate
from placement.problem import Problem
from placement.solution import SolveOptions
from placement.split_bound import induced

CASES = [("lstm", 10000, s, k) for s in (1, 7, 8) for k in (4, 8, 16)] + [("lstm", 2000, 3, 4), ("lstm", 50000, 7, 8)]
QUICK = [("lstm", 10000, 7, 8), ("lstm", 2000, 3, 4)]


def forward_part(p: Problem) -> Problem:
    """The loss and its ancestors (what an inference step runs)."""
    return induced(p, ancestors(p, p.ids.index("loss/total")))


def timed(method, p: Problem):
    t = time.perf_counter()
    sol = method(p, SolveOptions(memory_model="static", time_limit=600))
    return sol, time.perf_counter() - t


def row(label: str, p: Problem) -> str:
    a, ta = timed(etf, p)
    b, tb = timed(readers_first, p)
    c, tc = timed(chain_home, p)
    fmt = lambda x: "-" if x is None else f"{x:.2f}"
    plain = None
    if c.objective is not None:
        plain = min(t["makespan"] for t in c.info["tried"] if t.get("fits") and not t["variant"].endswith("+readers-first"))
    return (f"| {label} | K = {p.k} | {fmt(a.objective)} ({ta:.1f} s) | {fmt(b.objective)} ({tb:.1f} s) | "
            f"{fmt(plain)} | {fmt(c.objective)} ({tc:.1f} s) |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    print("| graph | K | ETF | readers-first | chain-home, plain variants | chain-home |")
    print("|---|---|---|---|---|---|")
    for kind, n, seed, k in (QUICK if args.quick else CASES):
        p = generate(kind, n, seed=seed, devices=k, memory_fraction=None)
        p = p.with_devices(k, math.inf)
        print(row(f"{kind} {n} seed {seed}", p), flush=True)
        if (n, seed, k) == (10000, 7, 8):
            print(row(f"{kind} {n} seed {seed}, forward pass", forward_part(p)), flush=True)


if __name__ == "__main__":
    main()
