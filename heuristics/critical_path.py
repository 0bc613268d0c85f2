"""The critical-path heuristic of Mayer, Mayer and Laich (2017), "The TensorFlow partitioning and
scheduling problem: it's the critical path!", as PARDNN compares against it.

The critical path (longest path counting compute and comm) is kept on one device, the one with the
most memory, so none of its edges pays a transfer; every other node, in non-increasing bottom-level
order, goes to the device where it can finish earliest (no gap filling). Memory check as in
list_scheduling (static, plus received tensors under the peak model): a critical-path node that no
longer fits on its device is treated like the others.
"""
from __future__ import annotations

import time

import numpy as np

from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .list_scheduling import Stopped, _fail, _result, _stopped, insertion_schedule, run_with_accounting, upward_rank_order
from .pardnn.graph import Graph, weighted_levels


def critical_path_nodes(problem: Problem) -> np.ndarray:
    """Node indices on one critical path, from a source to a sink."""
    g = Graph.of(problem)
    tl, _, wl = weighted_levels(g, problem.comm)
    if problem.n == 0:
        return np.zeros(0, dtype=np.int64)
    v = int(np.lexsort((problem.topo_rank, tl, -wl))[0])
    path = [v]
    sp, sn, se = problem.succ_ptr
    while sp[v] < sp[v + 1]:
        nbr = sn[sp[v]:sp[v + 1]]
        # the successor continuing the longest path: tight edge with the largest weighted level
        v = int(nbr[np.lexsort((problem.topo_rank[nbr], -wl[nbr]))[0]])
        path.append(v)
    return np.asarray(path, dtype=np.int64)


def critical_path(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    pinned = np.full(problem.n, -1, dtype=np.int64)
    cp = critical_path_nodes(problem)
    pinned[cp] = int(np.argmax(problem.memory))
    prio = upward_rank_order(problem)
    try:
        dev, order, bad, info = run_with_accounting(
            lambda acc: insertion_schedule(problem, prio, opts.reserve, False, pinned, acc, stop=opts.stop.is_set),
            problem, opts, False)
    except Stopped:
        return _stopped("critical-path", t0)
    if bad >= 0:
        return _fail("critical-path", problem, bad, t0)
    return _result(problem, opts, "critical-path", dev, order, t0, {**info, "critical_path_nodes": int(cp.size)})
