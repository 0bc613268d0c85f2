"""Small graphs: auto's old exact path against the search between two CP-SAT tries
(solvers/pipeline.py SMALL_SEARCH_SHARE), one whole run at a time under the bench lock.

    python bench/bench_search_first.py OUT.jsonl GRAPH.json [GRAPH.json ...] --limit 60 --ratio 1.3
        [--memory-model static] [--ratio inf]

Per graph: its memory lower bound on K devices under the model (``memory_lower_bound``, peak by
default), the capacity RATIO x it (``inf``: unlimited), then for each mode a
``run(problem, "auto")`` in a fresh process under ``flock /tmp/bench.lock``: ``exact``
(``small_search_share`` 0: CP-SAT, with the peak model's pre-refine above 400 nodes, as before
session 42; the static model's path before session 43), ``search-first`` (the default) and ``alternate`` (the big graphs' path forced:
``exact_max_nodes`` 50). Each answer is re-checked with ``placement.evaluator.check``. Rows go to
OUT.jsonl (one JSON object per run).
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time

MODES = {"exact": {"small_search_share": 0.0}, "search-first": {}, "alternate": {"exact_max_nodes": 50}}


def one(graph: str, k: int, capacity: float, limit: float, mode: str, model: str = "peak") -> dict:
    """One run of auto in this process (the child's side)."""
    from placement.evaluator import check
    from placement.formats import load_problem
    from placement.solution import SolveOptions
    from solvers.run import run

    problem = load_problem(graph).with_devices(k, [capacity] * k)
    t = time.monotonic()
    res = run(problem, "auto", SolveOptions(memory_model=model, time_limit=limit, extra=dict(MODES[mode])))
    wall = time.monotonic() - t
    row = {"graph": graph, "k": k, "model": model, "capacity": capacity, "mode": mode, "limit": limit, "status": res.status,
           "method": res.method, "makespan": None, "bound": res.lower_bound, "wall": round(wall, 2), "checked": None}
    ev = res.evaluation
    if ev is not None:
        again = check(problem, ev.placement, ev.start, model)
        row["makespan"] = ev.makespan
        row["checked"] = bool(again.feasible(problem)) and math.isclose(again.makespan, ev.makespan, rel_tol=1e-9)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--limit", type=float, default=60.0)
    ap.add_argument("--ratio", type=float, default=1.3, help="capacity / the memory lower bound (inf: unlimited)")
    ap.add_argument("--memory-model", choices=("peak", "static"), default="peak")
    ap.add_argument("--modes", nargs="+", default=["exact", "search-first"], choices=sorted(MODES))
    ap.add_argument("--child", nargs=3, metavar=("GRAPH", "CAPACITY", "MODE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.child[0], a.devices, float(a.child[1]), a.limit, a.child[2], a.memory_model)))
        return
    from placement.formats import load_problem
    from placement.memory_bounds import memory_lower_bound

    for graph in a.graphs:
        problem = load_problem(graph)
        bound = memory_lower_bound(problem.with_devices(a.devices, [math.inf] * a.devices), a.memory_model, a.devices)["best"]
        capacity = math.inf if math.isinf(a.ratio) else math.ceil(a.ratio * bound)
        for mode in a.modes:
            cmd = ["flock", "/tmp/bench.lock", sys.executable, __file__, a.out, graph, "--devices", str(a.devices),
                   "--limit", str(a.limit), "--memory-model", a.memory_model, "--child", graph, str(capacity), mode]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
            with open(a.out, "a") as f:
                f.write(out + "\n")
            print(out, flush=True)


if __name__ == "__main__":
    main()
