"""Window LNS's per-window re-timing at scale: what a window's answer costs besides CP-SAT.

Why: after a window whose model promises a shorter makespan, window LNS re-times the whole graph
in the new device order (``formulations.common.retime``) and checks it with the evaluator
(``window_lns.timed``); at 50K-200K nodes that was 0.15-0.5 s of Python per window
(bench/results_scale.md, "Session 11: compiled kernels"). This times those two steps on the
incumbent's own order (an answer has the same size and shape), best of ``--count``, with the
compiled kernels loaded first, and fingerprints the starts (the same on every tree).

    python3 bench/bench_lns_retime.py GRAPH.json [...] [--count 5] [--label main] [--cache DIR]
        --cache DIR: keep ETF's placement of each graph in DIR (a first run outside the lock).
        BENCH_TREE=DIR imports the project from DIR (e.g. `git archive main` extracted there).
        Run under `flock /tmp/bench.lock`; prints markdown rows with the load average.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np

TREE = Path(os.environ.get("BENCH_TREE") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(TREE))

from formulations.common import retime  # noqa: E402
from formulations.window_lns import timed  # noqa: E402
from heuristics.list_scheduling import etf  # noqa: E402
from placement import kernels  # noqa: E402
from placement.evaluator import check, evaluate  # noqa: E402
from placement.formats import load_problem  # noqa: E402
from placement.incremental import IncrementalSchedule  # noqa: E402
from placement.solution import SolveOptions  # noqa: E402


def best_ms(call, count: int) -> tuple[float, object]:
    """The fastest of ``count`` calls in milliseconds, and the last result."""
    best, out = float("inf"), None
    for _ in range(count):
        t = time.perf_counter()
        out = call()
        best = min(best, time.perf_counter() - t)
    return 1000 * best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--count", type=int, default=5)
    ap.add_argument("--label", default="this branch")
    ap.add_argument("--cache", default=None, metavar="DIR")
    args = ap.parse_args()
    kernels.load()
    print("| graph | n | code | retime ms | check ms | timed (both) ms | starts | load |")
    print("|---|---|---|---|---|---|---|---|")
    for path in args.graphs:
        p = load_problem(path)
        kept = Path(args.cache) / f"{Path(path).stem}.etf.npy" if args.cache else None
        if kept is not None and kept.exists():
            pl = np.load(kept)
        else:
            pl = np.asarray(etf(p, SolveOptions(memory_model="static")).placement, dtype=np.int64)
            if kept is not None:
                np.save(kept, pl)
        base = IncrementalSchedule(p, pl, evaluate(p, pl, memory_model="static").start)
        busy = [[v for v in seq if p.time[v] > 0] for seq in base.order]
        t_re, start = best_ms(lambda: retime(p, base.placement, busy), args.count)
        t_ch, _ = best_ms(lambda: check(p, base.placement, start, "static", check_memory=False), args.count)
        t_all, ev = best_ms(lambda: timed(p, base.placement, base.order, "static"), args.count)
        print(f"| {Path(path).stem} | {p.n} | {args.label} | {t_re:.1f} | {t_ch:.1f} | {t_all:.1f} | "
              f"{hashlib.sha1(ev.start.tobytes()).hexdigest()[:8]} | "
              + " ".join(f"{x:.2f}" for x in os.getloadavg()) + " |", flush=True)


if __name__ == "__main__":
    main()
