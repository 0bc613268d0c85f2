"""Pair bound of the single-sample latency: the closure bound of latency_closure.py, with two
consecutive runs of the path also charged together for the nodes that cross the cut between them.
docs/objectives.md ("Pair bound") has the proof.

Two consecutive accelerator runs A = v_j..v_m (subgraph S_A) and B = v_{m+1}..v_i (S_B) of a
path. A node x with v_a ~> x ~> v_b for some a in [j, m] and b in [m+1, i], in neither I(j, m) nor
I(m+1, i), *crosses* the cut. If x is in neither S_A nor S_B, its unit U starts after S_A ends and
S_B starts after U ends (fact F2 of the interval bound, both ways), so L(v_i) >= L(v_{j-1}) +
f(S_A) + w(x) + f(S_B) with w(x) = min(time(x), cpu_latency(x)) (cpu_latency alone for an
unsupported node); otherwise the bound without w(x) holds. So L(v_i) - L(v_{j-1}) is at least
the least f(X_A) + f(X_B) + w(x) [x in neither] over disjoint X_A, X_B meeting the conditions of
their runs (latency_closure.py), for one chosen crossing x. That minimum is one s-t cut on two
copies of the run network: copy A as in latency_closure.py, copy B *complemented* (source side =
outside X_B: every arc reversed, source and sink swapped), an infinite arc u_A -> u_B (u in both
sets is cut) and an arc x_B -> x_A of capacity w(x) (cut iff x is in neither). Memory enters with
each run's multiplier from the closure bound.

The DP's state is the last run (j, i): S(j, i) = min over the unit before it of, for a run
(j', j-1), max(S(j', j-1) + c(j, i), P(j') + c2(j', j-1, i)) (P = best bound before position j',
c2 the pair cost, never below the two run costs), and for a CPU node or the path's start the
usual sum. For every split whose path cut has these runs, its real completion time is at least
each of the two terms with its own prefix in place of the minima, so the DP value is a lower
bound. Pair costs start as the sum of the two run costs and are computed lazily for the adjacent
runs of the DP's optimal cut (with their run costs), until its optimal cut uses only computed
values; O(r^3 k) per DP, so it is run only when the closure bound leaves a gap.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.graph.python import max_flow

from placement.objectives import cpu_time, supported
from placement.problem import Problem
from .bounds import _reach_positions
from .closure import ClosureResult, RunCut, closure_path_bound

_INT64_SAFE = 9.0e18


def crossing_weight(problem: Problem) -> np.ndarray:
    """w(x): the least time x adds to a chain when it runs in a unit of its own."""
    cpu = cpu_time(problem)
    acc = np.nan_to_num(problem.time.astype(float), nan=np.inf, posinf=np.inf)
    return np.where(supported(problem), np.minimum(acc, cpu), cpu)


def pair_cut(rc: RunCut, in_a: np.ndarray, out_a: np.ndarray, lam_a: float, in_b: np.ndarray, out_b: np.ndarray,
             lam_b: float, cross: int, weight: float) -> float:
    """Least f(X_A) + lam_a (mem(X_A) - M) + f(X_B) + lam_b (mem(X_B) - M) + weight [cross in neither]
    over disjoint X_A, X_B meeting their runs' conditions (module docstring); inf if none exist."""
    n = rc.n
    out_a = out_a | ~rc.sup
    out_b = out_b | ~rc.sup
    if np.any(in_a & out_a) or np.any(in_b & out_b) or np.any(in_a & in_b):
        return np.inf
    total = float(2 * rc.time.sum() + (lam_a + lam_b) * rc.bytes.sum() + 4 * rc.t_cost.sum() + weight) + 1.0
    scale = min(1e9, _INT64_SAFE / (2 * n + 4) / total)
    inf = int(total * scale) + 1
    big = rc.source  # nodes of one copy: graph nodes, then the tensors' r_t and w_t
    source, sink = 2 * big, 2 * big + 1
    caps = np.where(rc.arc_cost < 0, inf, np.floor(rc.arc_cost * scale)).astype(np.int64)
    idx = np.arange(n, dtype=np.int64)
    flow = max_flow.SimpleMaxFlow()
    flow.add_arcs_with_capacity(rc.arc_tail, rc.arc_head, caps)
    flow.add_arcs_with_capacity(rc.arc_head + big, rc.arc_tail + big, caps)
    ia = idx[in_a]
    flow.add_arcs_with_capacity(np.full(ia.size, source, dtype=np.int64), ia, np.full(ia.size, inf, dtype=np.int64))
    cap_a = np.where(out_a, inf, np.floor((rc.time + lam_a * rc.bytes) * scale)).astype(np.int64)
    flow.add_arcs_with_capacity(idx, np.full(n, sink, dtype=np.int64), cap_a)
    ib = idx[in_b]
    flow.add_arcs_with_capacity(ib + big, np.full(ib.size, sink, dtype=np.int64), np.full(ib.size, inf, dtype=np.int64))
    cap_b = np.where(out_b, inf, np.floor((rc.time + lam_b * rc.bytes) * scale)).astype(np.int64)
    flow.add_arcs_with_capacity(np.full(n, source, dtype=np.int64), idx + big, cap_b)
    flow.add_arcs_with_capacity(idx, idx + big, np.full(n, inf, dtype=np.int64))
    if cross >= 0 and weight > 0:
        flow.add_arc_with_capacity(cross + big, cross, int(np.floor(weight * scale)))
    status = flow.solve(source, sink)
    if status != flow.OPTIMAL:
        raise RuntimeError(f"pair bound: max flow status {status}")
    value = flow.optimal_flow()
    if value >= inf:
        return np.inf
    return value / scale - (lam_a + lam_b) * rc.cap


