"""Exact minimisation of a sum of small cost tables over discrete variables, by dynamic programming
(variable elimination), the DP Tofu runs over its coarsened graph.

Each table (a *factor*) depends on a few variables. Variables are eliminated one at a time: the
factors that mention the variable are added into one table over the variable and its neighbours,
the variable is minimised out (its best value remembered per neighbour assignment), and the result
becomes a new factor. Back-substitution in reverse order recovers an optimal assignment. On a
chain of layers (Tofu's linear graph) each elimination involves a layer's variables and its
neighbours' only; the order is the greedy one that keeps the next table smallest (min-weight),
which on a training graph eliminates each layer's weights and gradients with the layer instead of
carrying them from the forward to the backward pass (Tofu's grouping of forward with backward and
of unrolled timesteps, found from the structure).

The result is exact whatever the order. If a table would exceed ``max_cells`` entries, the
neighbour with the largest domain is first fixed to its locally best value (conditioning) and the
result is marked inexact; callers report that.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

Factor = tuple[tuple[int, ...], np.ndarray]  # (distinct variables, table indexed in that order)


@dataclass
class DPResult:
    cost: float
    assignment: list[int]  # value index per variable
    exact: bool
    largest_table: int  # entries of the largest table built
    stopped: bool = False  # ``stop`` fired: the assignment is meaningless


def _align(table: np.ndarray, have: Sequence[int], want: Sequence[int]) -> np.ndarray:
    """``table`` over variables ``have`` as an array broadcastable over ``want`` (a superset)."""
    pos = {v: i for i, v in enumerate(have)}
    present = [v for v in want if v in pos]
    arr = np.transpose(table, [pos[v] for v in present]) if present else table
    shape = [table.shape[pos[v]] if v in pos else 1 for v in want]
    return arr.reshape(shape)


def solve_factors(domains: Sequence[int], factors: Sequence[Factor], max_cells: int = 1 << 20,
                  stop: Callable[[], bool] | None = None) -> DPResult:
    """Minimise the sum of ``factors`` over the variables (``domains[v]`` values each); ``stop`` is
    polled every 256 eliminations (a result with ``stopped`` set is returned when it fires)."""
    nvar = len(domains)
    logd = [math.log(max(1, d)) for d in domains]
    live: dict[int, Factor] = {}
    by_var: list[set[int]] = [set() for _ in range(nvar)]
    constant = 0.0
    for vs, tab in factors:
        if not vs:
            constant += float(tab)
            continue
        fid = len(live)
        live[fid] = (tuple(vs), np.asarray(tab, dtype=float))
        for v in vs:
            by_var[v].add(fid)
    next_id = len(live)
    nbrs: list[set[int]] = [set() for _ in range(nvar)]
    for vs, _ in live.values():
        for v in vs:
            nbrs[v].update(vs)
    for v in range(nvar):
        nbrs[v].discard(v)

    def weight(v: int) -> float:
        return logd[v] + sum(logd[u] for u in nbrs[v])

    heap = [(weight(v), v) for v in range(nvar)]
    heapq.heapify(heap)
    done = [False] * nvar
    fixed: dict[int, int] = {}
    records: list[tuple[int, tuple[int, ...], np.ndarray]] = []
    exact = True
    widest = 1
    count = 0
    while heap:
        w, x = heapq.heappop(heap)
        if done[x]:
            continue
        count += 1
        if stop is not None and count % 256 == 0 and stop():
            return DPResult(math.inf, [0] * nvar, False, widest, stopped=True)
        if abs(w - weight(x)) > 1e-9:  # stale entry
            heapq.heappush(heap, (weight(x), x))
            continue
        while math.exp(weight(x)) > max_cells and nbrs[x]:
            exact = False
            y = max(nbrs[x], key=lambda u: (domains[u], -u))
            fixed[y] = _locally_best(y, domains[y], [live[f] for f in by_var[y]])
            _condition(y, fixed[y], live, by_var, nbrs)
            done[y] = True
        fids = sorted(by_var[x])
        scope = tuple(sorted({v for f in fids for v in live[f][0]}))
        table = np.zeros([domains[v] for v in scope])
        for f in fids:
            vs, tab = live.pop(f)
            table = table + _align(tab, vs, scope)
            for v in vs:
                by_var[v].discard(f)
        widest = max(widest, table.size)
        ax = scope.index(x)
        rest = scope[:ax] + scope[ax + 1:]
        records.append((x, rest, np.argmin(table, axis=ax)))
        reduced = table.min(axis=ax)
        done[x] = True
        for u in rest:
            nbrs[u].discard(x)
            nbrs[u].update(r for r in rest if r != u)
        if rest:
            live[next_id] = (rest, reduced)
            for v in rest:
                by_var[v].add(next_id)
            next_id += 1
            for u in rest:
                heapq.heappush(heap, (weight(u), u))
        else:
            constant += float(reduced)
    assign = [0] * nvar
    for v, val in fixed.items():
        assign[v] = val
    for v, rest, arg in reversed(records):
        assign[v] = int(arg[tuple(assign[r] for r in rest)]) if rest else int(arg)
    cost = constant + sum(float(tab[tuple(assign[v] for v in vs)]) for vs, tab in live.values())
    return DPResult(cost, assign, exact, widest)


def _locally_best(y: int, dom: int, facs: list[Factor]) -> int:
    """The value of ``y`` minimising the sum, over its factors, of their best completion."""
    score = np.zeros(dom)
    for vs, tab in facs:
        ax = vs.index(y)
        other = tuple(a for a in range(len(vs)) if a != ax)
        score += tab.min(axis=other) if other else tab
    return int(np.argmin(score))


def _condition(y: int, val: int, live: dict[int, Factor], by_var: list[set[int]], nbrs: list[set[int]]) -> None:
    """Fix variable ``y`` to ``val`` in every factor that mentions it."""
    for f in list(by_var[y]):
        vs, tab = live[f]
        ax = vs.index(y)
        live[f] = (vs[:ax] + vs[ax + 1:], np.take(tab, val, axis=ax))
    by_var[y].clear()
    for u in nbrs[y]:
        nbrs[u].discard(y)
    nbrs[y].clear()
