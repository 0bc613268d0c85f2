"""Peak memory model (docs/model.md, placement.evaluator.buffers) for the MIP of formulations/mip.py.

The evaluator's tensor lifetimes, on device d, for a node v with out_v > 0:
  local   v on d:                       [S_v, max(F_v, F_c for consumers c on d))
  remote  v not on d, a consumer on d:   [F_v, max(F_c for consumers c on d))
(empty intervals count nothing). Memory on d is params plus the live buffers; its maximum over
time is reached at some buffer start, so it suffices to bound the level at every *start point*:
S_v and "F_v as the start of a remote copy" (kept apart from F_v as an end).

Event order. Binaries ``o`` put the start points in a total order sigma (transitivity constraints
on triples), consistent with time: p before q implies tau_p <= tau_q. Binaries ``a`` say whether a
start point e comes before the end F_c (e before F_c implies tau_e <= F_c, otherwise F_c <= tau_e).
At start point e, buffer b counts (``live`` >= 1) when its start is e or before e in sigma and one
of its ends F_c (c present on the device, or v itself for a local buffer with time_v > 0) is after e.

Soundness (every feasible MIP point is within memory): let tau* be a time where device d peaks and
e the sigma-last start point on d with time tau*. A buffer live at tau* starts at or before tau*, so
at or before e in sigma (strictly earlier times are forced by the time constraints, equal ones by e
being last); one of its ends is after tau*, hence cannot be ordered before e. So the level counted
at e is at least the true peak, and that level is <= capacity.
Exactness (every feasible schedule is a MIP point): order the points by time, ends before starts
at equal times, then by topological rank, S before F of one node. Then a buffer counts at e only if
start <= tau_e < end, i.e. the counted level is the true level at tau_e.
Pairs whose order follows from the DAG are fixed to that order (it agrees with the tie rule above).
The model has O(n^2 K) continuous ``live`` variables and O(n^2) binaries plus O(n^3) transitivity
rows: it is the second opinion on small instances, not a large-scale model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union

import numpy as np
from ortools.linear_solver import pywraplp

from placement.problem import Problem

from .common import Units

Expr = Union[pywraplp.Variable, pywraplp.LinearExpr, float, int]


@dataclass
class PeakModel:
    """The peak-memory part of the MIP: its variables and how to give them a hint."""

    points: list[tuple[int, int]]  # start points: (node, 0) = S_v, (node, 1) = F_v as a remote start
    o: dict[tuple[int, int], pywraplp.Variable] = field(default_factory=dict)  # (p, q), p < q: 1 iff p before q
    a: dict[tuple[int, int], pywraplp.Variable] = field(default_factory=dict)  # (e, c): 1 iff point e before F_c
    live: list[tuple[pywraplp.Variable, int, int, int, list]] = field(default_factory=list)  # var, v, d, e, rows

    def hint(self, problem: Problem, placement: np.ndarray, start: np.ndarray) -> tuple[list, list]:
        """Values of every peak variable for a schedule, following the exactness order."""
        t = problem.time
        fin = start + t
        rank = problem.topo_rank
        key = [(float(start[v] if kind == 0 else fin[v]), int(rank[v]), kind) for v, kind in self.points]
        vars_: list = []
        vals: list[float] = []
        for (p, q), var in self.o.items():
            vars_.append(var)
            vals.append(float(key[p] < key[q]))
        before_end = {}
        for (e, c), var in self.a.items():
            before_end[e, c] = float(key[e][0] < fin[c])
            vars_.append(var)
            vals.append(before_end[e, c])
        for var, v, d, e, rows in self.live:
            val = 0.0
            for kind, c in rows:
                present = (placement[v] == d) if kind == 0 else (placement[v] != d)
                if c != v:
                    present = present and placement[c] == d
                sp = self.points.index((v, kind))
                started = sp == e or key[sp] < key[e]
                if present and started and key[e][0] < fin[c]:
                    val = 1.0
                    break
            vars_.append(var)
            vals.append(val)
        return vars_, vals


def add_peak_memory(solver: pywraplp.Solver, problem: Problem, un: Units, x: dict, s: list, horizon: float,
                    anc: list[int], tick: Callable[[], None] = lambda: None) -> PeakModel:
    """Add the peak memory constraints to ``solver``; ``x[g, d]`` places unit g on device d,
    ``s[v]`` is v's start, ``anc[v]`` the bitmask of v's ancestors, ``horizon`` a big-M on times.
    ``tick`` is called often (it raises to abandon the build when out of time)."""
    n, k = problem.n, problem.k
    t = problem.time
    ug = un.of
    mask = problem.allowed_mask()
    out = problem.out_bytes
    ptr, nbr, _ = problem.succ_ptr
    rank = problem.topo_rank
    H = float(horizon)
    cons = [sorted(set(nbr[ptr[v]:ptr[v + 1]].tolist())) for v in range(n)]

    def xv(v: int, d: int) -> Expr:
        var = x.get((int(ug[v]), d))
        return 0 if var is None else var

    def remote_on(v: int, d: int) -> list[int]:
        """Consumers of v that may sit on d while v sits elsewhere."""
        if not np.any(np.delete(mask[v], d)):
            return []
        return [c for c in cons[v] if mask[c, d] and ug[c] != ug[v]]

    # Buffers: (v, kind, d, ends); kind 0 local from S_v, kind 1 remote from F_v.
    bufs: list[tuple[int, int, int, list[int]]] = []
    for v in range(n):
        if out[v] <= 0:
            continue
        for d in range(k):
            if not np.isfinite(problem.memory[d]):
                continue
            if mask[v, d]:
                ends = ([v] if t[v] > 0 else []) + [c for c in cons[v] if mask[c, d]]
                if ends:
                    bufs.append((v, 0, d, ends))
            rem = remote_on(v, d)
            if rem:
                bufs.append((v, 1, d, rem))
    points = sorted({(v, kind) for v, kind, _, _ in bufs}, key=lambda p: (int(rank[p[0]]), p[1]))
    pid = {p: i for i, p in enumerate(points)}
    pm = PeakModel(points)

    def tau(p: int) -> Expr:
        v, kind = points[p]
        return s[v] + float(t[v]) if kind else s[v]

    def is_anc(u: int, v: int) -> bool:
        return bool(anc[v] >> u & 1)

    def fixed_before(p: int, q: int) -> int | None:
        """1/0 when the DAG decides whether start point p precedes q in sigma, else None."""
        (u, ku), (v, kv) = points[p], points[q]
        if u == v:
            return int(ku < kv)
        if is_anc(u, v):
            return 1
        if is_anc(v, u):
            return 0
        return None

    def before(p: int, q: int) -> Expr:
        """1 iff start point p is at or before q in sigma."""
        if p == q:
            return 1
        f = fixed_before(p, q)
        if f is not None:
            return f
        lo, hi = min(p, q), max(p, q)
        var = pm.o.get((lo, hi))
        if var is None:
            var = solver.BoolVar(f"peak_o{lo}_{hi}")
            solver.Add(tau(lo) <= tau(hi) + H * (1 - var))
            solver.Add(tau(hi) <= tau(lo) + H * var)
            pm.o[lo, hi] = var
        return var if p == lo else 1 - var

    def before_end(e: int, c: int) -> Expr:
        """1 iff start point e is before the end F_c (at equal times the end comes first)."""
        w, kind = points[e]
        if c == w:
            return int(kind == 0 and t[c] > 0)
        if is_anc(c, w):
            return 0
        if is_anc(w, c) and t[c] > 0:
            return 1
        var = pm.a.get((e, c))
        if var is None:
            var = solver.BoolVar(f"peak_a{e}_{c}")
            fc = s[c] + float(t[c])
            solver.Add(tau(e) <= fc + H * (1 - var))
            solver.Add(fc <= tau(e) + H * var)
            pm.a[e, c] = var
        return var

    for d in range(k):
        cap = float(problem.memory[d])
        if not np.isfinite(cap):
            continue
        unit = cap if cap > 0 else 1.0  # bytes are divided by the capacity to keep rows well scaled
        rhs = cap / unit
        params = [(float(problem.param_bytes[i]) / unit, xv(i, d)) for i in range(n)
                  if mask[i, d] and problem.param_bytes[i] > 0]
        pterm = sum(w * var for w, var in params) if params else 0.0
        if params:
            solver.Add(pterm <= rhs)
        mine = [b for b in bufs if b[2] == d]
        checks = sorted({pid[v, kind] for v, kind, _, _ in mine})
        for e in checks:
            tick()
            level = []
            for v in sorted({b[0] for b in mine}):
                rows = []
                for _, kind, _, ends in (b for b in mine if b[0] == v):
                    started = before(pid[v, kind], e)
                    if isinstance(started, int) and started == 0:
                        continue
                    present = xv(v, d) if kind == 0 else 1 - xv(v, d)
                    for c in ends:
                        alive = before_end(e, c)
                        if isinstance(alive, int) and alive == 0:
                            continue
                        rows.append((kind, c, present + started + alive + (xv(c, d) if c != v else 0),
                                     3 if c != v else 2))
                if not rows:
                    continue
                lv = solver.NumVar(0.0, 1.0, f"peak_live{v}_{d}_{e}")
                for _, _, expr, m in rows:
                    solver.Add(lv >= expr - m)
                pm.live.append((lv, v, d, e, [(kind, c) for kind, c, _, _ in rows]))
                level.append(float(out[v]) / unit * lv)
            if level:
                solver.Add(pterm + sum(level) <= rhs)

    _transitivity(solver, before, len(points), tick)
    return pm


def _transitivity(solver: pywraplp.Solver, before, count: int, tick: Callable[[], None] = lambda: None) -> None:
    """sigma is a total order of the start points: every pair gets its order (fixed or a binary),
    and no triple forms a cycle (the linear-ordering inequalities)."""
    rel = [[before(p, q) for q in range(count)] for p in range(count)]
    for i in range(count):
        for j in range(i + 1, count):
            tick()
            for l in range(j + 1, count):
                parts = (rel[i][j], rel[j][l], rel[i][l])
                if all(isinstance(z, int) for z in parts):
                    continue
                expr = parts[0] + parts[1] - parts[2]
                solver.Add(expr <= 1)
                solver.Add(expr >= 0)
