"""Step 1, stage II: LFLAM mapping (PARDNN Algorithm 2) of secondary clusters onto primaries.

1. Levels (Algorithm 2, line 1): weighted levels recomputed after slicing with the comm inside
   every cluster set to zero, since that comm will be local. They serve twice: a cluster's
   *criticality* is the largest such level among its nodes, and the top levels place work on the
   timeline for the span sums below. Secondaries are visited in non-increasing criticality (ties:
   topologically earlier first node; levels compared to 1e-9 relative, graph.tie_key).
2. Locality-first lookahead mapping, repeated while it maps something and at most ceil(log2 |V|)
   rounds. Candidates are *totally-communicating* clusters (every edge leaving the cluster goes to
   one and the same primary) and, when CCR >= 10, also *maximally-communicating* ones (comm with
   one primary > the cluster's total external comm / K). A candidate joins its most-communicating
   primary p when one of the three conditions holds, with W = per-primary work whose top level
   lies in span(sc), w = the cluster's work and U = the still-unmapped work in the span besides sc:
   (a) U covers the imbalance the mapping causes: the work needed to bring every other primary up
       to p's new load, sum_{q != p} max(0, W[p] + w - W[q]) <= U;
   (b) the mapping causes no imbalance: W[p] + w <= max_q W[q];
   (c) comm(sc, p) exceeds w, W[p] and U.
   Which clusters are candidates is decided on a snapshot taken at the start of each round.
3. Level-aware load balancing of the rest, in the same order, by Eq. (1): the primary minimising
   W[pe] + (comm of sc with mapped nodes outside pe); ties to the primary it communicates most with.

span(sc) runs from the expected finish (tl + time) of the first node's last parent (the paper's
"last parent"; span_start="earliest" takes the earliest-finishing parent instead, as the authors'
code does) to the earliest top level of the last node's children (the critical-path length when
there are none), and always covers the cluster's own levels. Neither reading wins everywhere
(bench/results_pardnn_ref.md); the pipeline can run both and keep the faster (pipeline.map_clusters).
"Work in the span" counts the nodes whose top level falls inside it, summed with binary indexed
trees over the distinct top levels (bit.py).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from placement.problem import Problem
from placement.solution import halt_if

from .bit import LevelBIT
from .graph import Graph, tie_key, weighted_levels
from .slicing import Slicing

CCR_THRESHOLD = 10.0


@dataclass
class Mapping:
    """``pe[v]``: the primary cluster (0..K-1) node v was merged into."""

    pe: np.ndarray
    cluster_pe: np.ndarray
    lookahead_mapped: int = 0
    rounds: int = 0
    balanced: int = 0
    info: dict = field(default_factory=dict)


def clustered_levels(g: Graph, sl: Slicing, comm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tl, tl + bl) with the comm of every edge inside a cluster set to zero."""
    cl = sl.cluster
    ptr = np.asarray(g.succ_ptr)
    src = np.repeat(np.arange(g.n), np.diff(ptr))
    dst = np.asarray(g.succ, dtype=np.int64)
    eid = np.asarray(g.succ_edge, dtype=np.int64)
    zeroed = comm.copy()
    zeroed[eid[cl[src] == cl[dst]]] = 0.0
    tl, _, wl = weighted_levels(g, zeroed)
    return tl, wl


def criticality(g: Graph, sl: Slicing, comm: np.ndarray, wl: np.ndarray | None = None) -> np.ndarray:
    """Per cluster, the largest weighted level of its nodes with intra-cluster comm set to zero
    (``wl``: those levels, if already computed), as a tie_key."""
    if wl is None:
        wl = clustered_levels(g, sl, comm)[1]
    crit = np.full(len(sl.paths), -np.inf)
    np.maximum.at(crit, sl.cluster, wl)
    return tie_key(crit)


SPAN_STARTS = ("latest", "earliest")


