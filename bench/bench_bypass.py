"""The bypass bound against the bounds before it, with compute times (bench/results_scale.md,
"Session 7: bounds").

    python bench/bench_bypass.py [--model static|peak] GRAPH.json ...

One line per graph: n, K, the best bound without the bypass bound ("before": critical path,
load, largest node or group, communication, memory path under the given model, and the forced
bound from that floor), the bypass bound alone, the best with it ("after", the forced bound from the
new floor), the whole lower_bounds() time and the bypass part's time, and the load average.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from placement.bounds import lower_bounds  # noqa: E402
from placement.bypass_bound import chain_bound  # noqa: E402
from placement.comm_bound import heads  # noqa: E402
from placement.forced_bound import forced_bound  # noqa: E402
from placement.formats import load_problem  # noqa: E402
from placement.memory_path_bound import best_path  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--model", default="static")
    args = ap.parse_args()
    print("| graph | n | K | model | before (which) | bypass | after | gain | lower_bounds s | bypass s | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in args.graphs:
        prob = load_problem(path)
        t0 = time.perf_counter()
        lbs = lower_bounds(prob, args.model)
        t_all = time.perf_counter() - t0
        head, tail = heads(prob), heads(prob, reverse=True)
        t1 = time.perf_counter()
        chain = best_path(prob, prob.time, np.zeros(prob.m))
        bypass = chain_bound(prob, chain, head, tail)
        t_bypass = time.perf_counter() - t1
        others = {k: v for k, v in lbs.as_dict().items() if k not in ("bypass", "forced", "best")}
        floor = max(others.values())
        before_forced = forced_bound(prob, args.model, head, tail, floor=floor)
        before = max(floor, before_forced)
        which = "forced" if before_forced > floor + 1e-9 else max(others, key=others.get)
        after = lbs.best
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        name = os.path.basename(path).removesuffix(".json")
        print(f"| {name} | {prob.n} | {prob.k} | {args.model} | {before:.6g} ({which}) | {bypass:.6g} | {after:.6g} | "
              f"{100 * (after / before - 1):+.2f}% | {t_all:.2f} | {t_bypass:.2f} | load {load} |", flush=True)


if __name__ == "__main__":
    main()
