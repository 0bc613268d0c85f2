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

from dataclasses import dataclass

import numpy as np

from placement.problem import Problem

from .units import units

CUT_NODES = 8  # the nodes x used: the ones with the most held bytes in all
MAX_NODES = 1000  # quadratic in the nodes: beyond this, no cuts (the bounds stay valid, only weaker)


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
    n = problem.n
    if n > MAX_NODES or count <= 0:
        return []
    un = units(problem)
    ptr, nbr, _ = problem.pred_ptr
    anc = [0] * n  # bitset of strict ancestors
    for v in problem.topo_order.tolist():
        bits = 0
        for u in nbr[ptr[v]:ptr[v + 1]].tolist():
            bits |= anc[u] | (1 << u)
        anc[v] = bits
    sptr, snbr, _ = problem.succ_ptr
    desc = [0] * n  # bitset of the node and its descendants
    for v in reversed(problem.topo_order.tolist()):
        bits = 1 << v
        for w in snbr[sptr[v]:sptr[v + 1]].tolist():
            bits |= desc[w]
        desc[v] = bits
    consumers = [(u, snbr[sptr[u]:sptr[u + 1]].tolist()) for u in range(n) if problem.out_bytes[u] > 0]
    found: list[Held] = []
    for x in range(n):
        if problem.time[x] <= 0:
            continue
        ax, dx = anc[x], desc[x]
        tensors, holders = [], []
        for u, cons in consumers:
            if not (ax >> u) & 1:
                continue
            hs = tuple(sorted({int(un.of[w]) for w in cons if (dx >> w) & 1}))
            if hs:
                tensors.append(u)
                holders.append(hs)
        if problem.out_bytes[x] > 0:  # x's own output: its buffer starts at S_x
            tensors.append(x)
            holders.append((int(un.of[x]),))
        if tensors:
            found.append(Held(x, tensors, holders, float(problem.out_bytes[tensors].sum())))
    found.sort(key=lambda h: (-h.total, h.x))
    return found[:count]
