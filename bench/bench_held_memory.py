"""The held-tensor knapsacks under the peak model (formulations/held_bound.py): per graph, the
memory lower bound (placement/memory_bounds.py), the knapsacks' bisection bound and its seconds,
and the check auto runs before its warm start at RATIO x the memory lower bound (its answer and
seconds). One in-process row per graph; serialise with the bench lock:

    flock /tmp/bench.lock python3 bench/bench_held_memory.py OUT.jsonl GRAPH.json [...] [--devices 4]
        [--ratios 1.3 2.0] [--seconds 10]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np


def main() -> None:
    from formulations.held_bound import held_knapsacks_feasible, held_memory_bound
    from placement.evaluator import evaluate
    from placement.formats import load_problem
    from placement.memory_bounds import memory_lower_bound
    from placement.solution import SolveOptions

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--ratios", type=float, nargs="+", default=[1.3, 2.0])
    ap.add_argument("--seconds", type=float, default=10.0, help="the bisection's budget")
    a = ap.parse_args()
    k = a.devices
    for graph in a.graphs:
        p = load_problem(graph).with_devices(k, [math.inf] * k)
        low = float(memory_lower_bound(p, "peak")["best"])
        one = p.with_devices(1, [math.inf])
        high = float(evaluate(one, np.zeros(one.n, dtype=np.int64), memory_model="peak").peak_memory.max())
        opts = SolveOptions(memory_model="peak", time_limit=None)
        t = time.monotonic()
        held = held_memory_bound(p, low, high, opts, a.seconds)
        row = {"graph": os.path.basename(graph), "nodes": p.n, "k": k, "memory_lower_bound": low, "one_device_peak": high,
               "held_bound": held, "raised": round(held / low, 4), "held_seconds": round(time.monotonic() - t, 3),
               "load": round(os.getloadavg()[0], 2), "checks": {}}
        for r in a.ratios:
            t = time.monotonic()
            got = held_knapsacks_feasible(p.with_devices(k, [math.ceil(r * low)] * k), opts, 3.0)
            row["checks"][str(r)] = {"fits_knapsacks": got, "seconds": round(time.monotonic() - t, 3)}
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
