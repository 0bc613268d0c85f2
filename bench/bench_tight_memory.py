"""min-memory at tight peak memory (session 27: the peak descent when no pass fits).

Usage: python bench/bench_tight_memory.py GRAPH.json [GRAPH.json ...] [--k 4 8] [--ratios 1.05 1.1 1.2 1.3]
       [--time-limit 30]

For each graph, K and ratio: capacity = ratio x the peak model's memory_lower_bound for that K;
runs min-memory alone (in-process) and prints its status, makespan, the nearest pass's peak /
capacity and the lowest a descent reached, with the seconds. Graphs: e.g. `python -m
placement.importers.torch bench/real_models2.py:unet -o unet.json`. Never run by CI.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from heuristics.min_memory import min_memory
from placement.formats import load_problem
from placement.memory_bounds import memory_lower_bound
from placement.solution import SolveOptions


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--k", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--ratios", type=float, nargs="+", default=[1.05, 1.1, 1.2, 1.3])
    ap.add_argument("--time-limit", type=float, default=30.0)
    args = ap.parse_args()
    print("| graph | K | ratio | status | makespan | nearest pass / capacity | lowest descent / capacity | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.graphs:
        base = load_problem(path)
        for k in args.k:
            bound = memory_lower_bound(base.with_devices(k, memory=np.inf), "peak", k)["best"]
            for ratio in args.ratios:
                prob = base.with_devices(k, memory=bound * ratio)
                t = time.monotonic()
                sol = min_memory(prob, SolveOptions(memory_model="peak", time_limit=args.time_limit))
                seconds = time.monotonic() - t
                nearest = min((p["memory_over_capacity"] for p in sol.info.get("passes", [])), default=float("nan"))
                runs = sol.info.get("descents") or []
                lowest = min((r["to"] for r in runs), default=float("nan"))
                span = f"{sol.objective:.4f}" if sol.objective is not None else "-"
                print(f"| {base.name} | {k} | {ratio} | {sol.status} | {span} | {nearest:.3f} | {lowest:.3f} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