def spans(problem: Problem, sl: Slicing, tl: np.ndarray, horizon: float,
          start_at: str = "latest") -> tuple[np.ndarray, np.ndarray]:
    """Per cluster, (start, end) of span(sc) in time units: from the latest (``start_at``
    "latest", the paper's "last parent") or the earliest ("earliest", the authors' code) finish
    among the first node's parents (0, or with "earliest" the first node's own top level, if it
    has none) to the earliest top level of the last node's children (``horizon`` if none)."""
    if start_at not in SPAN_STARTS:
        raise ValueError(f"span start must be one of {SPAN_STARTS}, got {start_at!r}")
    ncl = len(sl.paths)
    first = np.array([p[0] for p in sl.paths], dtype=np.int64)
    last = np.array([p[-1] for p in sl.paths], dtype=np.int64)
    is_first = np.full(problem.n, -1, dtype=np.int64)
    is_first[first] = np.arange(ncl)
    is_last = np.full(problem.n, -1, dtype=np.int64)
    is_last[last] = np.arange(ncl)
    c = is_first[problem.dst]
    sel = c >= 0
    finish = tl[problem.src[sel]] + problem.time[problem.src[sel]]
    if start_at == "earliest":
        start = tl[first].astype(float)
        np.minimum.at(start, c[sel], finish)
    else:
        start = np.zeros(ncl)
        np.maximum.at(start, c[sel], finish)
    end = np.full(ncl, horizon)
    c = is_last[problem.src]
    sel = c >= 0
    np.minimum.at(end, c[sel], tl[problem.dst[sel]])
    return start, end


