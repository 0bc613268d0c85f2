"""Placement-only memory cuts of the peak model: the bytes a unit must hold while a node x runs.

Let x have positive time and t in [S_x, F_x). A tensor u that is a strict ancestor of x, with a
consumer w in u's own colocation unit that is x or a descendant of x, is held on u's device at t:
its local buffer is [S_u, max(F_u, last local finish)) and contains [S_u, F_w) since w is local
(same unit, same device), F_u <= S_x <= t and F_w >= F_x > t. So at t the device of unit g holds
at least

    saved_g(x) = params_g + sum of out_u over such u in g,

whatever the placement, and for every device d:  sum_g saved_g(x) [g on d] <= M_d. On a training
graph with x the loss, saved_g is the unit's weights plus every activation its backward layer
keeps: the knapsack that makes memory force a split of the layers. The same holds for any set of
units on one device, which is what the path bound's runs are (formulations/pathbound.py).
"""
from __future__ import annotations

import numpy as np

from placement.problem import Problem

from .units import units

CUT_NODES = 8  # the nodes x used: the ones with the most saved bytes in all
MAX_NODES = 3000  # quadratic in the nodes (bitsets): beyond this, no cuts (the bound stays valid)


def saved_bytes(problem: Problem, count: int = CUT_NODES, param: np.ndarray | None = None,
                out: np.ndarray | None = None) -> list[tuple[int, np.ndarray]]:
    """Up to ``count`` pairs (x, saved_g(x) per unit g), the x with the largest total first (only
    x with positive time and some saved output). ``param``/``out``: the byte counts to sum (default
    the problem's; CP-SAT passes its integer units)."""
    param = problem.param_bytes if param is None else param
    out = problem.out_bytes if out is None else out
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
    # (u, bitset of u's consumers in u's own unit) for outputs that take memory
    local = []
    for u in range(n):
        if problem.out_bytes[u] <= 0:
            continue
        mask = 0
        for w in snbr[sptr[u]:sptr[u + 1]].tolist():
            if un.of[w] == un.of[u]:
                mask |= 1 << w
        if mask:
            local.append((u, mask))
    if not local:
        return []
    params = np.bincount(un.of, weights=param, minlength=un.count).astype(out.dtype)
    found: list[tuple[float, int, np.ndarray]] = []
    for x in range(n):
        if problem.time[x] <= 0:
            continue
        ax, dx = anc[x], desc[x]
        kept = [u for u, mask in local if (ax >> u) & 1 and mask & dx]
        if not kept:
            continue
        w = params.copy()
        np.add.at(w, un.of[kept], out[kept])
        found.append((float(problem.out_bytes[kept].sum()), x, w))
    found.sort(key=lambda f: (-f[0], f[1]))
    return [(x, w) for _, x, w in found[:count]]
