"""What re-homing slack groups (solvers/rehome.py) opens to the relist sweep's fork windows, from
an answer `solve` reported (bench/results_scale.md, "Session 39").

    python bench/bench_rehome.py GRAPH.json REPORT.json [--seconds 100] [--memory-model static]

Runs the relist sweep (solvers/relist_sweep.py) with its fork windows on from the first sweep,
for --seconds, twice from the report's schedule: as shipped (the sweep re-homes before each fork
sweep) and with the re-homing turned off; prints each one's makespan, windows kept and groups
moved, and the re-homing alone (its makespan and time). Run it under the bench lock: the two
sweeps are timed against the same wall-clock budget.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_windows import judged  # noqa: E402
from placement.evaluator import check  # noqa: E402
from placement.formats import load_problem  # noqa: E402
from placement.solution import SolveOptions  # noqa: E402
from solvers import relist_sweep  # noqa: E402
from solvers.rehome import rehome  # noqa: E402
from solvers.relist_sweep import RelistStats, RelistSweep  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("graph")
    ap.add_argument("report")
    ap.add_argument("--seconds", type=float, default=100.0)
    ap.add_argument("--memory-model", default="static")
    a = ap.parse_args()
    problem = load_problem(a.graph)
    ev = judged(problem, json.loads(open(a.report).read()), a.memory_model)
    ev = check(problem, ev.placement, ev.start, a.memory_model, check_memory=False)
    t = time.monotonic()
    homed = rehome(problem, ev, a.memory_model)
    took = time.monotonic() - t
    moved = 0 if homed is None else int((homed.placement != ev.placement).sum())
    print(f"{problem.name}: answer {ev.makespan:.6g}; re-homed alone "
          f"{'nothing' if homed is None else f'{homed.makespan:.6g} ({moved} nodes moved)'} in {took:.2f} s")
    print("| relist sweep | makespan | gained | sweeps | fork windows | kept | groups re-homed | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    shipped = relist_sweep.rehome
    for label, fn in (("with re-homing", shipped), ("without", lambda *args, **kw: None)):
        relist_sweep.rehome = fn
        stats = RelistStats()
        search = RelistSweep(problem, ev.placement, ev.start, SolveOptions(time_limit=a.seconds + 60),
                             memory_model=a.memory_model, stats=stats)
        search.forks = True
        t = time.monotonic()
        best = search.run(t + a.seconds)
        print(f"| {label} | {best.makespan:.6g} | {ev.makespan - best.makespan:+.4g} | {stats.sweeps} | "
              f"{stats.forks} | {stats.kept} | {stats.rehomed} | {time.monotonic() - t:.1f} |")
    relist_sweep.rehome = shipped


if __name__ == "__main__":
    main()