def _external_edges(problem: Problem, cl: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CSR by cluster of edges leaving/entering it: (ptr, owner cluster, other node, comm)."""
    cut = cl[problem.src] != cl[problem.dst]
    s, d, w = problem.src[cut], problem.dst[cut], problem.comm[cut]
    owner = np.concatenate([cl[s], cl[d]])
    other = np.concatenate([d, s])
    ww = np.concatenate([w, w])
    order = np.argsort(owner, kind="stable")
    owner, other, ww = owner[order], other[order], ww[order]
    ptr = np.zeros(int(cl.max()) + 2, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=ptr.size - 1), out=ptr[1:])
    return ptr, owner, other, ww


def lflam(problem: Problem, g: Graph, sl: Slicing, tl: np.ndarray | None, comm: np.ndarray, k: int,
          pe_allowed: np.ndarray | None = None, ccr_value: float | None = None,
          max_rounds: int | None = None, span_start: str = "latest",
          clustered: tuple[np.ndarray, np.ndarray] | None = None, stop: Callable[[], bool] | None = None) -> Mapping:
    """Algorithm 2. ``tl``: the top levels that place work on the timeline; None (what the
    pipeline passes) for the clustered levels of step 1, an array to impose others.
    ``clustered``: clustered_levels(g, sl, comm) if already computed. ``pe_allowed`` (clusters x K) forbids
    primaries (devices) for a cluster; by default all are allowed. ``span_start``: see spans().
    ``stop`` (a stop request's ``is_set``) abandons the mapping (OutOfTime). Returns the primary
    of every node."""
    tl_clustered, wl_clustered = clustered if clustered is not None else clustered_levels(g, sl, comm)
    if tl is None:
        tl = tl_clustered
    n = problem.n
    ncl = len(sl.paths)
    cl = sl.cluster
    time = problem.time
    pe = np.full(n, -1, dtype=np.int64)
    cluster_pe = np.full(ncl, -1, dtype=np.int64)
    for p in range(sl.primaries):
        pe[sl.paths[p]] = p
        cluster_pe[p] = p
    if pe_allowed is None:
        pe_allowed = np.ones((ncl, k), dtype=bool)
    if ccr_value is None:
        total = float(time.sum())
        ccr_value = float(comm.sum()) / total if total > 0 else math.inf
    horizon = float((tl + time).max()) if n else 0.0
    levels = np.unique(tl)
    slot = np.searchsorted(levels, tl)
    L = levels.size
    s0, e0 = spans(problem, sl, tl, horizon, span_start)
    lo = np.searchsorted(levels, s0, side="left")
    hi = np.searchsorted(levels, e0, side="left")
    cmin = np.full(ncl, L, dtype=np.int64)
    cmax = np.full(ncl, -1, dtype=np.int64)
    np.minimum.at(cmin, cl, slot)
    np.maximum.at(cmax, cl, slot)
    lo = np.minimum(lo, cmin)
    hi = np.maximum(hi, cmax + 1)
    work_c = np.bincount(cl, weights=time, minlength=ncl)

    # columns 0..K-1: work merged into each primary; column K: work still unmapped
    work = LevelBIT(L, k + 1)
    work.add(slot, time, k)
    for p in range(sl.primaries):
        nodes = sl.paths[p]
        work.move(slot[nodes], time[nodes], k, p)

    def merge(c: int, p: int) -> None:
        nodes = sl.paths[c]
        pe[nodes] = p
        cluster_pe[c] = p
        work.move(slot[nodes], time[nodes], k, p)

    crit = criticality(g, sl, comm, wl_clustered)
    sec = np.arange(sl.primaries, ncl)
    first = np.array([sl.paths[c][0] for c in sec], dtype=np.int64)
    order = sec[np.lexsort((g.rank[first] if sec.size else first, -crit[sec]))]
    position = np.empty(ncl, dtype=np.int64)
    position[order] = np.arange(order.size)

    cut = cl[problem.src] != cl[problem.dst]
    es, ed, ew = problem.src[cut], problem.dst[cut], comm[cut]
    rounds = max_rounds if max_rounds is not None else max(1, math.ceil(math.log2(max(n, 2))))
    done_rounds = 0
    mapped_total = 0
    admitted = {"a": 0, "b": 0, "c": 0}  # which condition (first true of a, b, c) admitted a merge
    for _ in range(rounds):
        done_rounds += 1
        owner = np.concatenate([cl[es], cl[ed]])
        target = np.concatenate([pe[ed], pe[es]])
        wts = np.concatenate([ew, ew])
        keep = cluster_pe[owner] < 0
        owner, target, wts = owner[keep], target[keep], wts[keep]
        target = np.where(target < 0, k, target)
        flat = owner * (k + 1) + target
        comm_to = np.bincount(flat, weights=wts, minlength=ncl * (k + 1)).reshape(ncl, k + 1)
        cnt_to = np.bincount(flat, minlength=ncl * (k + 1)).reshape(ncl, k + 1)
        to_pe = comm_to[:, :k]
        best = np.argmax(to_pe, axis=1)
        nz = (cnt_to[:, :k] > 0).sum(axis=1)
        totally = (cnt_to[:, k] == 0) & (nz == 1)
        best = np.where(totally, np.argmax(cnt_to[:, :k], axis=1), best)
        cand = totally.copy()
        if ccr_value >= CCR_THRESHOLD:
            maximally = to_pe[np.arange(ncl), best] > comm_to.sum(axis=1) / k
            cand |= maximally
        cand &= cluster_pe < 0
        cand &= pe_allowed[np.arange(ncl), best]
        cands = np.flatnonzero(cand)
        cands = cands[np.argsort(position[cands], kind="stable")]
        mapped = 0
        for i, c in enumerate(cands.tolist()):
            if i % 4096 == 0:
                halt_if(stop)
            p = int(best[c])
            w = work_c[c]
            WU = work.range(int(lo[c]), int(hi[c]))
            W = WU[:k]
            U = float(WU[k]) - w
            after = W[p] + w
            deficit = float(np.maximum(after - W, 0.0).sum()) - max(after - W[p], 0.0)
            cond_a = U >= deficit
            cond_b = after <= float(W.max())
            cpc = to_pe[c, p]
            cond_c = cpc > w and cpc > W[p] and cpc > U
            if cond_a or cond_b or cond_c:
                merge(c, p)
                mapped += 1
                admitted["a" if cond_a else "b" if cond_b else "c"] += 1
        mapped_total += mapped
        if mapped == 0:
            break

    ptr, _, other, ww = _external_edges(problem, cl)
    ptr_l, other_l, ww_l = ptr.tolist(), other.tolist(), ww.tolist()
    pe_l = pe.tolist()  # mirror of pe for the per-edge Python loop below
    free = pe_allowed.all(axis=1)
    balanced = 0
    for i, c in enumerate(order.tolist()):
        if i % 4096 == 0:
            halt_if(stop)
        if cluster_pe[c] >= 0:
            continue
        W = work.range(int(lo[c]), int(hi[c]))[:k]
        cv = np.zeros(k)
        for j in range(ptr_l[c], ptr_l[c + 1]):
            t = pe_l[other_l[j]]
            if t >= 0:
                cv[t] += ww_l[j]
        cost = W + (cv.sum() - cv)
        if not free[c] and pe_allowed[c].any():
            cost = np.where(pe_allowed[c], cost, np.inf)
        p = int(np.argmin(cost))
        if np.count_nonzero(cost == cost[p]) > 1:  # ties: the primary it communicates most with
            ties = np.flatnonzero(cost == cost[p])
            p = int(ties[np.argmax(cv[ties])])
        merge(c, p)
        for v in sl.paths[c].tolist():
            pe_l[v] = p
        balanced += 1
    return Mapping(pe, cluster_pe, mapped_total, done_rounds, balanced, {"admitted_by": admitted})
