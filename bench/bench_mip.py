"""CP-SAT against the MIP (SCIP or HiGHS) on the same small generated instances; never run by CI.

For every instance and memory model both exact models get the same warm start as hint (the best
of the portfolio heuristics and topo-split, when one fits) and the same time limit, 2 workers.
Each answer is re-checked by placement.evaluator.check in its memory model and its objective
compared with the evaluator's. Rows: value, bound, gap at the limit, seconds (= time to the proved
optimum when the status is optimal), status; one JSON object per run is appended to --jsonl.

Example (the table of bench/results_exact_mip.md):
  python3 bench/bench_mip.py --limit 60 --memory peak
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from formulations.cpsat import cpsat  # noqa: E402
from formulations.mip import mip  # noqa: E402
from placement.evaluator import check  # noqa: E402
from placement.generate import generate  # noqa: E402
from placement.problem import Problem  # noqa: E402
from placement.solution import Solution, SolveOptions  # noqa: E402
from solvers.methods import get  # noqa: E402


def warm_start(problem: Problem, memory_model: str, seconds: float = 10.0) -> Solution | None:
    """The best feasible heuristic answer (portfolio, topo-split, greedy-fill), or None."""
    best = None
    for name in ("portfolio", "topo-split", "greedy-fill"):
        try:
            sol = get(name).func(problem, SolveOptions(memory_model=memory_model, time_limit=seconds))
        except KeyError:
            continue
        if sol.objective is not None and sol.placement is not None and (best is None or sol.objective < best.objective):
            best = sol
    return best


def run(problem: Problem, model: str, memory_model: str, limit: float, hint: Solution | None, backend: str) -> dict:
    extra = {"mip_solver": backend} if model == "mip" else {}
    func = cpsat if model == "cpsat" else mip
    t0 = time.monotonic()
    sol = func(problem, SolveOptions(memory_model=memory_model, time_limit=limit, workers=2, seed=0, hint=hint,
                                     extra=extra))
    secs = time.monotonic() - t0
    if sol.placement is not None:
        ev = check(problem, sol.placement, sol.start, memory_model)
        if abs(ev.makespan - sol.objective) > 1e-9 * max(1.0, ev.makespan):
            raise RuntimeError(f"{model}: reported {sol.objective} but the evaluator computes {ev.makespan}")
    gap = None
    if sol.objective and sol.lower_bound is not None:
        gap = (sol.objective - sol.lower_bound) / sol.objective
    return {"instance": problem.name, "nodes": problem.n, "k": problem.k, "memory": memory_model,
            "model": model if model == "cpsat" else f"mip ({backend})", "value": sol.objective,
            "bound": sol.lower_bound, "gap": gap, "seconds": secs, "status": sol.status,
            "hint": None if hint is None else hint.objective,
            "returned_hint": bool(sol.info.get("returned_hint")),
            "size": {k: sol.info[k] for k in ("variables", "constraints") if k in sol.info}}


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", nargs="+", default=["random:8", "random:12", "transformer:12", "random:16", "cnn:18",
                                                       "random:24", "transformer:32"],
                    help="kind:nodes for placement.generate (seed 0)")
    ap.add_argument("--devices", type=int, default=3)
    ap.add_argument("--memory-fraction", type=float, default=0.6)
    ap.add_argument("--memory", nargs="+", default=["peak", "static"])
    ap.add_argument("--limit", type=float, default=60)
    ap.add_argument("--backend", default="SCIP", help="MIP solver: SCIP, HIGHS or CBC")
    ap.add_argument("--no-hint", action="store_true")
    ap.add_argument("--jsonl", default="bench_mip.jsonl")
    args = ap.parse_args()
    print("| instance | nodes | K | memory | model | value | bound | gap | seconds | status | hint |")
    print("|---|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for spec in args.instances:
        kind, n = spec.split(":")
        p = generate(kind, int(n), seed=0, devices=args.devices, memory_fraction=args.memory_fraction)
        for mm in args.memory:
            hint = None if args.no_hint else warm_start(p, mm)
            for model in ("cpsat", "mip"):
                row = run(p, model, mm, args.limit, hint, args.backend.upper())
                with open(args.jsonl, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
                g = row["gap"]
                note = fmt(row["hint"]) + (" (returned)" if row["returned_hint"] else "")
                print(f"| {row['instance']} | {row['nodes']} | {row['k']} | {mm} | {row['model']} | {fmt(row['value'])} | "
                      f"{fmt(row['bound'])} | {'-' if g is None else f'{100 * g:.2f}%'} | {row['seconds']:.1f} | "
                      f"{row['status']} | {note} |", flush=True)


if __name__ == "__main__":
    main()
