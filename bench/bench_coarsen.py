"""Benchmark of coarsening and refinement (not run by CI; figures go to bench/results_coarsen.md).

Parts (pick with --part):
  speed    coarsening time and coarse sizes on generated graphs of 10K-200K nodes.
  promise  how well the coarse FIFO makespan predicts the original one, coarse edges priced with
           the max or the sum of the parallel original edges' comm.
  multi    a fixed budget spent refining on the original only, versus on the coarse graph first
           (restricted warm start, refine, project) and then on the original.
  refine   refine from topo-fill on generated graphs, per size, with its evaluation rate.
  levels   plain refine versus refine_multilevel from topo-fill, same budget.
  cpsat    coarse size versus quality: topo-fill restricted to the coarse graph as the hint,
           CP-SAT on the coarse graph, projected (best of FIFO and the coarse order), refined.

Usage: PYTHONPATH=. python3 bench/bench_coarsen.py --part speed
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from heuristics.baselines import topo_fill
from placement.coarsen import coarsen
from placement.evaluator import evaluate
from placement.generate import generate
from placement.solution import SolveOptions
from solvers.refine import RefineStats, refine, refine_multilevel

KINDS = ("transformer", "lstm", "cnn", "random")


def part_speed(sizes: list[int], targets: list[int]) -> None:
    print("| graph | nodes | target | coarse nodes | coarse edges | passes | seconds |")
    print("|---|---|---|---|---|---|---|")
    for kind in KINDS:
        for n in sizes:
            prob = generate(kind, n, seed=0)
            prob.topo_rank  # the original's own topological order is not the coarsener's cost
            for target in targets:
                t0 = time.monotonic()
                cz = coarsen(prob, target, seed=0)
                dt = time.monotonic() - t0
                print(f"| {kind} | {prob.n} | {target} | {cz.coarse.n} | {cz.coarse.m} | {len(cz.levels)} | {dt:.2f} |", flush=True)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def part_promise(n: int, target: int, samples: int) -> None:
    print("| graph | nodes | target | edge comm | orig FIFO / coarse (mean, min, max) | orig ordered / coarse (max) | rank corr. |")
    print("|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for kind in KINDS:
        prob = generate(kind, n, seed=0, memory_fraction=None)
        base = topo_fill(prob, SolveOptions()).placement
        for how in ("max", "sum"):
            cz = coarsen(prob, target, seed=0, edge_comm=how)
            co = cz.coarse
            mask = co.allowed_mask()
            c_ms, o_ms, ord_ms = [], [], []
            for s in range(samples):
                if s == 0:
                    cp = cz.restrict(base, repair=False)
                else:  # random, and partly blocky: contiguous coarse-topological runs per device
                    cp = np.array([rng.choice(np.flatnonzero(mask[i])) for i in range(co.n)])
                    if s % 2:
                        cuts = np.sort(rng.choice(co.n, size=co.k - 1, replace=False))
                        cp[co.topo_order] = np.searchsorted(cuts, np.arange(co.n), side="right")
                    for members in co.groups:
                        cp[members] = cp[members[0]]
                cev = evaluate(co, cp)
                pl = cz.project(cp)
                c_ms.append(cev.makespan)
                o_ms.append(evaluate(prob, pl).makespan)
                ord_ms.append(evaluate(prob, pl, order=cz.project_order(cp, cev.start)).makespan)
            r = np.asarray(o_ms) / np.asarray(c_ms)
            ro = np.asarray(ord_ms) / np.asarray(c_ms)
            print(f"| {kind} | {prob.n} | {co.n} | {how} | {r.mean():.3f} ({r.min():.3f}, {r.max():.3f}) | {ro.max():.3f} | "
                  f"{_spearman(np.asarray(c_ms), np.asarray(o_ms)):.3f} |", flush=True)


def part_multi(n: int, target: int, budget: float, k: int) -> None:
    print(f"| graph | nodes | K | topo-fill | refine original {budget:g}s | coarse {target}: refine coarse {budget / 2:g}s + original {budget / 2:g}s |")
    print("|---|---|---|---|---|---|")
    for kind in KINDS:
        prob = generate(kind, n, seed=0, devices=k)
        sol = topo_fill(prob, SolveOptions())
        if sol.placement is None:
            print(f"| {kind} | {prob.n} | {k} | none | | |")
            continue
        _, ev_a = refine(prob, sol.placement, SolveOptions(), deadline=time.monotonic() + budget)
        t0 = time.monotonic()
        cz = coarsen(prob, target, seed=0)
        cp = cz.restrict(sol.placement)
        half = t0 + budget / 2
        if cp is not None:
            cp, _ = refine(cz.coarse, cp, SolveOptions(), deadline=half)
            start = cz.project(cp)
            if not evaluate(prob, start).feasible(prob) or evaluate(prob, start).makespan > sol.objective:
                start = sol.placement
        else:
            start = sol.placement
        _, ev_b = refine(prob, start, SolveOptions(), deadline=t0 + budget)
        print(f"| {kind} | {prob.n} | {k} | {sol.objective:.2f} | {ev_a.makespan:.2f} | {ev_b.makespan:.2f} |", flush=True)


def part_refine(sizes: list[int], budget: float) -> None:
    print(f"| graph | nodes | topo-fill | refined ({budget:g}s) | gain | evaluations | evals/s |")
    print("|---|---|---|---|---|---|---|")
    for kind in KINDS:
        for n in sizes:
            prob = generate(kind, n, seed=0)
            sol = topo_fill(prob, SolveOptions())
            if sol.placement is None:
                continue
            st = RefineStats()
            t0 = time.monotonic()
            _, ev = refine(prob, sol.placement, SolveOptions(), deadline=t0 + budget, stats=st)
            dt = time.monotonic() - t0
            print(f"| {kind} | {prob.n} | {sol.objective:.2f} | {ev.makespan:.2f} | {1 - ev.makespan / sol.objective:.1%} | "
                  f"{st.evaluations} | {st.evaluations / dt:.1f} |", flush=True)


def part_levels(sizes: list[int], budget: float, k: int) -> None:
    print(f"| graph | nodes | K | topo-fill | refine {budget:g}s | refine_multilevel {budget:g}s | seconds (multilevel) |")
    print("|---|---|---|---|---|---|---|")
    for kind in KINDS:
        for n in sizes:
            prob = generate(kind, n, seed=0, devices=k)
            sol = topo_fill(prob, SolveOptions())
            if sol.placement is None:
                continue
            _, ev_a = refine(prob, sol.placement, SolveOptions(), deadline=time.monotonic() + budget)
            t0 = time.monotonic()
            _, ev_b = refine_multilevel(prob, sol.placement, SolveOptions(), deadline=t0 + budget)
            dt = time.monotonic() - t0
            print(f"| {kind} | {prob.n} | {k} | {sol.objective:.1f} | {ev_a.makespan:.1f} | {ev_b.makespan:.1f} | {dt:.1f} |", flush=True)


def part_cpsat(n: int, targets: list[int], budget: float, k: int, kinds: list[str]) -> None:
    from formulations.cpsat import cpsat
    from placement.solution import Solution

    print(f"| graph | nodes | K | coarse nodes | topo-fill | CP-SAT {budget:g}s on coarse (status) | projected FIFO | projected ordered | + refine {budget / 2:g}s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        prob = generate(kind, n, seed=0, devices=k)
        sol = topo_fill(prob, SolveOptions())
        if sol.placement is None:
            continue
        for target in targets:
            cz = coarsen(prob, target, seed=0)
            cp = cz.restrict(sol.placement)
            hint = None if cp is None else Solution("restrict", "heuristic", placement=cp)
            res = cpsat(cz.coarse, SolveOptions(time_limit=budget, workers=2, hint=hint))
            if res.placement is None:
                print(f"| {kind} | {prob.n} | {k} | {cz.coarse.n} | {sol.objective:.1f} | none ({res.status}) | | | |", flush=True)
                continue
            pl = cz.project(res.placement)
            fifo = evaluate(prob, pl).makespan
            start = res.start if res.start is not None else evaluate(cz.coarse, res.placement).start
            ordered = evaluate(prob, pl, order=cz.project_order(res.placement, start)).makespan
            _, ev = refine(prob, pl, SolveOptions(), deadline=time.monotonic() + budget / 2)
            print(f"| {kind} | {prob.n} | {k} | {cz.coarse.n} | {sol.objective:.1f} | {res.objective:.1f} ({res.status}) | "
                  f"{fifo:.1f} | {ordered:.1f} | {ev.makespan:.1f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("speed", "promise", "multi", "refine", "levels", "cpsat"), required=True)
    ap.add_argument("--sizes", default="10000,100000,200000")
    ap.add_argument("--targets", default="500,2000")
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--target", type=int, default=300)
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--budget", type=float, default=30.0)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--kinds", default=",".join(KINDS))
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    if a.part == "speed":
        part_speed(sizes, [int(x) for x in a.targets.split(",")])
    elif a.part == "promise":
        part_promise(a.nodes, a.target, a.samples)
    elif a.part == "multi":
        part_multi(a.nodes, a.target, a.budget, a.devices)
    elif a.part == "cpsat":
        part_cpsat(a.nodes, [int(x) for x in a.targets.split(",")], a.budget, a.devices, a.kinds.split(","))
    elif a.part == "levels":
        part_levels(sizes, a.budget, a.devices)
    else:
        part_refine(sizes, a.budget)


if __name__ == "__main__":
    main()
