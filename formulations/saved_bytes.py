"""Placement-only memory cuts of the peak model: the tensors a device must hold while a node x runs.

Let x have positive time and t in [S_x, F_x). Take a tensor u that is a strict ancestor of x and
a consumer w of u that is x or a descendant of x: then F_u <= S_x <= t and F_w >= F_x > t. The
device d of w holds u at t: if u is on d, its local buffer [S_u, max(F_u, last local finish))
contains [S_u, F_w); otherwise d's copy of u is [F_u, last finish on d) and contains [F_u, F_w).
So does x's own device hold x's output (its buffer starts at S_x). So, with ``holders(u)`` the
colocation units of such consumers w (and x's unit for x itself), at t every device d holds

    params of its units + sum of out_u over the u with a unit of holders(u) on d,

distinct tensors, within its capacity M_d. This is a placement-only constraint, valid whatever the
schedule. On a training graph with x the loss, holders(u) of a forward activation u is the unit of
its backward layer (colocated with u's forward layer, so u's own unit) and that of the next
layer's backward (which keeps u as its input): a chain split across devices holds each boundary
activation on both sides. Any set of units placed together (a run of the path bound,
formulations/pathbound.py) holds at least the same sum over its own units.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from placement.problem import Problem

from .units import units

CUT_NODES = 8  # the nodes x used: the ones with the most held bytes in all
MAX_NODES = 1000  # quadratic in the nodes: beyond this, no cuts (the bounds stay valid, only weaker)
SAMPLE_NODES = 4096  # spread_held looks at most this many nodes x (one bit each per node and edge)


@dataclass
class Held:
    """For one node x: the tensors u held while x runs, with their bytes and holder units."""

    x: int
    tensors: list[int]
    holders: list[tuple[int, ...]]  # per tensor, the units whose placement forces a copy there
    total: float  # sum of their bytes

    def device_load(self, dev_of_unit: np.ndarray, out: np.ndarray, k: int) -> np.ndarray:
        """Bytes of these tensors each device holds at x for a placement of the units."""
        load = np.zeros(k)
        for u, hs in zip(self.tensors, self.holders):
            for d in set(int(dev_of_unit[g]) for g in hs):
                load[d] += out[u]
        return load

    def by_unit(self) -> dict[int, list[int]]:
        """Unit -> indices (into ``tensors``) of the tensors it forces onto its device."""
        of: dict[int, list[int]] = {}
        for i, hs in enumerate(self.holders):
            for g in hs:
                of.setdefault(g, []).append(i)
        return of


def held_tensors(problem: Problem, count: int = CUT_NODES) -> list[Held]:
    """Up to ``count`` nodes x (positive time) with their held tensors, the largest total first."""
    if problem.n > MAX_NODES or count <= 0:
        return []
    found = held_sets(problem, [x for x in range(problem.n) if problem.time[x] > 0])
    found.sort(key=lambda h: (-h.total, h.x))
    return found[:count]


def spread_held(problem: Problem, term_budget: int, deadline: float | None = None) -> list[Held] | None:
    """Held tensors at nodes x (positive time) spread evenly along the topological order, as many
    as keep the (x, tensor, holder) terms within about ``term_budget``: every node x of a graph
    whose terms fit, else every s-th. Fewer nodes only drop necessary conditions, so whatever
    the check proves with them stays proved. Why: the terms grow with the square of the nodes (a
    1,393-node RNN holds 137K), and spreading keeps what top-by-total loses: on the imported
    RNN, the 128 largest x prove nothing at a capacity that every 4th x proves too small. None
    when ``deadline`` (time.monotonic()) passes first."""
    xs = [int(x) for x in problem.topo_order.tolist() if problem.time[x] > 0]
    if len(xs) > SAMPLE_NODES:
        xs = [xs[int(i)] for i in np.linspace(0, len(xs) - 1, SAMPLE_NODES).round().astype(np.int64)]
    anc, desc = _sample_masks(problem, xs)
    edges = [(int(u), int(w)) for u, w in zip(problem.src.tolist(), problem.dst.tolist()) if problem.out_bytes[u] > 0]
    terms = sum((anc[u] & desc[w]).bit_count() for u, w in edges) + len(xs)
    stride = max(1, -(-terms // max(term_budget, 1)))
    if stride > 1:
        xs = xs[::stride]
        anc, desc = _sample_masks(problem, xs)
    if deadline is not None and time.monotonic() > deadline:
        return None
    return held_sets(problem, xs, masks=(anc, desc), deadline=deadline)


def undominated(helds: list[Held]) -> list[Held]:
    """``helds`` without the ones a neighbour dominates, in the same order. Held set A dominates B
    when every tensor of B is in A with at least B's holder units: A's knapsack on any device
    counts at least B's bytes, so B's adds nothing. Only neighbours are compared (a stack, in
    the given order), which catches the chains of a training graph: its forward nodes hold ever
    more activations up to the loss, its backward nodes ever fewer after it."""
    kept: list[tuple[Held, dict[int, frozenset[int]]]] = []

    def covers(a: dict[int, frozenset[int]], b: dict[int, frozenset[int]]) -> bool:
        return len(a) >= len(b) and all(u in a and hs <= a[u] for u, hs in b.items())

    for h in helds:
        mine = {u: frozenset(hs) for u, hs in zip(h.tensors, h.holders)}
        if kept and covers(kept[-1][1], mine):
            continue
        while kept and covers(mine, kept[-1][1]):
            kept.pop()
        kept.append((h, mine))
    return [h for h, _ in kept]


def _sample_masks(problem: Problem, xs: list[int]) -> tuple[list[int], list[int]]:
    """Bit c of ``anc[v]``: v is a strict ancestor of xs[c]; of ``desc[v]``: v is xs[c] or one of
    its descendants. One bit per sampled x, so the work is (nodes + edges) x samples / 64."""
    n = problem.n
    bit = [0] * n
    for c, x in enumerate(xs):
        bit[x] |= 1 << c
    order = problem.topo_order.tolist()
    ptr, nbr, _ = problem.pred_ptr
    desc = [0] * n
    for v in order:
        bits = bit[v]
        for u in nbr[ptr[v]:ptr[v + 1]].tolist():
            bits |= desc[u]
        desc[v] = bits
    sptr, snbr, _ = problem.succ_ptr
    anc = [0] * n
    for v in reversed(order):
        bits = 0
        for w in snbr[sptr[v]:sptr[v + 1]].tolist():
            bits |= anc[w] | bit[w]
        anc[v] = bits
    return anc, desc


def held_sets(problem: Problem, xs: list[int], masks: tuple[list[int], list[int]] | None = None,
              deadline: float | None = None) -> list[Held] | None:
    """The held tensors at each node of ``xs`` (module docstring), in the order of ``xs``; tensors
    in index order, x's own output last. A tensor u is held at x when u is a strict ancestor of
    x and one of its consumers is x or a descendant of x. None when ``deadline`` passes first."""
    anc, desc = masks if masks is not None else _sample_masks(problem, xs)
    un = units(problem)
    sptr, snbr, _ = problem.succ_ptr
    held: list[dict[int, set[int]]] = [{} for _ in xs]
    for u in range(problem.n):
        if problem.out_bytes[u] <= 0 or not anc[u]:
            continue
        if deadline is not None and u % 256 == 0 and time.monotonic() > deadline:
            return None
        au = anc[u]
        for w in snbr[sptr[u]:sptr[u + 1]].tolist():
            b = au & desc[w]
            g = int(un.of[w])
            while b:
                low = b & -b
                held[low.bit_length() - 1].setdefault(u, set()).add(g)
                b ^= low
    found: list[Held] = []
    for c, x in enumerate(xs):
        tensors = list(held[c])
        holders = [tuple(sorted(held[c][u])) for u in tensors]
        if problem.out_bytes[x] > 0:  # x's own output: its buffer starts at S_x
            tensors.append(x)
            holders.append((int(un.of[x]),))
        if tensors:
            found.append(Held(x, tensors, holders, float(problem.out_bytes[tensors].sum())))
    return found
