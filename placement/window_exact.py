"""The exact span of a small window of the chain: the least time any schedule needs between the end
of one chain node and the start of a later one for the nodes that must run in between, found by
CP-SAT on that piece of the graph alone.

Why: the bypass bound (placement/bypass_bound.py) prices a window's members one at a time and
with relaxed capacities. In a recurrent cell every operator takes about as long as a transfer
(an unrolled LSTM: four gates, a few products and sums of 5 us each, 5 us per transfer), and the
cheapest layout of a cell is a small scheduling problem of its own: the chain's device runs one
gate more than the chain, or the chain pays a transfer more. On a one-layer cell the bypass
bound charges a step 47.5 us where the optimum takes 52.5 (K = 4; docs/scale.md "Small windows
solved exactly"). A window of a dozen nodes is solved, with a proof, in milliseconds, and an
unrolled network repeats a handful of window shapes, so each shape is solved once.

The argument: let p_lo and p_hi be chain positions lo < hi and I the chain nodes strictly between
them and the off-chain nodes u with lo <= a(u) and b(u) <= hi (a, b as in bypass_bound.reach).
Every node of I has a path from p_lo and one to p_hi whose nodes are all in I (a node on such a
path has a window end no earlier and a window start no later), so in any feasible schedule each
runs inside [F(p_lo), S(p_hi)]. Restricted to I, p_lo and p_hi, and shifted so that F(p_lo) = 0,
that schedule keeps every edge among these nodes (with its transfer when the ends are apart) and
one node at a time per device: it is a feasible schedule of the piece alone, where everything
else (other nodes, colocation, allowed devices, memory) is left out. So the piece's least
S(p_hi), over all its placements and orders, is at most S(p_hi) - F(p_lo) in every schedule of the
whole problem. CP-SAT solves the piece with times and transfers rounded down to integers (the
rounded-down starts of a real schedule are a schedule of the rounded piece, so its optimum is no
larger); its proved bound (the optimum when it proves one) divided by the scale is the value.
"""
from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from .problem import Problem

MAX_NODES = 14  # nodes of I: a piece larger than this is left to the bypass bound's cases
MAX_SOLVES = 400  # distinct pieces solved per chain
SOLVE_SECONDS = 0.25  # CP-SAT's deterministic time per piece; a piece not closed gives its proved bound
# CP-SAT's deterministic time for all the pieces of a chain: bounds the phase's wall time (pieces
# close in a few ms each: 7-55 per real model, 0.1-0.2 s in all) and, being deterministic like
# the two limits above, keeps the bound the same from run to run whatever the load.
TOTAL_SECONDS = 3.0
COLOCATION = True  # a piece keeps the colocation among its nodes (switched off only to measure what it adds)
SCALE = 1 << 30  # integer units in the piece's serial time and transfers (rounding loses at most a unit per node)


class ExactSpans:
    """Exact spans of the pieces of one chain, each distinct piece solved once (:meth:`span`)."""

    def __init__(self, problem: Problem, chain: list[int], pos: list[int], a: list[int], b: list[int]) -> None:
        self.problem = problem
        self.chain = chain
        self.solves = 0
        self.spent = 0.0  # CP-SAT's deterministic time so far
        self._cache: dict[tuple, float] = {}
        self._b = b
        L = len(chain)
        self._by_a: dict[int, list[int]] = {}
        for u in range(problem.n):
            if pos[u] < 0 and a[u] >= 0 and b[u] < L:
                self._by_a.setdefault(a[u], []).append(u)

    def inner(self, lo: int, hi: int) -> list[int] | None:
        """The nodes I between chain positions lo and hi, or None when there are more than MAX_NODES."""
        if hi - lo - 1 > MAX_NODES:
            return None
        nodes = list(self.chain[lo + 1:hi])
        for e in range(lo, hi):
            for u in self._by_a.get(e, ()):
                if self._b[u] <= hi:
                    nodes.append(u)
                    if len(nodes) > MAX_NODES:
                        return None
        return nodes if len(nodes) <= MAX_NODES else None

    def span(self, lo: int, hi: int, known: float = 0.0) -> float:
        """A lower bound on S(p_hi) - F(p_lo) in every schedule (0 when the piece is too big or the
        solve budget is spent, or when ``known``, a bound already held, is no less than the piece's
        nodes run one after another on p_lo's device: the piece's optimum is no more than that)."""
        nodes = self.inner(lo, hi)
        if not nodes or float(self.problem.time[nodes].sum()) <= known:
            return 0.0
        key, piece = _piece(self.problem, self.chain[lo], self.chain[hi], nodes)
        if key in self._cache:
            return self._cache[key]
        if self.solves >= MAX_SOLVES or self.spent >= TOTAL_SECONDS:
            return 0.0
        self.solves += 1
        value, spent = solve_piece(*piece, self.problem.k, min(SOLVE_SECONDS, TOTAL_SECONDS - self.spent))
        self.spent += spent
        self._cache[key] = value
        return value


