"""A lower bound from a pivot: a node every other node precedes or follows (the loss of a training
step) splits every schedule into a before and an after that cannot overlap (issue 16).

Why: on a training graph the forward pass ends before the loss starts and the backward pass
starts after it ends. Each part has its own bottleneck: on the unrolled 10K LSTM the forward part
is held up by the embedding's weight (its lookups run on the weight's device one at a time or
13 ms later elsewhere) and the backward part by the output layer's running gradient sum
(its Jackson schedule in the forced bound). A bound on the whole graph follows one path and so sees one of them; bounding
each part on its own and adding them sees both.

The argument (docs/scale.md). Let x be a pivot, A its ancestors, D its descendants (every other
node is in one of them). In any schedule every node of A finishes before x starts and every node
of D starts after x finishes. The schedule restricted to A is a schedule of the sub-problem
induced by A (the same devices and capacities, the edges inside A, colocation and allowed devices
kept), so S_x >= B(A) for any valid makespan bound B of that sub-problem; the schedule restricted
to D, shifted by F_x, is one of the sub-problem induced by D, so makespan - F_x >= B(D). Hence
makespan >= B(A) + t_x + B(D). Memory: in either model a device holds, at every moment, no more of
a part's tensors and params in the part's schedule than in the whole one (static: a sum over fewer
nodes; peak: the part's own consumers are all kept, so each tensor is held over the same or a
shorter interval, and tensors from outside the part are gone), so the restricted schedules fit
the same capacities.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from .problem import Problem, ProblemError

def pivot_mask(problem: Problem) -> np.ndarray:
    """Per position of ``problem.topo_order``: is the node there a pivot (comparable with every
    other node)? In O(n + m).

    In any topological order the nodes before a pivot x are exactly its ancestors and those after
    it its descendants. Conversely, x at position i is a pivot when every node before i has a
    consumer at a position <= i (follow consumers within the prefix: positions rise and can only
    stop at x) and every node after i has an input at a position >= i."""
    n = problem.n
    pos = problem.topo_rank
    ps, pd = pos[problem.src], pos[problem.dst]
    first_use = np.full(n, n, dtype=np.int64)  # position of the earliest consumer (n: none)
    np.minimum.at(first_use, problem.src, pd)
    last_in = np.full(n, -1, dtype=np.int64)  # position of the latest input (-1: none)
    np.maximum.at(last_in, problem.dst, ps)
    by_pos_first = first_use[problem.topo_order]
    by_pos_last_in = last_in[problem.topo_order]
    # prefix ok at i: max over positions < i of first_use <= i; suffix ok: min over > i of last_in >= i
    before = np.r_[-1, np.maximum.accumulate(by_pos_first)[:-1]]
    after = np.r_[np.minimum.accumulate(by_pos_last_in[::-1])[::-1][1:], n]
    idx = np.arange(n)
    return (before <= idx) & (after >= idx)


LOOSE_SHARE = 0.3  # at most this share of the nodes may be ordered against the chosen pivot


def nearest_pivot(problem: Problem) -> tuple[int, np.ndarray, np.ndarray] | None:
    """The node closest to a pivot: the one with the fewest others incomparable with it, in
    O(n + m), with those to order before it and those to order after it (index arrays); None for
    a graph with no node that both reads and feeds another.

    A real training step's loss is not a pivot: Adam's ``exp_avg_sq.mul_`` reads its state only,
    a saved-output holder or an unused output has no path to the loss (bench/results_import.md,
    session 17). By pivot_mask's test, a node j at position p_j breaks every position in
    (p_j, its first consumer) and every one in (its latest input, p_j); each such loose node breaks
    the loss's position once, wherever the topological order put it."""
    n = problem.n
    if n == 0:
        return None
    pos = problem.topo_rank
    first_use = np.full(n, n, dtype=np.int64)
    np.minimum.at(first_use, problem.src, pos[problem.dst])
    last_in = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last_in, problem.dst, pos[problem.src])
    broken = np.zeros(n + 1, dtype=np.int64)
    lo, hi = pos + 1, first_use  # positions pos+1 .. first_use-1
    keep = lo < hi
    np.add.at(broken, lo[keep], 1)
    np.add.at(broken, hi[keep], -1)
    lo, hi = last_in + 1, pos  # positions last_in+1 .. pos-1
    keep = lo < hi
    np.add.at(broken, lo[keep], 1)
    np.add.at(broken, hi[keep], -1)
    count = np.cumsum(broken)[:n]
    # Among the positions close enough to a pivot, the one with the most bytes live (made at or
    # before it, read at or after it): the loss of a training step, not the last optimizer write,
    # which every other update's sink also "misses".
    last_use = pos.copy()
    np.maximum.at(last_use, problem.src, pos[problem.dst])
    live = np.zeros(n + 1)
    np.add.at(live, pos, problem.out_bytes)
    np.add.at(live, last_use + 1, -problem.out_bytes)
    live = np.cumsum(live)[:n]
    # a loss reads something and feeds something: sources and sinks are no candidates
    inner = np.zeros(n, dtype=bool)
    inner[pos[(first_use < n) & (last_in >= 0)]] = True
    if not inner.any():
        return None
    count = np.where(inner, count, n + 1)
    close = inner & (count <= max(int(count.min()), int(LOOSE_SHARE * n)))
    at = int(np.lexsort((count, -np.where(close, live, -np.inf)))[0])
    x = int(problem.topo_order[at])
    loose = ((pos < at) & (first_use > at)) | ((pos > at) & (last_in < at))
    # A loose node may go either side (its inputs precede x's position, its consumers follow it).
    # One that allocates is made before x, as a real step makes a saved tensor or an unused output
    # in its forward pass; one that allocates nothing (an in-place optimizer write) after it.
    makes = problem.out_bytes > 0
    return x, np.flatnonzero(loose & makes), np.flatnonzero(loose & ~makes)