@dataclass
class PairResult:
    bound: float
    runs: list[tuple[int, int]]
    pairs: int  # pair cuts computed
    complete: bool


def pair_path_bound(problem: Problem, path: list[int], q: int = 1, deadline: float | None = None,
                    closure: ClosureResult | None = None, runcut: RunCut | None = None,
                    candidates: int = 2) -> PairResult:
    """The pair bound of one path (module docstring), started from the closure bound's run costs;
    for each pair the ``candidates`` costliest crossing nodes are tried one at a time (each gives
    a valid value; the largest is kept)."""
    r = len(path)
    if r == 0:
        return PairResult(0.0, [], 0, True)
    rc = runcut or RunCut(problem, q)
    if closure is None or closure.cost is None:
        closure = closure_path_bound(problem, path, q, deadline, rc)
    cost = closure.cost.copy()
    lams = dict(closure.lam or {})
    first, last = _reach_positions(problem, path)
    cpu = cpu_time(problem)[np.asarray(path)]
    wgt = crossing_weight(problem)
    runs = max(0, min(problem.k * q, r))
    over: dict[int, dict[tuple[int, int], float]] = {}  # m -> {(j', i): pair cost}
    pairs = 0

    def run_sets(j: int, i: int) -> tuple[np.ndarray, np.ndarray]:
        return (last >= j) & (first <= i), (first < j) | (last > i)

    while True:
        value, chosen, adjacent = _pair_dp(cost, over, cpu, runs)
        todo_runs = [(j, i) for j, i in chosen if (j, i) not in lams]
        todo_pairs = [t for t in adjacent if (t[0], t[2]) not in over.get(t[1], {})]
        if (not todo_runs and not todo_pairs) or (deadline is not None and time.monotonic() >= deadline):
            return PairResult(value, chosen, pairs, not todo_runs and not todo_pairs)
        for j, i in todo_runs:
            val, _ = rc.run_bound(*run_sets(j, i))
            cost[j, i] = max(cost[j, i], val)
            lams[(j, i)] = rc.last_lam
        if todo_runs:
            continue  # pairs are priced with exact run costs
        for jp, m, i in todo_pairs:
            in_a, out_a = run_sets(jp, m)
            in_b, out_b = run_sets(m + 1, i)
            base = cost[jp, m] + cost[m + 1, i]
            crossing = np.flatnonzero((last >= jp) & (last <= m) & (first >= m + 1) & (first <= i))
            best = base
            for x in crossing[np.argsort(-wgt[crossing], kind="stable")][:candidates].tolist():
                best = max(best, pair_cut(rc, in_a, out_a, lams[(jp, m)], in_b, out_b, lams[(m + 1, i)], x, float(wgt[x])))
            over.setdefault(m, {})[(jp, i)] = best
            pairs += 1


def _pair_dp(cost: np.ndarray, over: dict[int, dict[tuple[int, int], float]], cpu: np.ndarray,
             runs: int) -> tuple[float, list[tuple[int, int]], list[tuple[int, int, int]]]:
    """(value, runs of the optimal cut, its adjacent run pairs (j', m, i)) of the DP of the module
    docstring. S[c, j, i]: last run (j, i) and c runs; P[c, x]: best bound of L(v_{x-1})."""
    r = cpu.size
    inf = np.inf
    S = np.full((runs + 1, r, r), inf)
    arg = np.full((runs + 1, r, r), -2, dtype=np.int64)  # -1: after a CPU node or the start; j' >= 0: after run (j', j-1)
    P = np.full((runs + 1, r + 1), inf)
    from_cpu = np.zeros((runs + 1, r + 1), dtype=bool)
    P[0, 0] = 0.0
    for j in range(r + 1):
        if j > 0:
            after_cpu = P[:, j - 1] + cpu[j - 1]
            after_run = S[:, :j, j - 1].min(axis=1) if runs else np.full(runs + 1, inf)
            P[:, j] = np.minimum(after_cpu, after_run)
            from_cpu[:, j] = after_cpu <= after_run
        if j == r:
            break
        pc = P[:, j] if j == 0 else P[:, j - 1] + cpu[j - 1]  # the unit before j is a CPU node (or none)
        if j == 0:
            pc = np.where(np.arange(runs + 1) == 0, 0.0, inf)
        row = cost[j, :]
        ov = over.get(j - 1, {})
        for c in range(1, runs + 1):
            best = pc[c - 1] + row
            choice = np.full(r, -1, dtype=np.int64)
            if j > 0 and c >= 2:
                cand = S[c - 1, :j, j - 1][:, None] + row[None, :]
                for (jp, i), val in ov.items():
                    cand[jp, i] = max(cand[jp, i], P[c - 2, jp] + val)
                k = np.argmin(cand, axis=0)
                kv = cand[k, np.arange(r)]
                better = kv < best
                best = np.where(better, kv, best)
                choice = np.where(better, k, choice)
            best[:j] = inf
            S[c, j, :] = best
            arg[c, j, :] = choice
    c = int(np.argmin(P[:, r]))
    value = float(P[c, r])
    chosen: list[tuple[int, int]] = []
    adjacent: list[tuple[int, int, int]] = []
    x = r
    while x > 0 and np.isfinite(value):
        if from_cpu[c, x]:
            x -= 1
            continue
        i = x - 1
        j = int(np.argmin(S[c, :x, i]))
        while True:  # follow the chain of runs that end where the next starts
            chosen.append((j, i))
            prev = int(arg[c, j, i])
            c -= 1
            if prev < 0:  # after the path's start, or after v_{j-1} on a CPU
                x = j - 1 if j > 0 else 0
                break
            adjacent.append((prev, j - 1, i))
            i, j = j - 1, prev
    return value, chosen[::-1], adjacent[::-1]