def _piece(problem: Problem, source: int, sink: int, nodes: list[int]) -> tuple[tuple, tuple]:
    """The piece as plain data (durations of the nodes in topological order, its edges as index
    pairs with transfers: -1 is the source, len(nodes) the sink, and the pairs of its nodes that
    share a colocation group, each tied to the group's first) and a key naming its shape."""
    nodes = sorted(nodes, key=lambda v: int(problem.topo_rank[v]))
    index = {v: i for i, v in enumerate(nodes)}
    index[source], index[sink] = -1, len(nodes)
    ptr, nbr, eid = problem.pred_ptr
    edges = []
    for v in nodes + [sink]:
        for j in range(ptr[v], ptr[v + 1]):
            u = int(nbr[j])
            if u in index and u != sink:
                edges.append((index[u], index[v], float(problem.comm[eid[j]])))
    edges.sort()
    first: dict[int, int] = {}
    same = []
    for v in [source] + nodes + [sink] if COLOCATION else []:
        grp = int(problem.colocate[v])
        if grp < 0:
            continue
        if grp in first:
            same.append((first[grp], index[v]))
        else:
            first[grp] = index[v]
    dur = tuple(float(problem.time[v]) for v in nodes)
    return (dur, tuple(edges), tuple(same)), (dur, edges, same)


def solve_piece(dur: tuple[float, ...], edges: list[tuple[int, int, float]],
                same: list[tuple[int, int]], k: int, seconds: float = SOLVE_SECONDS) -> tuple[float, float]:
    """The least start of the sink over every placement on k devices and order of the piece whose
    source (index -1) ends at time 0 on device 0 (a lower bound of it: CP-SAT's proved bound on
    the piece rounded down to integers, within ``seconds`` of deterministic time), and the
    deterministic time spent. ``edges``: (from, to, transfer), the sink is index len(dur);
    ``same``: pairs of nodes that must share a device (colocation)."""
    n = len(dur)
    horizon_real = sum(dur) + sum(c for _, _, c in edges)
    if horizon_real <= 0:
        return 0.0, 0.0
    scale = SCALE / horizon_real
    d = [int(np.floor(x * scale)) for x in dur]
    horizon = sum(d) + 1  # everything on device 0 in topological order fits
    kk = max(1, min(k, n + 2))  # the source's device and one for each other node and the sink
    m = cp_model.CpModel()
    start = [m.NewIntVar(0, horizon, f"s{i}") for i in range(n)]
    sink = m.NewIntVar(0, horizon, "sink")
    on = [[m.NewBoolVar(f"x{i}_{q}") for q in range(kk)] for i in range(n)]
    sink_on = [m.NewBoolVar(f"y{q}") for q in range(kk)]
    for row in on + [sink_on]:
        m.AddExactlyOne(row)
    for q in range(kk):
        m.AddNoOverlap([m.NewOptionalFixedSizeIntervalVar(start[i], d[i], on[i][q], f"i{i}_{q}") for i in range(n)])
    # Devices other than the source's are alike: number them by first use (nodes in index order,
    # then the sink), so device q >= 2 is used only after device q - 1.
    for i, row in enumerate(on + [sink_on]):
        for q in range(2, kk):
            m.Add(row[q] <= sum(on[j][q - 1] for j in range(i)))
    src_on = [1] + [0] * (kk - 1)

    def device_of(i: int) -> list:
        return src_on if i < 0 else sink_on if i == n else on[i]

    for i, j in same:
        for x_i, x_j in zip(device_of(i), device_of(j)):
            m.Add(x_i == x_j)
    for u, v, c in edges:
        cu = int(np.floor(c * scale))
        fin = 0 if u < 0 else start[u] + d[u]
        to = sink if v == n else start[v]
        if cu <= 0:
            m.Add(to >= fin)
            continue
        apart = m.NewBoolVar("")
        for q in range(kk):
            m.Add(apart >= device_of(u)[q] - device_of(v)[q])
        m.Add(to >= fin + cu * apart)
    for i in range(n):
        m.Add(sink >= start[i] + d[i])
    m.Minimize(sink)
    solver = cp_model.CpSolver()
    solver.parameters.catch_sigint_signal = False  # its own handler would replace the CLI's: Ctrl-C would kill the run
    solver.parameters.num_workers = 1
    solver.parameters.max_deterministic_time = seconds
    status = solver.Solve(m)
    if status == cp_model.OPTIMAL:
        value = solver.ObjectiveValue()
    elif status == cp_model.FEASIBLE:
        value = solver.BestObjectiveBound()
    else:
        value = 0.0
    return float(value) / scale, float(solver.deterministic_time)
