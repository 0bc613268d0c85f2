"""Random feasible placement: a sanity anchor that any real heuristic must beat.

Units (ungrouped nodes and whole colocation groups) are visited in a random order and each is put
on a random allowed device that still has room for its static memory (params + outputs) within
capacity x (1 - opts.reserve). Seeded by opts.seed; a few attempts with derived seeds before giving
up with status ``unknown``.
"""
from __future__ import annotations

import time

import numpy as np

from placement.evaluator import evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .pardnn.overflow import Units

ATTEMPTS = 5


def random_placement(problem: Problem, rng: np.random.Generator, reserve: float = 0.0) -> np.ndarray | None:
    units = Units.of_problem(problem)
    need = np.bincount(units.of, weights=problem.param_bytes + problem.out_bytes, minlength=len(units.members))
    cap = problem.memory * (1.0 - reserve)
    used = np.zeros(problem.k)
    pl = np.full(problem.n, -1, dtype=np.int64)
    for u in rng.permutation(len(units.members)).tolist():
        ok = np.flatnonzero(units.mask[u] & (used + need[u] <= cap * (1 + 1e-12) + 1e-9))
        if ok.size == 0:
            return None
        d = int(ok[rng.integers(ok.size)])
        pl[units.members[u]] = d
        used[d] += need[u]
    return pl


def random_feasible(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    for attempt in range(ATTEMPTS):
        pl = random_placement(problem, np.random.default_rng([opts.seed, attempt]), opts.reserve)
        if pl is None:
            continue
        ev = evaluate(problem, pl, memory_model=opts.memory_model)
        if ev.feasible(problem):
            return Solution("random", "heuristic", placement=pl, objective=ev.makespan, seconds=time.monotonic() - t0,
                            info={"attempt": attempt})
    return Solution("random", "unknown", reason=f"random: no memory-feasible random placement in {ATTEMPTS} attempts",
                    seconds=time.monotonic() - t0)
