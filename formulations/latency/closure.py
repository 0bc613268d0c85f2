"""Closure bound of the single-sample latency (Section 4 model): the interval path bound of
latency_bounds.py with the cost of each run raised to the least duration of *any* subgraph that
could hold the run, found as a minimum s-t cut. docs/objectives.md ("Closure bound") has the proof.

Fix a path P = v_0..v_{r-1} and a feasible split; cut P into maximal runs as in latency_bounds.py.
A run v_j..v_i of accelerator nodes lies in one subgraph S, and S
- contains I(j, i) = {u : v_j ~> u ~> v_i} (contiguity);
- contains no ancestor-or-self of v_{j-1} and no descendant-or-self of v_{i+1} (such a node in S
  would put v_{j-1} or v_{i+1} in S by contiguity, but the run is maximal);
- contains no node that is not supported on accelerators;
- with q = 1, contains every colocation partner of its nodes and none of the others' (a group
  sits on one device, and an accelerator has one subgraph);
- fits the accelerator's memory.
Its duration is exactly f(S) = time(S) + sum of the costs of the tensors S reads (made outside,
read inside) + of those it writes (made inside, read outside); it starts after L(v_{j-1}), whose
tensor it reads. So L(v_i) >= L(v_{j-1}) + min f(S') over the sets S' meeting these conditions
(contiguity of S' otherwise relaxed), and memory is taken into the minimum by a Lagrange
multiplier: for lambda >= 0, f(S) >= f(S) + lambda (mem(S) - M) >= min_S' [f(S') + lambda mem(S')]
- lambda M. Each minimum is a cut: a node is on the source side iff it is in S'; node u -> sink
costs time(u) + lambda bytes(u); tensor t with producer p and consumers C gets a node r_t (c ->
r_t infinite for c in C, r_t -> p cost(t): paid iff a consumer is in S' and p is not) and a node
w_t (w_t -> c infinite, p -> w_t cost(t): paid iff p is in S' and a consumer is not); forced
members are tied to the source, forbidden ones to the sink, colocated ones to each other.
Capacities are integers (times x ``scale``, rounded down), so flow / scale is a lower bound.

The DP over cuts of P (at most k*q runs) starts from the interval costs and is repeated; each
time, the runs of its optimal cut whose cost is not yet a cut value get it (the larger of the two
lower bounds), until the optimal cut uses only cut values. Every intermediate DP value is a valid
bound (a minimum over cuts of P of lower bounds of their costs), so a deadline only weakens it.
The cut sets of the final runs, made contiguous and placed on distinct accelerators with every
other node on a CPU, are also offered as a split (``closure_split``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from ortools.graph.python import max_flow

from placement.objectives import cpu_time, evaluate_latency, node_bytes, supported, tensors
from placement.problem import Problem
from .bounds import _reach_positions, candidate_paths, path_min_latency, run_costs

_INT64_SAFE = 9.0e18


class RunCut:
    """Least duration of a subgraph holding a given set and avoiding another, by min cut."""

    def __init__(self, problem: Problem, q: int = 1):
        n = problem.n
        tens = tensors(problem)
        nt = int(tens.cost.size)
        self.n = n
        self.sup = supported(problem)
        self.time = np.where(self.sup, np.nan_to_num(problem.time, nan=0.0, posinf=0.0), 0.0).astype(float)
        self.bytes = node_bytes(problem).astype(float)
        self.cap = float(problem.memory.max())
        consumers: list[set[int]] = [set() for _ in range(nt)]
        for e, t in enumerate(tens.of_edge.tolist()):
            consumers[t].add(int(problem.dst[e]))
        self.t_prod = tens.producer.astype(np.int64)
        self.t_cost = tens.cost.astype(float)
        self.t_cons = consumers
        self.groups = [g.astype(np.int64) for g in problem.groups] if q == 1 else []
        self.source = n + 2 * nt
        self.sink = self.source + 1
        # the arcs that do not depend on the run: cost -1 stands for infinite
        tails: list[int] = []
        heads: list[int] = []
        costs: list[float] = []
        for t in range(nt):
            c = float(self.t_cost[t])
            if c <= 0.0:
                continue
            p, r, w = int(self.t_prod[t]), n + t, n + nt + t
            for x in sorted(consumers[t]):
                tails += [x, w]
                heads += [r, x]
                costs += [-1.0, -1.0]
            tails += [r, p]
            heads += [p, w]
            costs += [c, c]
        for g in self.groups:
            for a, b in zip(g[:-1].tolist(), g[1:].tolist()):
                tails += [a, b]
                heads += [b, a]
                costs += [-1.0, -1.0]
        self.arc_tail = np.asarray(tails, dtype=np.int64)
        self.arc_head = np.asarray(heads, dtype=np.int64)
        self.arc_cost = np.asarray(costs, dtype=float)

    def _scale(self, lam: float) -> tuple[float, int]:
        total = float(self.time.sum() + lam * self.bytes.sum() + 2.0 * self.t_cost.sum()) + 1.0
        scale = min(1e9, _INT64_SAFE / (self.n + 4) / total)
        return scale, int(total * scale) + 1

    def least_duration(self, forced_in: np.ndarray, forced_out: np.ndarray, lam: float = 0.0) -> tuple[float, np.ndarray]:
        """(lower bound of f(S) + lam (mem(S) - M) over the allowed S, the nodes of a minimising
        S'); inf when no S is allowed (a colocation group both forced in and forbidden)."""
        out = forced_out | ~self.sup
        if np.any(forced_in & out):
            return np.inf, np.zeros(0, dtype=np.int64)
        scale, inf = self._scale(lam)
        n = self.n
        caps = np.where(self.arc_cost < 0, inf, np.floor(self.arc_cost * scale)).astype(np.int64)
        node_cap = np.floor((self.time + lam * self.bytes) * scale).astype(np.int64)
        idx = np.arange(n, dtype=np.int64)
        ins = idx[forced_in]
        flow = max_flow.SimpleMaxFlow()
        flow.add_arcs_with_capacity(self.arc_tail, self.arc_head, caps)
        flow.add_arcs_with_capacity(np.full(ins.size, self.source, dtype=np.int64), ins, np.full(ins.size, inf, dtype=np.int64))
        flow.add_arcs_with_capacity(idx, np.full(n, self.sink, dtype=np.int64), np.where(out, inf, node_cap))
        status = flow.solve(self.source, self.sink)
        if status != flow.OPTIMAL:
            raise RuntimeError(f"closure bound: max flow status {status}")
        value = flow.optimal_flow()
        if value >= inf:
            return np.inf, np.zeros(0, dtype=np.int64)
        side = np.asarray(flow.get_source_side_min_cut(), dtype=np.int64)
        return value / scale - lam * self.cap, side[side < n]

    def run_bound(self, forced_in: np.ndarray, forced_out: np.ndarray, steps: int = 14) -> tuple[float, np.ndarray]:
        """The best of the Lagrangian bounds tried, and a minimising set that fits the memory when
        one was met: lambda = 0, and when that set overflows the memory, a bisection on lambda
        (the dual is concave; mem(S'_lambda) - M is a supergradient)."""
        best, members = self.least_duration(forced_in, forced_out)
        self.last_lam = 0.0  # the multiplier of the best value (the pair cuts reuse it)
        if not np.isfinite(best) or self.bytes[members].sum() <= self.cap:
            return best, members
        lo, hi = 0.0, max(self.time.sum() + self.t_cost.sum(), 1e-12) / max(self.cap, 1.0)
        for _ in range(60):  # grow hi until its set fits
            val, fit = self.least_duration(forced_in, forced_out, hi)
            if val > best:
                best, self.last_lam = val, hi
            if self.bytes[fit].sum() <= self.cap:
                members = fit
                break
            lo, hi = hi, 2 * hi
        for _ in range(steps):
            mid = 0.5 * (lo + hi)
            val, mid_set = self.least_duration(forced_in, forced_out, mid)
            if val > best:
                best, self.last_lam = val, mid
            if self.bytes[mid_set].sum() > self.cap:
                lo = mid
            else:
                hi, members = mid, mid_set
        return best, members


@dataclass
class ClosureResult:
    bound: float
    path: list[int]
    runs: list[tuple[int, int, np.ndarray]]  # (j, i, cut set) of each accelerator run of the optimal cut
    cuts: int  # min-cut evaluations
    complete: bool  # False: stopped at the deadline (the bound is still valid)
    cost: np.ndarray | None = None  # the run costs at the end (valid lower bounds)
    lam: dict[tuple[int, int], float] | None = None  # multiplier of each run whose cut was computed


def closure_path_bound(problem: Problem, path: list[int], q: int = 1, deadline: float | None = None,
                       runcut: RunCut | None = None) -> ClosureResult:
    """The closure bound of one path (module docstring); valid for every feasible split with at
    most q subgraphs per accelerator."""
    r = len(path)
    if r == 0:
        return ClosureResult(0.0, path, [], 0, True)
    rc = runcut or RunCut(problem, q)
    cost, _ = run_costs(problem, path, True, q)
    cost = cost.copy()
    done = np.zeros((r, r), dtype=bool)
    sets: dict[tuple[int, int], np.ndarray] = {}
    lams: dict[tuple[int, int], float] = {}
    first, last = _reach_positions(problem, path)
    cpu = cpu_time(problem)[np.asarray(path)]
    runs = max(0, min(problem.k * q, r))
    cuts = 0
    while True:
        value, chosen = _dp(cost, cpu, runs)
        todo = [(j, i) for j, i in chosen if not done[j, i]]
        if not todo or (deadline is not None and time.monotonic() >= deadline):
            found = [(j, i, sets.get((j, i), np.zeros(0, dtype=np.int64))) for j, i in chosen]
            return ClosureResult(value, path, found, cuts, not todo, cost, lams)
        for j, i in todo:
            inside = (last >= j) & (first <= i)
            outside = (first < j) | (last > i)
            val, members = rc.run_bound(inside, outside)
            cuts += 1
            cost[j, i] = max(cost[j, i], val)
            done[j, i] = True
            sets[(j, i)] = members
            lams[(j, i)] = rc.last_lam


def _dp(cost: np.ndarray, cpu: np.ndarray, runs: int) -> tuple[float, list[tuple[int, int]]]:
    """Least completion time of the path (as latency_bounds.path_min_latency) and its runs (j, i)."""
    r = cpu.size
    best = np.full((runs + 1, r + 1), np.inf)
    best[0, 0] = 0.0
    arg = np.full((runs + 1, r + 1), -1, dtype=np.int64)
    rows = np.arange(runs)
    for i in range(r):
        best[:, i + 1] = best[:, i] + cpu[i]
        if runs:
            cand = best[:runs, :i + 1] + cost[:i + 1, i][None, :]
            j = np.argmin(cand, axis=1)
            val = cand[rows, j]
            better = val < best[1:, i + 1]
            best[1:, i + 1] = np.where(better, val, best[1:, i + 1])
            arg[1:, i + 1] = np.where(better, j, -1)
    c = int(np.argmin(best[:, r]))
    value = float(best[c, r])
    chosen: list[tuple[int, int]] = []
    i = r
    while i > 0 and np.isfinite(value):
        j = int(arg[c, i])
        if j < 0:
            i -= 1
            continue
        chosen.append((j, i - 1))
        i, c = j, c - 1
    return value, chosen[::-1]


def latency_closure_bound(problem: Problem, q: int = 1, count: int = 12, top: int = 3,
                          deadline: float | None = None) -> ClosureResult:
    """The best closure bound over the ``top`` candidate paths of latency_bounds (ranked by their
    interval bound); never below the interval bound of those paths."""
    scored = []
    seen: set[tuple[int, ...]] = set()
    for path in candidate_paths(problem, count):
        if tuple(path) not in seen:
            seen.add(tuple(path))
            scored.append((path_min_latency(problem, path, True, q), path))
    scored.sort(key=lambda s: -s[0])
    rc = RunCut(problem, q)
    best: ClosureResult | None = None
    for _, path in scored[:max(1, top)]:
        res = closure_path_bound(problem, path, q, deadline, rc)
        if best is None or res.bound > best.bound:
            best = res
        if deadline is not None and time.monotonic() >= deadline:
            break
    return best if best is not None else ClosureResult(0.0, [], [], 0, True)


def closure_split(problem: Problem, result: ClosureResult) -> np.ndarray | None:
    """A split from the cut sets of the bound's runs: each set (with the nodes lying between its
    members, if free) on its own accelerator, everything else on a CPU; None when the evaluator
    rejects it (the sets ignore contiguity and, beyond the Lagrangian, memory)."""
    sets = [members for _, _, members in result.runs if members.size]
    if not sets or len(sets) > problem.k:
        return None
    split = np.full(problem.n, -1, dtype=np.int64)
    for d, members in enumerate(sets):
        free = members[split[members] == -1]
        split[free] = d
    for d in range(len(sets)):
        hull = _between(problem, split == d)
        split[hull & (split == -1)] = d
    ev = evaluate_latency(problem, split)
    return None if ev.violations else split


def _between(problem: Problem, inset: np.ndarray) -> np.ndarray:
    """Nodes that are both a descendant and an ancestor of members of ``inset``."""
    down = inset.copy()
    up = inset.copy()
    order = problem.topo_order.tolist()
    sptr, snbr, _ = problem.succ_ptr
    for u in order:
        if down[u]:
            down[snbr[sptr[u]:sptr[u + 1]]] = True
    pptr, pnbr, _ = problem.pred_ptr
    for u in reversed(order):
        if up[u]:
            up[pnbr[pptr[u]:pptr[u + 1]]] = True
    return down & up & ~inset
