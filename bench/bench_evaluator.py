"""Time the evaluator on generated transformer training graphs of 10K to 1M nodes.

Why: every method re-evaluates its placements through placement.evaluator, so its speed bounds
what local search and the orchestrator can do on large graphs (goal: 200K nodes in about a second).

For each size: generate (K = 16, unlimited memory), place contiguous blocks of the topological order
with equal total time on the 16 devices, then time evaluate() (FIFO simulation + static + peak
memory) and check() on the schedule it returned, best of --repeats runs (the first call also
builds the cached topological rank). Prints a markdown table.

    python3 bench/bench_evaluator.py [--sizes 10000,50000,200000,1000000] [--profile 200000]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from placement.evaluator import check, evaluate  # noqa: E402
from placement.generate import generate  # noqa: E402
from placement.problem import Problem  # noqa: E402


def block_placement(problem: Problem, k: int) -> np.ndarray:
    """Contiguous blocks of the topological order with about equal compute, colocation respected
    (a group follows its first member)."""
    order = problem.topo_order
    cum = np.cumsum(problem.time[order])
    total = cum[-1] if cum.size else 0.0
    dev = np.minimum((cum / max(total, 1e-300) * k).astype(np.int64), k - 1)
    pl = np.empty(problem.n, dtype=np.int64)
    pl[order] = dev
    for members in problem.groups:
        first = members[np.argmin(problem.topo_rank[members])]
        pl[members] = pl[first]
    return pl


def _timed(func, repeats: int):  # type: ignore[no-untyped-def]
    """(first call seconds, best of ``repeats`` calls seconds, result)."""
    times = []
    result = None
    for _ in range(max(repeats, 1)):
        t0 = time.perf_counter()
        result = func()
        times.append(time.perf_counter() - t0)
    return times[0], min(times), result


def run(kind: str, nodes: int, k: int, repeats: int) -> dict[str, float]:
    t0 = time.perf_counter()
    p = generate(kind, nodes, devices=k, memory_fraction=None)
    gen = time.perf_counter() - t0
    pl = block_placement(p, k)
    first, ev_s, ev = _timed(lambda: evaluate(p, pl, memory_model="peak"), repeats)
    _, ck_s, _ = _timed(lambda: check(p, pl, ev.start, memory_model="peak"), repeats)
    return {"nodes": p.n, "edges": p.m, "generate": gen, "first": first, "evaluate": ev_s, "check": ck_s,
            "makespan": ev.makespan, "serial": float(p.time.sum())}


def profile(nodes: int, k: int) -> str:
    p = generate("transformer", nodes, devices=k, memory_fraction=None)
    pl = block_placement(p, k)
    p.topo_rank, p.succ_ptr  # cached structure is not the evaluator's cost
    prof = cProfile.Profile()
    prof.enable()
    evaluate(p, pl, memory_model="peak")
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,50000,200000,1000000")
    ap.add_argument("--devices", type=int, default=16)
    ap.add_argument("--kind", default="transformer")
    ap.add_argument("--repeats", type=int, default=3, help="evaluate/check runs per size; the best is reported")
    ap.add_argument("--profile", type=int, default=0, help="also profile evaluate() at this size")
    args = ap.parse_args()
    print("| nodes | edges | generate s | first evaluate s | evaluate s | check s | evaluate nodes/s | makespan / serial |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        r = run(args.kind, size, args.devices, args.repeats)
        print(f"| {r['nodes']:,} | {r['edges']:,} | {r['generate']:.2f} | {r['first']:.2f} | {r['evaluate']:.2f} | "
              f"{r['check']:.2f} | {r['nodes'] / r['evaluate']:,.0f} | {r['makespan'] / r['serial']:.3f} |", flush=True)
    if args.profile:
        print(profile(args.profile, args.devices))


if __name__ == "__main__":
    main()
