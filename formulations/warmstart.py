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

from heuristics.memory_order import lower_peak_order
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


def contiguous_splits(problem: Problem, order: np.ndarray | None = None, anchor: str = "first",
                      slack: float = 1.0) -> list[np.ndarray]:
    """One placement per segment count 1..K (when some split fits), best proxy cost first.

    A colocation unit goes with the segment of its ``anchor`` member in ``order``: "first" or
    "last" (with a weight emitted before its operator, "last" keeps operators in order). A
    segment's static memory must fit ``slack`` x its device's capacity (``slack`` > 1: the peak
    model, where a segment's peak is well below its static memory)."""
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
    cap = problem.memory * slack * (1 + 1e-12) + 1e-9
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


PEAK_SLACKS = 24  # proxy capacities tried under the peak model, geometric from the tightest


def _peak_slacks(problem: Problem) -> list[float]:
    """Under the peak model a segment's static memory overstates its peak (activations die), so
    the DP's capacity is relaxed by a factor from the smallest that admits K segments (total
    static / total capacity) up to the whole static memory on one device; each split found is
    judged by the evaluator. Small factors give balanced segments, large ones cheap cuts."""
    cap = float(np.min(problem.memory))
    total = float((problem.param_bytes + problem.out_bytes).sum())
    if not np.isfinite(cap) or cap <= 0:
        return [1.0]
    lo = max(1.0, total / float(np.sum(problem.memory)))
    hi = max(lo, total / cap)
    return sorted(set([1.0] + np.geomspace(lo, hi, PEAK_SLACKS).tolist()))


def topo_split(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    best: tuple[float, np.ndarray, list[list[int]] | None] | None = None
    mask = problem.allowed_mask()
    pull = pull_order(problem)
    peak = opts.memory_model == "peak"
    slacks = _peak_slacks(problem) if peak else [1.0]
    seen: set[bytes] = set()
    for slack, order, anchor in [(sl, o, a) for sl in slacks for o in (None, pull) for a in ("first", "last")]:
        if peak and (opts.out_of_time() or opts.stop.is_set()):
            break  # the peak sweep watches the clock: keep what was found
        for pl in contiguous_splits(problem, order, anchor, slack):
            key = pl.tobytes()
            if key in seen or not mask[np.arange(problem.n), pl].all():
                continue
            seen.add(key)
            ev, dev_order = evaluate(problem, pl, memory_model=opts.memory_model), None
            if peak and not ev.feasible(problem):
                got = lower_peak_order(problem, pl, ev)
                ev, dev_order = got.evaluation, got.order
            if ev.feasible(problem) and (best is None or ev.makespan < best[0]):
                best = (ev.makespan, pl, dev_order)
    if best is None:
        return Solution("topo-split", "unknown", reason="topo-split: no contiguous split tried fits memory and the allowed devices",
                        seconds=time.monotonic() - t0)
    return Solution("topo-split", "heuristic", placement=best[1], order=best[2], objective=best[0],
                    seconds=time.monotonic() - t0, info={"splits_tried": len(seen)})
