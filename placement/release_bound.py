"""A lower bound from work that cannot start early: the consumers of a node whose output is slow to
move (a weight) run on its device one at a time or start a whole transfer late, and whatever
needs many of them waits too (issue 16, the unrolled LSTM's forward pass).

Why: the generated LSTM's embedding weight (131 MB, 13 ms over the link) feeds one lookup per
time step. Before 13 ms only the weight's own device can run lookups, one at a time: at most 52 of
the 94. Every cell of a later time step needs all the earlier lookups (through the recurrence), so
none of them can run before 13 ms either, whatever the placement. The load bound counts their
work as if it could run from time 0, the communication bound follows one path at a time.

The argument (docs/scale.md). Fix a time theta and a schedule. For a node w (a "source") with
head h_w, every consumer u of w starts no earlier than a_u = h_w + t_w + comm(w, u) unless it sits
on w's device. Let V be the consumers with t_u > 0 and a_u + t_u > theta: one that finishes by
theta is on w's device, where such consumers run one at a time after F_w >= h_w + t_w; so at most
m of them finish by theta, m the largest count of their smallest times that fits in
theta - h_w - t_w. A node with more than m members of V among its strict ancestors then starts
after theta (one of them finishes after it). So the work after theta is at least
- the whole time of those late nodes;
- for the other members of V, their time less what can run before theta: theta - h_w - t_w on
  w's device, theta - a_u each elsewhere (counted for one source only; or each member's time
  less theta - its head, when that is more);
- for every other node, its time less theta - head (it starts no earlier than its head; this
  term alone, at every theta, is the energy bound of placement/energy_bound.py);
and when W_after > 0 (some node cannot finish by theta; with none the schedule may end before
theta) the K devices need W_after / K more after theta: makespan >= theta + W_after / K. The bound
takes the best theta over a few candidates (just at the transfers' arrivals) and a few sources
(the nodes whose slow consumers carry the most work).

It needs no memory data and no placement: valid in the static and the peak model, with
colocation and allowed devices (they only remove placements). O((n + m) x sources) big-integer
work per candidate theta.
"""
from __future__ import annotations

import numpy as np

from .problem import Problem

SOURCES = 2  # sources tried at once (those whose consumers carry the most time behind a transfer)
THETAS = 4  # candidate times tried


def _late_counts(problem: Problem, members: list[np.ndarray]) -> list[np.ndarray]:
    """Per member set, per node: how many of the set are its strict ancestors (bitsets along the
    topological order)."""
    ptr, nbr, _ = problem.pred_ptr
    ptr_l, nbr_l = ptr.tolist(), nbr.tolist()
    out = []
    for mem in members:
        own = [0] * problem.n
        for i, u in enumerate(mem.tolist()):
            own[u] = 1 << i
        bits = [0] * problem.n
        for v in problem.topo_order.tolist():
            acc = 0
            for j in range(ptr_l[v], ptr_l[v + 1]):
                p = nbr_l[j]
                acc |= bits[p] | own[p]
            bits[v] = acc
        out.append(np.fromiter((b.bit_count() for b in bits), dtype=np.int64, count=problem.n))
    return out


def _sources(problem: Problem, head: np.ndarray) -> list[int]:
    """Up to SOURCES nodes with the most consumer time behind a transfer longer than the consumer."""
    t = problem.time
    slow = (problem.comm > t[problem.dst]) & (t[problem.dst] > 0)
    score = np.bincount(problem.src[slow], weights=t[problem.dst[slow]], minlength=problem.n)
    deg = np.bincount(problem.src[slow], minlength=problem.n)
    cand = np.flatnonzero(deg >= 2)
    cand = cand[np.argsort(-score[cand], kind="stable")][:SOURCES]
    return cand.tolist()


def release_bound(problem: Problem, head: np.ndarray) -> float:
    """The bound of the module docstring, with ``head`` the communication bound's heads (valid
    lower bounds on every node's start). 0 when no node has two slow consumers."""
    if problem.n == 0:
        return 0.0
    t = problem.time
    k = problem.k
    sources = _sources(problem, head)
    if not sources:
        return 0.0
    # per source: its consumers by edge, their arrival off the source's device
    cons = []
    for w in sources:
        e = np.flatnonzero((problem.src == w) & (t[problem.dst] > 0))
        u = problem.dst[e]
        arrive = head[w] + t[w] + problem.comm[e]
        cons.append((u, arrive))
    thetas = np.unique(np.concatenate([a for _, a in cons]))
    thetas = thetas[thetas > 0]
    if thetas.size > THETAS:
        thetas = thetas[np.linspace(0, thetas.size - 1, THETAS).round().astype(np.int64)]
    best = 0.0
    for theta in thetas.tolist():
        members, caps = [], []
        for w, (u, arrive) in zip(sources, cons):
            keep = arrive + t[u] > theta
            mem = np.unique(u[keep])  # parallel edges: the largest comm was kept, one tensor
            base = float(head[w] + t[w])
            room = theta - base
            fits = np.cumsum(np.sort(t[mem])) <= room * (1 + 1e-12) + 1e-12
            members.append(mem)
            caps.append(int(fits.sum()))
        counts = _late_counts(problem, members)
        late = np.zeros(problem.n, dtype=bool)
        for cnt, m in zip(counts, caps):
            late |= cnt > m
        after = np.where(late, t, np.maximum(0.0, t - np.maximum(0.0, theta - head)))
        claimed = late.copy()
        for w, (u, arrive), mem in zip(sources, cons, members):
            mine = mem[~claimed[mem]]
            if mine.size == 0:
                continue
            claimed[mine] = True
            first = {}
            for v, a in zip(u.tolist(), arrive.tolist()):  # the earliest arrival of each member
                first[v] = min(a, first.get(v, a))
            away = sum(max(0.0, theta - first[v]) for v in mine.tolist())
            early = max(0.0, theta - float(head[w] + t[w])) + away
            each = float(after[mine].sum())  # each member alone: its time less theta - head
            after[mine] = 0.0
            after[mine[0]] = max(each, float(t[mine].sum()) - early)
        left = float(after.sum())
        if left > 0:  # some work must run after theta (with none, the schedule may end before it)
            best = max(best, theta + left / k)
    return best
