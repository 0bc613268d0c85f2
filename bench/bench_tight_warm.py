"""The warm start's portfolio under a tight peak memory: which members run, for how long, and what
each answers (session 35: where the memory repair sat in the order decided whether a 120 s run
ever saw it).

Each graph is solved by ``heuristics.portfolio.portfolio`` alone at capacities of RATIO x the peak
model's ``memory_lower_bound`` for K devices, with the budget the pipeline gives its warm start in a
120 s run (``--budget 26 --own 16``: the stretched limit and the portfolio's own share,
solvers/pipeline.py ``warm_seconds``). One line per (graph, ratio): the answer, the member that gave
it, then every member that ran as (name, seconds, makespan or None). Development figures: run it
alone for the seconds to mean anything.

    python bench/bench_tight_warm.py GRAPH.json [GRAPH.json ...] --devices 4 --ratios 1.1,1.2,1.3
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from heuristics.portfolio import portfolio
from placement.formats import read_problem
from placement.memory_bounds import memory_lower_bound
from placement.solution import SolveOptions
from solvers.pipeline import WARM_ALSO, WARM_FIRST


def member_rows(path: str, k: int, ratios: list[float], budget: float, own: float) -> list[str]:
    """One line per ratio for the graph at ``path`` (module docstring)."""
    free = read_problem(path).with_devices(k, float("inf"))
    lb = float(memory_lower_bound(free, "peak", k)["best"])
    rows = []
    for ratio in ratios:
        p = free.with_devices(k, lb * ratio)
        opts = SolveOptions(time_limit=budget, memory_model="peak",
                            extra={"own_seconds": own, "stretched_for": WARM_FIRST + WARM_ALSO})
        t = time.monotonic()
        sol = portfolio(p, opts)
        ran = [(m["method"], round(m["seconds"], 1), None if m["makespan"] is None else round(m["makespan"], 3))
               for m in sol.info["members"] if m["status"] != "skipped"]
        answer = None if sol.objective is None else round(sol.objective, 3)
        rows.append(f"{Path(path).stem} K={k} {ratio}x: {answer} ({sol.info.get('best')}) in "
                    f"{time.monotonic() - t:.1f} s; ran {ran}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--ratios", default="1.1,1.2,1.3")
    ap.add_argument("--budget", type=float, default=26.0, help="the portfolio's (stretched) time limit")
    ap.add_argument("--own", type=float, default=16.0, help="its own share once an answer is in hand")
    args = ap.parse_args()
    ratios = [float(r) for r in args.ratios.split(",")]
    for g in args.graphs:
        for line in member_rows(g, args.devices, ratios, args.budget, args.own):
            print(line, flush=True)


if __name__ == "__main__":
    main()
