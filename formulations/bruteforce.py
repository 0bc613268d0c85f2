"""Brute-force enumerator for tiny instances: the reference the exact models are tested against.

Enumerates every placement up to relabelling of identical devices (canonical labelling by lowest
unit, as in the CP-SAT symmetry breaking), respecting allowed devices and colocation, and for each
every order of the positive-time nodes on each device consistent with the graph. Each order is
left-justified (earliest starts; zero-time nodes start as soon as their inputs arrive).

Static memory: every schedule of the contract can be left-justified without changing its device
orders or memory, so the best enumerated schedule is the optimum ("optimal"). Peak memory: the
lifetimes depend on the timing and delaying a node may lower the peak, so left-justified orders
are not enough: each placement is searched by branch and bound over the disjunctions of device
order and buffer overlap (formulations/peak_search.py), which is exact too.
"""
from __future__ import annotations

import itertools
import threading
import time
from typing import Iterator

import numpy as np

from placement.evaluator import check, peak_memory
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .peak_search import best_schedule_bb
from .common import (device_classes, finish_solution, infeasible_reason, judge_reserved, longest_starts, units,
                     with_reserve)

MAX_NODES = 10


def placements(problem: Problem) -> Iterator[np.ndarray]:
    """Canonical placements: within each class of identical devices, device c_j is used only after
    c_{j-1} holds a lower unit. Static memory is not filtered here."""
    un = units(problem)
    mask = problem.allowed_mask()
    prev_in_class: dict[int, int | None] = {}
    for cls in device_classes(problem):
        for j, d in enumerate(cls):
            prev_in_class[d] = cls[j - 1] if j else None
    dev_of_unit = [-1] * un.count
    used = [False] * problem.k

    def rec(g: int) -> Iterator[np.ndarray]:
        if g == un.count:
            pl = np.empty(problem.n, dtype=np.int64)
            for h, mem in enumerate(un.members):
                pl[mem] = dev_of_unit[h]
            yield pl
            return
        for d in np.flatnonzero(mask[un.members[g][0]]).tolist():
            p = prev_in_class[d]
            if p is not None and not used[p]:
                continue
            was = used[d]
            used[d] = True
            dev_of_unit[g] = d
            yield from rec(g + 1)
            used[d] = was

    yield from rec(0)


def _reach(problem: Problem) -> list[int]:
    """Bitmask of ancestors of each node."""
    anc = [0] * problem.n
    ptr, nbr, _ = problem.pred_ptr
    for v in problem.topo_order.tolist():
        for u in nbr[ptr[v]:ptr[v + 1]].tolist():
            anc[v] |= anc[u] | (1 << u)
    return anc


def _extensions(nodes: list[int], anc: list[int]) -> Iterator[tuple[int, ...]]:
    """All orders of ``nodes`` that put every ancestor before its descendants."""
    if not nodes:
        yield ()
        return
    full = 0
    for v in nodes:
        full |= 1 << v

    def rec(done: int, seq: list[int]) -> Iterator[tuple[int, ...]]:
        if len(seq) == len(nodes):
            yield tuple(seq)
            return
        for v in nodes:
            if not done >> v & 1 and (anc[v] & full) & ~done == 0:
                seq.append(v)
                yield from rec(done | 1 << v, seq)
                seq.pop()

    yield from rec(0, [])


def _schedule(n: int, dur: list[float], succ: list[list[tuple[int, float]]], indeg0: list[int],
              chains: tuple[tuple[int, ...], ...]) -> list[float] | None:
    """Earliest starts when each device runs its chain in order (None if the chains contradict the graph)."""
    succ = [list(s) for s in succ]
    indeg = indeg0[:]
    for seq in chains:
        for a, c in zip(seq, seq[1:]):
            succ[a].append((c, 0.0))
            indeg[c] += 1
    return longest_starts(dur, succ, indeg, [0.0] * n)


def enumerate_best(problem: Problem, memory_model: str = "static", deadline: float | None = None,
                   stop: threading.Event | None = None) -> tuple[tuple[float, np.ndarray, np.ndarray] | None, bool]:
    """(makespan, placement, start) of the best enumerated schedule that fits memory (or None), and
    whether the enumeration completed before ``deadline`` (a time.monotonic() value)."""
    n = problem.n
    dur = problem.time.tolist()
    anc = _reach(problem)
    need = problem.param_bytes + problem.out_bytes if memory_model == "static" else problem.param_bytes
    cap = problem.memory * (1 + 1e-12) + 1e-9
    src, dst = problem.src.tolist(), problem.dst.tolist()
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for pl in placements(problem):
        if (deadline is not None and time.monotonic() > deadline) or (stop is not None and stop.is_set()):
            return best, False
        if np.any(np.bincount(pl, weights=need, minlength=problem.k) > cap):
            continue
        pll = pl.tolist()
        succ: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        indeg0 = [0] * n
        for e, (u, v) in enumerate(zip(src, dst)):
            succ[u].append((v, float(problem.comm[e]) if pll[u] != pll[v] else 0.0))
            indeg0[v] += 1
        per_dev = [[v for v in range(n) if pll[v] == d and dur[v] > 0] for d in range(problem.k)]
        for chains in itertools.product(*[list(_extensions(nodes, anc)) for nodes in per_dev]):
            st = _schedule(n, dur, succ, indeg0, chains)
            if st is None:
                continue
            mk = max((s + t for s, t in zip(st, dur)), default=0.0)
            if best is not None and mk >= best[0]:
                continue
            start = np.asarray(st)
            if memory_model == "peak":
                peak = peak_memory(problem, pl, start, start + problem.time)
                if np.any(peak > cap):
                    continue
            best = (mk, pl.copy(), start)
    return best, True


def brute(problem: Problem, opts: SolveOptions) -> Solution:
    return judge_reserved(problem, opts, _brute(with_reserve(problem, opts), opts))


def _brute(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    limit = int(opts.extra.get("max_nodes", MAX_NODES))
    if problem.n > limit:
        return Solution("brute", "unknown", reason=f"brute: {problem.n} nodes is too many to enumerate (limit {limit})",
                        seconds=time.monotonic() - t0)
    why = infeasible_reason(problem, opts.memory_model)
    if why:
        return Solution("brute", "infeasible", reason=why, seconds=time.monotonic() - t0)
    rem = opts.remaining()
    deadline = None if rem is None else time.monotonic() + rem
    if opts.memory_model == "static":
        got, complete = enumerate_best(problem, opts.memory_model, deadline, opts.stop)
    else:
        got, complete = best_schedule_bb(problem, placements(problem), "peak", deadline, opts.stop)
    if got is None:
        if complete:
            return Solution("brute", "infeasible", reason=f"brute: no schedule fits the {opts.memory_model} memory capacities",
                            seconds=time.monotonic() - t0)
        return Solution("brute", "unknown", reason="brute: the time limit stopped the enumeration", seconds=time.monotonic() - t0)
    mk, pl, start = got
    check(problem, pl, start, opts.memory_model)
    return finish_solution(problem, opts, "brute", t0, complete, mk if complete else None, (pl, start), {"complete": complete})
