"""Exact optimum of tiny instances under either memory model, by branch and bound on disjunctions.

Why not left-justified device orders alone (formulations/bruteforce.py's static enumeration)? Under
the peak model, delaying a node can shorten the overlap of two tensors and lower the peak, so the
best left-justified schedule that fits may not be optimal. Here, per placement, a schedule is the
least solution of difference constraints ``S_j >= S_i + w`` (precedence with comm, and the
constraints chosen so far); if it breaks a disjunctive requirement, the search branches on the
ways to satisfy it:

- two positive-time nodes overlapping on a device: one finishes before the other starts;
- a device over capacity at time tau under the peak model: the buffers live at tau
  (placement.evaluator.buffers) pairwise overlap there, so every schedule within capacity must make
  one of them empty (all its ends at or before its start) or put one wholly before another (all
  the ends of A at or before the start of B). Half-open intervals that pairwise intersect share a
  point (Helly), so without one of these the same buffers would overflow together again.

Every branch adds a constraint the current least schedule breaks, so the search ends. Soundness:
every leaf is checked by placement.evaluator.check. Completeness: a feasible schedule satisfies one
side of every disjunction met on the way down, so some leaf's least schedule lies pointwise below
it (a least solution of constraints it satisfies), with a makespan no larger and - the live
buffers being a subset - within capacity. Pruning by the incumbent only drops subtrees whose least
makespan already reaches it (constraints only delay starts).
"""
from __future__ import annotations

import threading
import time
from typing import Iterable

import numpy as np

from placement.evaluator import check, peak_memory
from placement.problem import Problem

# A time point: (node, 0) is its start S, (node, 1) its finish F = S + time.
Point = tuple[int, int]


class _Stopped(Exception):
    pass


def _buffers(problem: Problem, pl: list[int]) -> list[tuple[int, float, Point, list[Point]]]:
    """(device, bytes, start point, end points) of every tensor buffer of placement ``pl``, as
    placement.evaluator.buffers defines them (the end is the latest of the end points)."""
    ptr, nbr, _ = problem.succ_ptr
    out: list[tuple[int, float, Point, list[Point]]] = []
    for u in range(problem.n):
        size = float(problem.out_bytes[u])
        if size <= 0:
            continue
        by_dev: dict[int, list[int]] = {}
        for c in nbr[ptr[u]:ptr[u + 1]].tolist():
            by_dev.setdefault(pl[c], []).append(c)
        for d, cons in by_dev.items():
            local = d == pl[u]
            ends = [(c, 1) for c in cons] + ([(u, 1)] if local else [])
            out.append((d, size, (u, 0) if local else (u, 1), ends))
        if pl[u] not in by_dev:
            out.append((pl[u], size, (u, 0), [(u, 1)]))
    return out


def _least_schedule(n: int, cons: list[tuple[int, int, float]]) -> list[float] | None:
    """Least S >= 0 with S_j >= S_i + w for every (i, j, w) (Bellman-Ford); None on a positive cycle."""
    s = [0.0] * n
    for _ in range(n + 1):
        changed = False
        for i, j, w in cons:
            if s[i] + w > s[j] + 1e-12:
                s[j] = s[i] + w
                changed = True
        if not changed:
            return s
    return None


def best_schedule_bb(problem: Problem, placements: Iterable[np.ndarray], memory_model: str, deadline: float | None = None,
                     stop: threading.Event | None = None) -> tuple[tuple[float, np.ndarray, np.ndarray] | None, bool]:
    """(makespan, placement, start) of an optimal schedule over ``placements`` (an iterable of
    placement arrays) within ``memory_model``, or None when none fits; and whether the search
    completed before ``deadline`` / ``stop``."""
    n = problem.n
    dur = problem.time.tolist()
    busy = [v for v in range(n) if dur[v] > 0]
    cap = problem.memory * (1 + 1e-12) + 1e-9
    static_need = problem.param_bytes + problem.out_bytes
    best: list = [None]

    def point(s: list[float], p: Point) -> float:
        return s[p[0]] + (dur[p[0]] if p[1] else 0.0)

    def before(a: Point, b: Point) -> tuple[int, int, float]:
        """The constraint a <= b as (i, j, w): S_b >= S_a + w."""
        return a[0], b[0], (dur[a[0]] if a[1] else 0.0) - (dur[b[0]] if b[1] else 0.0)

    def search(pl: np.ndarray) -> None:
        pll = pl.tolist()
        params = np.bincount(pl, weights=problem.param_bytes, minlength=problem.k)
        if np.any(params > cap):
            return
        bufs = _buffers(problem, pll) if memory_model == "peak" else []
        base = [(u, v, dur[u] + (float(problem.comm[e]) if pll[u] != pll[v] else 0.0))
                for e, (u, v) in enumerate(zip(problem.src.tolist(), problem.dst.tolist()))]

        def rec(cons: list[tuple[int, int, float]]) -> None:
            if (deadline is not None and time.monotonic() > deadline) or (stop is not None and stop.is_set()):
                raise _Stopped
            s = _least_schedule(n, cons)
            if s is None:
                return
            mk = max((s[v] + dur[v] for v in range(n)), default=0.0)
            if best[0] is not None and mk >= best[0][0] - 1e-12:
                return
            for x, a in enumerate(busy):
                for b in busy[x + 1:]:
                    if pll[a] == pll[b] and s[a] < s[b] + dur[b] - 1e-9 and s[b] < s[a] + dur[a] - 1e-9:
                        rec(cons + [before((a, 1), (b, 0))])
                        rec(cons + [before((b, 1), (a, 0))])
                        return
            live = _overflow(s, pl, params) if memory_model == "peak" else None
            if live:
                for x, (_, _, st, ends) in enumerate(live):
                    rec(cons + [before(e, st) for e in ends])
                    for y, (_, _, st2, _) in enumerate(live):
                        if x != y:
                            rec(cons + [before(e, st2) for e in ends])
                return
            start = np.asarray(s)
            ev = check(problem, pl, start, memory_model)
            best[0] = (ev.makespan, pl.copy(), start)

        def _overflow(s: list[float], pl: np.ndarray, params: np.ndarray) -> list | None:
            """The buffers live at a time where some device is over capacity, or None. Cross-checked
            against the evaluator's peak, so the branching follows the evaluator's model."""
            mine = params.copy()
            worst: list | None = None
            for d in range(problem.k):
                on = [(b, point(s, b[2]), max(point(s, e) for e in b[3])) for b in bufs if b[0] == d]
                for _, tau, _ in on:
                    alive = [b for b, t0, t1 in on if t0 <= tau < t1]
                    level = params[d] + sum(b[1] for b in alive)
                    if level > mine[d]:
                        mine[d] = level
                    if worst is None and level > cap[d]:
                        worst = alive
            theirs = peak_memory(problem, pl, np.asarray(s), np.asarray(s) + problem.time)
            if not np.allclose(mine, theirs, rtol=1e-9, atol=1e-9):
                raise AssertionError(f"peak search: buffer model {mine.tolist()} differs from the evaluator's {theirs.tolist()}")
            return worst

        rec(base)

    try:
        for pl in placements:
            if memory_model == "static" and np.any(np.bincount(pl, weights=static_need, minlength=problem.k) > cap):
                continue
            search(np.asarray(pl))
    except _Stopped:
        return best[0], False
    return best[0], True