def with_pivot(problem: Problem, share: float = LOOSE_SHARE) -> tuple[Problem, int] | None:
    """``problem`` with ordering edges (no bytes, no transfer time) that make its nearest pivot
    a pivot, and that node; None when it already has a pivot or more than ``share`` of the nodes
    would need one (no loss-like node). The edges only constrain: a schedule of the result is one
    of ``problem`` with the same or a smaller makespan and memory, so a method that needs a pivot
    can search the result and have its answer re-evaluated on ``problem``."""
    if pivot_mask(problem).any() or not _connected(problem):
        return None
    near = nearest_pivot(problem)
    if near is None:
        return None
    x, before, after = near
    loose = before.size + after.size
    if loose == 0 or loose > share * problem.n:
        return None
    new = _with_order_edges(problem, x, before, after)
    try:
        new.topo_order
    except ProblemError:  # an allocating node after a non-allocating one: order them as the graph does
        pos = problem.topo_rank
        both = np.r_[before, after]
        new = _with_order_edges(problem, x, both[pos[both] < pos[x]], both[pos[both] > pos[x]])
    return new, x


def _with_order_edges(problem: Problem, x: int, before: np.ndarray, after: np.ndarray) -> Problem:
    """``problem`` with ordering edges (no bytes, no time) ``before -> x`` and ``x -> after``."""
    src = np.r_[problem.src, before, np.full(after.size, x)].astype(problem.src.dtype)
    dst = np.r_[problem.dst, np.full(before.size, x), after].astype(problem.dst.dtype)
    added = before.size + after.size
    zeros = np.zeros(added)
    return replace(problem, src=src, dst=dst, comm=np.r_[problem.comm, zeros],
                   edge_bytes=None if problem.edge_bytes is None else np.r_[problem.edge_bytes, zeros],
                   edge_meta=None if problem.edge_meta is None else list(problem.edge_meta) + [{} for _ in range(added)])


def _connected(problem: Problem) -> bool:
    """Is the graph one weakly connected piece (one step, not independent jobs side by side)?"""
    parent = np.arange(problem.n)

    def root(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = int(parent[v])
        return v

    pieces = problem.n
    for a, b in zip(problem.src.tolist(), problem.dst.tolist()):
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[ra] = rb
            pieces -= 1
    return pieces <= 1


def induced(problem: Problem, keep: np.ndarray) -> Problem:
    """The sub-problem of the nodes where ``keep`` is True: their edges, colocation groups
    (restricted to them) and allowed devices, the same devices and capacities."""
    nodes = np.flatnonzero(keep)
    new = np.full(problem.n, -1, dtype=np.int64)
    new[nodes] = np.arange(nodes.size)
    e = np.flatnonzero(keep[problem.src] & keep[problem.dst])
    col = problem.colocate[nodes]
    used = np.unique(col[col >= 0])
    remap = np.full(max(len(problem.colocate_names), 1), -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    ids = [problem.ids[v] for v in nodes.tolist()]
    return Problem(
        name=f"{problem.name} (part)", ids=ids, names=[problem.names[v] for v in nodes.tolist()],
        time=problem.time[nodes], out_bytes=problem.out_bytes[nodes], param_bytes=problem.param_bytes[nodes],
        colocate=np.where(col >= 0, remap[np.maximum(col, 0)], -1), allowed=[problem.allowed[v] for v in nodes.tolist()],
        src=new[problem.src[e]], dst=new[problem.dst[e]], comm=problem.comm[e], memory=problem.memory,
        device_names=problem.device_names, link=problem.link,
        edge_bytes=None if problem.edge_bytes is None else problem.edge_bytes[e],
        colocate_names=[problem.colocate_names[g] for g in used.tolist()])


def pivot_bound(problem: Problem, part_bound: Callable[[Problem, np.ndarray, bool], float], head: np.ndarray,
                tail: np.ndarray) -> float:
    """B(ancestors) + t_x + B(descendants) for one pivot x (module docstring), B(part) =
    ``part_bound(sub-problem, its nodes' indices here, whether it is the part before x)``, a valid
    makespan bound of the sub-problem (in the memory model whose capacities the parts keep). The pivot
    is the one where a cheap estimate of that sum is largest: on each side the larger of its
    load / K and its longest communication-bound path (``head``/``tail``, the communication
    bound's, are the same in a part as in the whole graph: a node's ancestors are all before the
    pivot, its descendants all after). 0 when no pivot has nodes on both sides."""
    n = problem.n
    if n < 3:
        return 0.0
    order = problem.topo_order
    ok = np.flatnonzero(pivot_mask(problem))
    ok = ok[(ok > 0) & (ok < n - 1)]  # nodes on both sides
    if ok.size == 0:
        return 0.0
    t = problem.time[order]
    first = np.maximum.accumulate((head[order] + t))  # over positions <= i
    last = np.maximum.accumulate((t + tail[order])[::-1])[::-1]  # over positions >= i
    load = np.r_[0.0, np.cumsum(t)]  # load[i]: positions < i
    k = problem.k
    est = (np.maximum(first[ok - 1], load[ok] / k) + t[ok]
           + np.maximum(last[ok + 1], (load[n] - load[ok + 1]) / k))
    i = int(ok[int(np.argmax(est))])
    before = np.zeros(n, dtype=bool)
    before[order[:i]] = True
    after = np.zeros(n, dtype=bool)
    after[order[i + 1:]] = True
    return (part_bound(induced(problem, before), np.flatnonzero(before), True) + float(t[i])
            + part_bound(induced(problem, after), np.flatnonzero(after), False))
