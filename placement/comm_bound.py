"""A communication-aware lower bound on the makespan: at a join, inputs pay their transfer or share
the consumer's device and run one after another.

Why: the critical path ignores communication, so on graphs where the transfers matter its gap
stays large however good the placement (issue 16). Every placement must, at every node v, either
put an input u on v's device (then the inputs there run one at a time on that device before v
starts) or pay the transfer of u -> v. The bound takes, per node, the cheapest of those choices,
and propagates it through the graph; docs/scale.md gives the proof.

Heads: ``head[v]`` <= S_v in every schedule:
    head[v] = min over subsets L of the inputs of v (those on v's device) of
              max( max_{u not in L} head[u] + t_u + c_uv,  serial(L) ),
    serial(L) = max over u in L of ( head[u] + sum of t_w over w in L with head[w] >= head[u] ),
the single-machine bound with release dates (the members of L run on one device, none before its
head). The minimum is reached at a prefix of the inputs sorted by remote arrival (largest first),
so it costs O(d^2) for in-degree d; above MAX_DEGREE inputs the node takes the plain
critical-path value max head[u] + t_u, which is never larger (so still valid).
Tails mirror it on the reversed graph (``tail[v]`` <= makespan - F_v; co-located outputs run
one after another after F_v, each followed by its own tail). The bound is max_v head[v] + t_v +
tail[v]: head and tail hold for the same schedule. It needs no memory data and no placement, so
it holds for the static and the peak model, colocation and allowed devices alike (they only
remove placements).

Linear in the graph apart from the joins; a Python loop: about 2 s per 100K nodes + edges.
"""
from __future__ import annotations

import numpy as np

from .problem import Problem

MAX_DEGREE = 200  # joins with more inputs take the critical-path value (O(d^2) otherwise)


def _serial(members: list[tuple[float, float]]) -> float:
    """Single-machine bound: max over members u of r_u + the times of the members released at or
    after r_u (``members`` are (release, time) pairs)."""
    best, total = 0.0, 0.0
    for r, t in sorted(members, reverse=True):
        total += t
        if r + total > best:
            best = r + total
    return best


def _join(arrive: list[float], release: list[float], dur: list[float]) -> float:
    """min over prefixes L of the inputs sorted by ``arrive`` (largest first) of
    max(the largest arrival outside L, the single-machine bound of L)."""
    order = sorted(range(len(arrive)), key=lambda i: -arrive[i])
    best = arrive[order[0]]  # L empty: every input is remote
    members: list[tuple[float, float]] = []
    for j, i in enumerate(order):
        members.append((release[i], dur[i]))
        outside = arrive[order[j + 1]] if j + 1 < len(order) else 0.0
        cand = max(outside, _serial(members))
        if cand < best:
            best = cand
    return best


def heads(problem: Problem, reverse: bool = False) -> np.ndarray:
    """``head[v]`` (or with ``reverse`` the tail: a lower bound on makespan - F_v) for every node."""
    n = problem.n
    ptr, nbr, eid = problem.succ_ptr if reverse else problem.pred_ptr
    order = problem.topo_order.tolist()
    if reverse:
        order.reverse()
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    comm_l = problem.comm[eid].tolist()
    dur = problem.time.tolist()
    head = [0.0] * n
    for v in order:
        lo, hi = ptr_l[v], ptr_l[v + 1]
        if lo == hi:
            continue
        us = nbr_l[lo:hi]
        base = [head[u] + dur[u] for u in us]
        if hi - lo == 1:  # one input: co-located costs no more than remote
            head[v] = base[0]
            continue
        if hi - lo > MAX_DEGREE:
            head[v] = max(base)
            continue
        arrive = [b + c for b, c in zip(base, comm_l[lo:hi])]
        head[v] = _join(arrive, [head[u] for u in us], [dur[u] for u in us])
    return np.asarray(head)


def comm_bound(problem: Problem) -> float:
    """max over v of head[v] + t_v + tail[v]: a lower bound on every schedule's makespan."""
    if problem.n == 0:
        return 0.0
    h = heads(problem)
    q = heads(problem, reverse=True)
    return float((h + problem.time + q).max())
