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
  windows  window LNS from ETF's schedule on GRAPH files (--graphs), per window size (--targets)
           and per-window limit (--window-seconds), --budget seconds each: windows tried, closed
           (proved optimal), improved, makespan reached.
  auto     `auto` in this process on GRAPH files (--graphs) with each --variants entry, "+"-joined
           opts.extra settings of solvers/pipeline.py (e.g. big_exact=lns+lns_window=50 or
           big_exact=multilevel), --budget seconds: warm start, exact phase, final, gap.

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


def _load() -> str:
    import os
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def part_windows(paths: list[str], sizes: list[int], budget: float, window_seconds: float, select: list[str]) -> None:
    from formulations.window_lns import LnsStats, lns
    from heuristics.list_scheduling import etf
    from placement.formats import load_problem

    print("| graph | n | K | window | select | s/window | windows | closed | improved | ETF -> end | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        prob = load_problem(path)
        sol = etf(prob, SolveOptions())
        ev0 = evaluate(prob, np.asarray(sol.placement), order=sol.order) if sol.order is not None else evaluate(prob, np.asarray(sol.placement))
        for size in sizes:
            for how in select:
                st = LnsStats()
                lns(prob, ev0.placement, ev0.start, SolveOptions(workers=2, seed=0), deadline=time.monotonic() + budget,
                    window=size, window_seconds=window_seconds, stats=st, select=how)
                print(f"| {path.rsplit('/', 1)[-1][:-5]} | {prob.n} | {prob.k} | {size} | {how} | {window_seconds:g} | {st.windows} | "
                      f"{st.closed} | {st.improved} | {ev0.makespan:.6g} -> {st.best_makespan:.6g} | {_load()} |", flush=True)


def part_auto(paths: list[str], budget: float, variants: list[str]) -> None:
    from placement.formats import load_problem
    from solvers.run import run

    print("| graph | n | K | limit s | variant | warm start | after exact phase | final | bound | gap | vs warm | exact phase | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        prob = load_problem(path)
        for variant in variants:
            extra: dict = {}
            for item in variant.split("+"):
                key, _, val = item.partition("=")
                try:
                    extra[key] = int(val) if val.isdigit() else float(val)
                except ValueError:
                    extra[key] = val
            res = run(prob, "auto", SolveOptions(time_limit=budget, extra=extra))
            ph = {h["name"]: h for h in res.history}
            warm = ph.get("warm-start", {})
            ex = next((h for h in res.history if str(h["name"]).startswith("exact")), {})
            mk = res.evaluation.makespan if res.evaluation is not None else float("nan")
            wm = warm.get("makespan", float("nan"))
            print(f"| {path.rsplit('/', 1)[-1][:-5]} | {prob.n} | {prob.k} | {budget:g} | {variant} | {wm:.6g} ({warm.get('note', '-')}) | "
                  f"{ex.get('makespan', float('nan')):.6g} | {mk:.6g} | {res.lower_bound:.6g} | "
                  f"{100 * (mk - res.lower_bound) / mk:.2f}% | {100 * (mk - wm) / wm:+.2f}% | {ex.get('note', '-')} | {_load()} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("speed", "promise", "multi", "refine", "levels", "cpsat", "windows", "auto"), required=True)
    ap.add_argument("--sizes", default="10000,100000,200000")
    ap.add_argument("--targets", default="500,2000")
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--target", type=int, default=300)
    ap.add_argument("--samples", type=int, default=12)
    ap.add_argument("--budget", type=float, default=30.0)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--graphs", default="", help="comma-separated GRAPH.json files (windows)")
    ap.add_argument("--window-seconds", type=float, default=5.0)
    ap.add_argument("--select", default="critical")
    ap.add_argument("--variants", default="big_exact=lns,big_exact=multilevel")
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
    elif a.part == "windows":
        part_windows(a.graphs.split(","), [int(x) for x in a.targets.split(",")], a.budget, a.window_seconds,
                     a.select.split(","))
    elif a.part == "auto":
        part_auto(a.graphs.split(","), a.budget, a.variants.split(","))
    elif a.part == "levels":
        part_levels(sizes, a.budget, a.devices)
    else:
        part_refine(sizes, a.budget)


if __name__ == "__main__":
    main()
