"""Single-sample latency on the msr-fiddle latency inputs (Tarnawski et al. Table 4), q = 1 (the
paper's contiguous IP). Not run by CI.

    python3 bench/bench_latency.py [--limit 600] [--only bert_l-6] [--workers 2] [--seed 0]

Per workload: greedy, the warm starts (DP splits, closure split, local search), latency-cpsat's
value and lower bound (max of CP-SAT's bound, the interval path, closure and pair bounds;
``proved_bound`` is that maximum before it is capped at the value), certified gap, wall seconds,
and the paper's Gurobi value and gap. One JSON line per workload on stdout (with the load average seen at
the start); summarise into bench/results_latency.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from formulations.latency.exact import solve_latency_cpsat  # noqa: E402
from formulations.latency.bounds import latency_lower_bound  # noqa: E402
from formulations.latency.heuristics import greedy_split  # noqa: E402
from placement.formats.fiddle import read_fiddle  # noqa: E402
from placement.objectives import evaluate_latency  # noqa: E402
from placement.solution import SolveOptions  # noqa: E402

ROOT = Path(__file__).resolve().parents[2] / "shared" / "workloads" / "msr-fiddle" / "latency-inputs" / "OperatorGraphs"
# file, paper greedy, paper IP latency, paper IP gap (Table 4; "<1%" written as 0.01)
PAPER = [("bert_l-3_inference", 416.20, 408.47, 0.01), ("bert_l-6_inference", 494.13, 438.06, 0.126),
         ("bert_l-12_inference", 867.84, 729.56, 0.938), ("resnet50_inference", 839.54, 672.06, 0.54)]


def run(name: str, limit: float, workers: int, seed: int) -> dict:
    p = read_fiddle(ROOT / f"{name}.json")
    load = os.getloadavg()
    t0 = time.monotonic()
    greedy = evaluate_latency(p, greedy_split(p)).value
    bound_path, _ = latency_lower_bound(p, q=1)
    bound_seconds = time.monotonic() - t0
    opts = SolveOptions(time_limit=limit, workers=workers, seed=seed)
    sol = solve_latency_cpsat(p, opts)
    info = sol.info
    return {"workload": name, "n": p.n, "k": p.k, "limit": limit, "load_at_start": [round(x, 2) for x in load],
            "greedy": greedy, "hints": info.get("hints"), "warm_start": info.get("hint"),
            "value": sol.objective, "status": sol.status, "lower_bound": sol.lower_bound,
            "interval_path_bound": bound_path, "bound_seconds": round(bound_seconds, 2),
            "closure_bound": info.get("closure_bound"), "closure_cuts": info.get("closure_cuts"),
            "pair_bound": info.get("pair_bound"),
            "proved_bound": info.get("path_bound") if info.get("cpsat_bound") is None
            else max(info["path_bound"], info["cpsat_bound"]),
            "cpsat_bound": info.get("cpsat_bound"), "cpsat_status": info.get("cpsat_status"),
            "polished": info.get("polished"), "gap": info.get("gap"), "seconds": round(time.monotonic() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=float, default=600.0)
    ap.add_argument("--only", default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    for name, pg, pv, pgap in PAPER:
        if a.only and a.only not in name:
            continue
        rec = run(name, a.limit, a.workers, a.seed)
        rec.update({"paper_greedy": pg, "paper_value": pv, "paper_gap": pgap})
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
