"""Graph views and level computations shared by the PARDNN steps and the list-scheduling baselines.

PARDNN measures everything in *levels*: the top level tl(n) (longest path from a source up to n,
n excluded), the bottom level bl(n) (longest path from n to a sink, n included), both counting
computation and communication, and the weighted level tl + bl (the length of the longest path
through n). The loops are plain Python over CSR lists because each is a single O(V + E) pass; a
``alive`` mask restricts them to the graph left after removing clusters (PARDNN's Algorithm 1) and
``comm`` overrides edge costs (criticality zeroes the comm inside clusters).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement.problem import Problem


@dataclass
class Graph:
    """Python-list CSR views of a problem, built once and shared by the steps."""

    n: int
    time: list[float]
    topo: list[int]
    succ_ptr: list[int]
    succ: list[int]
    succ_edge: list[int]
    pred_ptr: list[int]
    pred: list[int]
    pred_edge: list[int]
    rank: np.ndarray  # topological rank of each node

    @classmethod
    def of(cls, problem: Problem) -> "Graph":
        sp, sn, se = problem.succ_ptr
        pp, pn, pe = problem.pred_ptr
        return cls(problem.n, problem.time.tolist(), problem.topo_order.tolist(), sp.tolist(), sn.tolist(),
                   se.tolist(), pp.tolist(), pn.tolist(), pe.tolist(), problem.topo_rank)


def top_levels(g: Graph, comm: np.ndarray, alive: np.ndarray | None = None) -> np.ndarray:
    """tl(n): the longest path (compute + comm) from a source of the live graph to n, n excluded."""
    tl = [0.0] * g.n
    c = comm.tolist()
    dur, ptr, nbr, eid = g.time, g.succ_ptr, g.succ, g.succ_edge
    live = None if alive is None else alive.tolist()
    for v in g.topo:
        if live is not None and not live[v]:
            continue
        fv = tl[v] + dur[v]
        for j in range(ptr[v], ptr[v + 1]):
            w = nbr[j]
            x = fv + c[eid[j]]
            if x > tl[w]:
                tl[w] = x
    return np.asarray(tl)


def bottom_levels(g: Graph, comm: np.ndarray, alive: np.ndarray | None = None) -> np.ndarray:
    """bl(n): the longest path (compute + comm) from n, included, to a sink of the live graph."""
    bl = [0.0] * g.n
    c = comm.tolist()
    dur, ptr, nbr, eid = g.time, g.succ_ptr, g.succ, g.succ_edge
    live = None if alive is None else alive.tolist()
    for v in reversed(g.topo):
        if live is not None and not live[v]:
            continue
        best = 0.0
        for j in range(ptr[v], ptr[v + 1]):
            w = nbr[j]
            if live is not None and not live[w]:
                continue
            x = c[eid[j]] + bl[w]
            if x > best:
                best = x
        bl[v] = best + dur[v]
    return np.asarray(bl)


def weighted_levels(g: Graph, comm: np.ndarray, alive: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tl, bl, tl + bl) on the live graph. Dead nodes get meaningless values."""
    tl = top_levels(g, comm, alive)
    bl = bottom_levels(g, comm, alive)
    return tl, bl, tl + bl


def tie_key(values: np.ndarray) -> np.ndarray:
    """``values`` rounded to 1e-9 of the largest magnitude, for sorting by level: sums along
    different paths of the same length differ in the last bits, and equal levels must compare
    equal so that the stated tie-break (topological rank) decides, not rounding noise."""
    if values.size == 0:
        return values
    finite = values[np.isfinite(values)]
    scale = float(np.abs(finite).max()) if finite.size else 0.0
    return np.round(values / scale, 9) if scale > 0 else values.copy()


def ccr(problem: Problem) -> float:
    """Communication-to-computation ratio: total edge comm over total node time."""
    total = float(problem.time.sum())
    return float(problem.comm.sum()) / total if total > 0 else (float("inf") if problem.comm.sum() > 0 else 0.0)
