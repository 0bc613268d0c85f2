"""The long run of the exactness guard (tests/guard.py): N random tiny instances, each judged with
a few method/option cases drawn from its seed, against enumeration. Prints the counts as a
markdown table (bench/results_guard.md) and every refuted claim.

    nice -n 10 python bench/bench_guard.py --instances 1000 [--start 0] [--cases-per-instance 3]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.guard import CASES, MAKESPAN_CASES, OBJECTIVE_CASES, judge, tiny_problem  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=1000)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--cases-per-instance", type=int, default=3)
    args = ap.parse_args()
    t0 = time.monotonic()
    outcomes: Counter = Counter()
    per_case: dict[str, Counter] = {}
    findings: list[str] = []
    for seed in range(args.start, args.start + args.instances):
        r = random.Random(10_000_019 * seed + 7)
        objective = "makespan" if r.random() < 0.7 else r.choice(["max-load", "latency"])
        pool = MAKESPAN_CASES if objective == "makespan" else [c for c in OBJECTIVE_CASES if c.objective == objective]
        problem = tiny_problem(seed, objective)
        for case in r.sample(pool, min(args.cases_per_instance, len(pool))):
            try:
                v = judge(problem, case)
                outcome, problems = v.outcome, v.problems
            except Exception:  # a traceback is a finding too
                outcome, problems = "traceback", [traceback.format_exc(limit=3)]
            outcomes[outcome] += 1
            per_case.setdefault(str(case), Counter())[outcome] += 1
            for p in problems:
                findings.append(f"seed {seed} [{case}]: {p}")
                print(findings[-1], flush=True)
    seconds = time.monotonic() - t0
    print(f"\n{args.instances} instances (seeds {args.start}..{args.start + args.instances - 1}), "
          f"{sum(outcomes.values())} runs, {len(findings)} refuted claims, {seconds:.0f} s, load {os.getloadavg()}")
    print("\n| case | runs | optimal | feasible | heuristic | infeasible | unknown | traceback |\n|---|---|---|---|---|---|---|---|")
    for case in map(str, CASES):
        c = per_case.get(case, Counter())
        print(f"| {case} | {sum(c.values())} | " + " | ".join(str(c[o]) for o in
              ("optimal", "feasible", "heuristic", "infeasible", "unknown", "traceback")) + " |")
    print(f"| total | {sum(outcomes.values())} | " + " | ".join(str(outcomes[o]) for o in
          ("optimal", "feasible", "heuristic", "infeasible", "unknown", "traceback")) + " |")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
