"""Benchmark of the auto pipeline (`solve --time-limit T`) against the heuristic portfolio.

For every msr-fiddle latency-inputs graph (delay model, static memory) and, optionally, generated
training graphs, it prints: the best heuristic of the portfolio, the pipeline's makespan, the lower
bound it certifies for the original problem, the gap, the improvement over the heuristic, the
whole-run seconds (all phases) and the seconds of each phase. Never run by CI.

    python3 bench/bench_pipeline.py --time-limit 600                 # the four latency graphs
    python3 bench/bench_pipeline.py --generated --time-limit 120     # generated 1K/10K/100K graphs
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from placement.formats import load_problem  # noqa: E402
from placement.generate import generate  # noqa: E402
from placement.solution import SolveOptions  # noqa: E402
from solvers import registry  # noqa: E402
from solvers.run import run  # noqa: E402

LATENCY = ROOT.parent / "shared" / "workloads" / "msr-fiddle" / "latency-inputs" / "OperatorGraphs"


def instances(args: argparse.Namespace):
    if not args.generated:
        for path in sorted(LATENCY.glob("*.json")):
            if not args.only or any(o in path.stem for o in args.only):
                yield path.stem, load_problem(path)
        return
    for kind in ("transformer", "lstm", "cnn"):
        for nodes in args.sizes:
            for k in args.devices:
                yield f"{kind}-{nodes}-K{k}", generate(kind, nodes, seed=0, devices=k, memory_fraction=0.6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--generated", action="store_true", help="generated training graphs instead of msr-fiddle")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--devices", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--only", nargs="*", help="substrings of instance names to keep")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    print("| instance | nodes | K | heuristic (method) | pipeline | lower bound | gap | vs heuristic | status | seconds | phases |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---|---:|---|")
    for name, prob in instances(args):
        t = time.monotonic()
        warm = registry.get("portfolio").func(prob, SolveOptions(time_limit=0.15 * args.time_limit))
        warm_s = time.monotonic() - t
        t = time.monotonic()
        res = run(prob, "auto", SolveOptions(time_limit=args.time_limit, workers=args.workers))
        secs = time.monotonic() - t
        mk = res.evaluation.makespan if res.evaluation is not None else float("nan")
        heur = warm.objective if warm.objective is not None else float("nan")
        best_member = warm.info.get("best", warm.method) if warm.info else warm.method
        phases = ", ".join(f"{p['name']} {p.get('seconds', 0):.0f}s" for p in res.history)
        gap = f"{100 * res.gap:.1f}%" if res.gap is not None else "-"
        print(f"| {name} | {prob.n} | {prob.k} | {heur:.6g} ({best_member}, {warm_s:.0f}s) | {mk:.6g} | {res.lower_bound:.6g} | {gap} | "
              f"{100 * (heur - mk) / heur:.1f}% | {res.status} | {secs:.0f} | {phases} |", flush=True)


if __name__ == "__main__":
    main()
