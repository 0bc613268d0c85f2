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

from typing import Callable

import numpy as np

from .problem import Problem

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
