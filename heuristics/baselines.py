"""Simple memory-aware baselines: sanity anchors and the fallback of last resort.

- ``topo-fill``: walk a topological order and fill devices one after another, each up to an equal
  share of the total static memory (Baechi's m-TOPO), spilling to the next device with room.
- ``greedy-fill``: the same walk, filling each device up to its capacity (Tarnawski et al.'s latency
  greedy): fewest cuts, least balance.
- ``single``: everything on the largest device, when it fits.

All are deterministic. They size by static memory (params + outputs), which is what the static
model measures; under the peak model the evaluator reports the true peak.
"""
from __future__ import annotations

import time

import numpy as np

from placement.evaluator import evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions


def _units(problem: Problem) -> list[np.ndarray]:
    """Nodes in topological order, a colocation group moving as one unit at its first member."""
    seen_group: set[int] = set()
    units: list[np.ndarray] = []
    groups = problem.groups
    for v in problem.topo_order.tolist():
        g = int(problem.colocate[v])
        if g < 0:
            units.append(np.array([v]))
        elif g not in seen_group:
            seen_group.add(g)
            units.append(groups[g])
    return units


def fill(problem: Problem, shares: np.ndarray) -> np.ndarray | None:
    """Topological fill: put each unit on the current device if it stays within ``shares`` there,
    else on the next device (in index order) that can still hold it within its capacity.

    Returns a placement, or None if some unit fits on no allowed device."""
    need = problem.param_bytes + problem.out_bytes
    mask = problem.allowed_mask()
    used = np.zeros(problem.k)
    placement = np.full(problem.n, -1, dtype=np.int64)
    cur = 0
    for unit in _units(problem):
        size = float(need[unit].sum())
        ok = mask[unit[0]]
        choice = -1
        for d in list(range(cur, problem.k)) + list(range(cur)):
            if ok[d] and used[d] + size <= shares[d]:
                choice = d
                break
        if choice < 0:  # no device within its share: take the allowed one with most room left
            room = np.where(ok, problem.memory - used, -np.inf)
            choice = int(np.argmax(room))
            if room[choice] < size:
                return None
        placement[unit] = choice
        used[choice] += size
        if choice > cur:
            cur = choice
    return placement


def _solution(problem: Problem, opts: SolveOptions, name: str, placement: np.ndarray | None, t0: float, why: str) -> Solution:
    if placement is None:
        return Solution(name, "unknown", reason=why, seconds=time.monotonic() - t0)
    ev = evaluate(problem, placement, memory_model=opts.memory_model)
    if not ev.feasible(problem):
        over = ev.overflow(problem)
        return Solution(name, "unknown", reason=f"{name}: placement exceeds memory by {over.tolist()} bytes per device",
                        seconds=time.monotonic() - t0, info={"overflow": over.tolist(), "placement": placement})
    return Solution(name, "heuristic", placement=placement, objective=ev.makespan, seconds=time.monotonic() - t0)


def topo_fill(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    cap = problem.memory * (1.0 - opts.reserve)
    total = float((problem.param_bytes + problem.out_bytes).sum())
    share = np.minimum(cap, total / problem.k * 1.0 + 1e-9)
    return _solution(problem, opts, "topo-fill", fill(problem, share), t0, "topo-fill: some node or colocation group fits on no device")


def greedy_fill(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    cap = problem.memory * (1.0 - opts.reserve)
    return _solution(problem, opts, "greedy-fill", fill(problem, cap), t0, "greedy-fill: some node or colocation group fits on no device")


def single(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    mask = problem.allowed_mask().all(axis=0)
    cand = np.flatnonzero(mask)
    if cand.size == 0:
        return Solution("single", "unknown", reason="single: no device is allowed for every node", seconds=time.monotonic() - t0)
    d = int(cand[np.argmax(problem.memory[cand])])
    return _solution(problem, opts, "single", np.full(problem.n, d, dtype=np.int64), t0, "")
