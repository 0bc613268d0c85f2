"""Exact minimisation of a sum of small cost tables over discrete variables, by dynamic programming
along an order of the tables (the DP Tofu runs over its coarsened, linear graph).

Each table (a *factor*) depends on a few variables; the tables are added in the given order, and a
variable is minimised out as soon as its last table has been added. The DP's state is therefore
the assignment of the *frontier*: the variables used both by tables already added and by tables
still to come. On a linear (chain-like) graph the frontier stays small and the DP is exact and
linear in the graph's length; Tofu's coarsening (forward and backward operators side by side,
element-wise runs tied) is what keeps a training graph chain-like.

When a frontier would exceed ``max_cells`` states, the variable whose best value is clearest is
fixed to it (conditioning) and the result is marked inexact; the caller reports that.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

Factor = tuple[tuple[int, ...], np.ndarray]  # (distinct variables, table indexed in that order)


@dataclass
class DPResult:
    cost: float
    assignment: list[int]  # value index per variable
    exact: bool
    max_frontier: int  # most states held at once


def _align(table: np.ndarray, have: Sequence[int], want: Sequence[int]) -> np.ndarray:
    """``table`` over variables ``have`` as an array broadcastable over ``want`` (a superset)."""
    pos = {v: i for i, v in enumerate(have)}
    present = [v for v in want if v in pos]
    arr = np.transpose(table, [pos[v] for v in present]) if present else table
    shape = [table.shape[pos[v]] if v in pos else 1 for v in want]
    return arr.reshape(shape)


def solve_factors(domains: Sequence[int], factors: Sequence[Factor], max_cells: int = 1 << 20) -> DPResult:
    """Minimise the sum of ``factors`` over the variables (``domains[v]`` values each)."""
    nvar = len(domains)
    last = [-1] * nvar
    for j, (vs, _) in enumerate(factors):
        for v in vs:
            last[v] = j
    frontier: list[int] = []
    table = np.zeros(())
    records: list[tuple[int, list[int], np.ndarray]] = []  # (var, vars it depends on, argmin table)
    fixed: dict[int, int] = {}
    exact = True
    widest = 1
    for j, (vs, ftab) in enumerate(factors):
        new = [v for v in vs if v not in frontier and v not in fixed]
        while frontier and table.size * int(np.prod([domains[v] for v in new] or [1])) > max_cells:
            exact = False
            spread = [float(np.ptp(table.min(axis=tuple(a for a in range(len(frontier)) if a != i)))) for i in range(len(frontier))]
            i = int(np.argmax(spread))
            best = int(np.argmin(table.min(axis=tuple(a for a in range(len(frontier)) if a != i))))
            fixed[frontier[i]] = best
            table = np.take(table, best, axis=i)
            frontier.pop(i)
        if any(v in fixed for v in vs):  # variables fixed by conditioning are sliced out
            ftab = ftab[tuple(fixed[v] if v in fixed else slice(None) for v in vs)]
            vs = tuple(v for v in vs if v not in fixed)
        want = frontier + new
        table = _align(table, frontier, want) + _align(ftab, vs, want)
        frontier = want
        widest = max(widest, table.size)
        for v in [v for v in frontier if last[v] == j]:
            i = frontier.index(v)
            records.append((v, frontier[:i] + frontier[i + 1:], np.argmin(table, axis=i)))
            table = table.min(axis=i)
            frontier.pop(i)
    cost = float(table.sum()) if table.size == 1 else float(table.min())
    assign = [0] * nvar
    for v, val in fixed.items():
        assign[v] = val
    for v, rest, arg in reversed(records):
        assign[v] = int(arg[tuple(assign[r] for r in rest)]) if rest else int(arg)
    return DPResult(cost, assign, exact, widest)
