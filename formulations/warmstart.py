"""A warm start for the exact models on chain-like DNN graphs: the best contiguous split.

Cut a topological order into at most K contiguous segments, segment j on device j, each within its
device's static memory (a colocation group goes with its first member). A dynamic programme picks
the cuts minimising the sum, over cuts, of the largest comm of an edge crossing the cut (the delay
the cut adds to a chain); every segment count is then scheduled by the evaluator and the best
makespan kept. On inference graphs that are nearly chains (BERT, ResNet) this lands close to the
critical path plus the unavoidable transfers, which the exact model then only has to polish.
"""
from __future__ import annotations

import time

import numpy as np

from placement.evaluator import evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .common import units


def pull_order(problem: Problem) -> np.ndarray:
    """A topological order that emits each node's inputs just before it (post-order DFS over
    predecessors from the sinks), so a weight or constant sits next to its consumer."""
    n = problem.n
    ptr, nbr, _ = problem.pred_ptr
    rank = problem.topo_rank
    done = np.zeros(n, dtype=bool)
    out: list[int] = []
    sinks = [v for v in problem.topo_order.tolist() if problem.succ_ptr[0][v + 1] == problem.succ_ptr[0][v]]
    for root in sinks:
        if done[root]:
            continue
        stack = [(root, False)]
        while stack:
            v, expanded = stack.pop()
            if done[v]:
                continue
            if expanded:
                done[v] = True
                out.append(v)
                continue
            stack.append((v, True))
            preds = sorted(nbr[ptr[v]:ptr[v + 1]].tolist(), key=lambda u: -rank[u])
            stack.extend((u, False) for u in preds if not done[u])
    return np.asarray(out, dtype=np.int64)


def contiguous_splits(problem: Problem, order: np.ndarray | None = None, anchor: str = "first") -> list[np.ndarray]:
    """One placement per segment count 1..K (when some split fits), best proxy cost first.

    A colocation unit goes with the segment of its ``anchor`` member in ``order``: "first" or
    "last" (with a weight emitted before its operator, "last" keeps operators in order)."""
    n, k = problem.n, problem.k
    order = problem.topo_order if order is None else order
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    un = units(problem)
    need = problem.param_bytes + problem.out_bytes
    if anchor not in ("first", "last"):
        raise ValueError(f"anchor must be 'first' or 'last', got {anchor!r}")
    first_pos = np.array([int(pos[m].min() if anchor == "first" else pos[m].max()) for m in un.members])
    w = np.zeros(n)
    np.add.at(w, first_pos, [float(need[m].sum()) for m in un.members])
    W = np.concatenate([[0.0], np.cumsum(w)])
    unit_pos = first_pos[un.of]  # the position that decides each node's segment
    cross = np.zeros(n + 1)
    for e in range(problem.m):
        a, b = int(unit_pos[problem.src[e]]), int(unit_pos[problem.dst[e]])
        lo, hi = min(a, b), max(a, b)
        if hi > lo:
            np.maximum(cross[lo + 1:hi + 1], problem.comm[e], out=cross[lo + 1:hi + 1])
    inf = np.inf
    f = np.full((k + 1, n + 1), inf)
    arg = np.full((k + 1, n + 1), -1, dtype=np.int64)
    f[0, 0] = 0.0
    cap = problem.memory * (1 + 1e-12) + 1e-9
    for j in range(1, k + 1):
        prev = f[j - 1] + np.where(np.arange(n + 1) > 0, cross, 0.0)
        for b in range(1, n + 1):
            ok = W[b] - W[:b] <= cap[j - 1]
            cand = np.where(ok, prev[:b], inf)
            a = int(np.argmin(cand))
            if cand[a] < inf:
                f[j, b] = cand[a]
                arg[j, b] = a
    out: list[tuple[float, np.ndarray]] = []
    for j in range(1, k + 1):
        if not np.isfinite(f[j, n]):
            continue
        seg = np.empty(n, dtype=np.int64)
        b, jj = n, j
        while jj > 0:
            a = int(arg[jj, b])
            seg[a:b] = jj - 1
            b, jj = a, jj - 1
        out.append((float(f[j, n]), seg[unit_pos]))
    out.sort(key=lambda x: x[0])
    return [pl for _, pl in out]


def topo_split(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    best: tuple[float, np.ndarray] | None = None
    mask = problem.allowed_mask()
    pull = pull_order(problem)
    cands = [pl for order in (None, pull) for anchor in ("first", "last") for pl in contiguous_splits(problem, order, anchor)]
    for pl in cands:
        if not mask[np.arange(problem.n), pl].all():
            continue
        ev = evaluate(problem, pl, memory_model=opts.memory_model)
        if ev.feasible(problem) and (best is None or ev.makespan < best[0]):
            best = (ev.makespan, pl)
    if best is None:
        return Solution("topo-split", "unknown", reason="topo-split: no contiguous split fits memory and the allowed devices",
                        seconds=time.monotonic() - t0)
    return Solution("topo-split", "heuristic", placement=best[1], objective=best[0], seconds=time.monotonic() - t0)
