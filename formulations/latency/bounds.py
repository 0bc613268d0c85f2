"""Lower bounds of the single-sample latency (Section 4 model), valid for every feasible split
with q >= 1 subgraphs per accelerator (docs/objectives.md, "Latency lower bounds", has the proof).

Interval path bound. Fix a path P = v_0..v_{r-1} of the graph and any feasible split. Cut P into
maximal runs of consecutive nodes in one unit (a subgraph, or a CPU node). For a run v_j..v_i in
subgraph S, write I(j, i) = {u : v_j ~> u ~> v_i} (~> = reachable, inclusive):
- S contains I(j, i) (S is contiguous), so mem(I) <= M, every node of I is supported, and S
  computes at least time(I);
- every tensor produced by an ancestor-or-self of v_{j-1} and read in I is read by S (its producer
  cannot be in S: S would then contain v_{j-1} by contiguity), and S starts after v_{j-1}'s output
  is in host memory;
- every tensor produced in I and read by a descendant-or-self of v_{i+1} is written by S (that
  reader is not in S, for the same reason);
- runs are distinct subgraphs (a subgraph holding two runs would not be contiguous), so a path has
  at most k*q accelerator runs;
- colocated nodes share an accelerator, so S's accelerator also holds the colocation partners of
  I's nodes (memory); with q = 1 they are in S itself (compute), and a run cannot hold some but
  not all of a group's path nodes (the others would be a second run in S).
Hence, with L(v) the time v's output is available, L(v_i) >= L(v_{j-1}) + in(j, i) + time(I(j, i))
+ out(j, i) for an accelerator run, and L(v_i) >= L(v_{i-1}) + cpu_latency(v_i) for a CPU node;
the least such chain over all ways to cut P (a DP over (end of run, runs used)) bounds the
latency. All the interval quantities are 2-D prefix sums over (index of the last path node that
reaches u, index of the first path node u reaches), so one path costs O(n + m + r^2 * k * q).
Counting only the path nodes (not the whole interval) and only the path's own tensors gives the
weaker classic path bound (``interval=False``). Any path is valid; the bound is the best over a
few candidate paths (longest by min(time, cpu_latency) plus transfer costs, and the longest
paths through the costliest tensors' edges).
"""
from __future__ import annotations

import numpy as np

from placement.objectives import cpu_time, node_bytes, supported, tensors
from placement.problem import Problem


def _reach_positions(problem: Problem, path: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(first, last): first[u] = least i with u ~> v_i (r if none); last[u] = greatest j with
    v_j ~> u (-1 if none)."""
    n, r = problem.n, len(path)
    first = np.full(n, r, dtype=np.int64)
    last = np.full(n, -1, dtype=np.int64)
    first[path] = np.arange(r)
    last[path] = np.arange(r)
    sptr, snbr, _ = problem.succ_ptr
    pptr, pnbr, _ = problem.pred_ptr
    order = problem.topo_order.tolist()
    for u in reversed(order):
        s = snbr[sptr[u]:sptr[u + 1]]
        if s.size:
            first[u] = min(first[u], int(first[s].min()))
    for u in order:
        p = pnbr[pptr[u]:pptr[u + 1]]
        if p.size:
            last[u] = max(last[u], int(last[p].max()))
    return first, last


def _stairs(groups: list[np.ndarray], values: np.ndarray, first: np.ndarray, last: np.ndarray, r: int,
            j_low: np.ndarray | None = None) -> np.ndarray:
    """S[j, i] = sum of values[g] over the groups g with a member u in I(j, i) (last[u] >= j and
    first[u] <= i), and j >= j_low[g] when given. Each group adds its value once, over the union
    of its members' quadrants (a staircase cut into disjoint rectangles)."""
    diff = np.zeros((r + 1, r + 1))
    for g, members in enumerate(groups):
        c = float(values[g])
        if c == 0.0:
            continue
        pts = sorted(((int(last[u]), int(first[u])) for u in members.tolist() if last[u] >= 0 and first[u] < r),
                     reverse=True)
        lo_bound = 0 if j_low is None else int(j_low[g])
        best_b = r
        for idx, (a, b) in enumerate(pts):
            best_b = min(best_b, b)
            a_next = pts[idx + 1][0] if idx + 1 < len(pts) else -1
            lo, hi = max(a_next + 1, lo_bound), a
            if lo <= hi:
                diff[lo, best_b] += c
                diff[hi + 1, best_b] -= c
    return np.cumsum(np.cumsum(diff, axis=0), axis=1)[:r, :r]


def _groups(problem: Problem) -> list[np.ndarray]:
    """Colocation groups (nodes that share an accelerator) and the other nodes alone."""
    col = problem.colocate
    alone = np.flatnonzero(col < 0)
    out = [np.array([v]) for v in alone.tolist()]
    if (col >= 0).any():
        order = np.argsort(col, kind="stable")
        order = order[col[order] >= 0]
        cuts = np.flatnonzero(np.diff(col[order])) + 1
        out += np.split(order, cuts)
    return out


def run_costs(problem: Problem, path: list[int], interval: bool = True, q: int | None = 1) -> tuple[np.ndarray, np.ndarray]:
    """(cost[j, i], feasible[j, i]) of the run v_j..v_i on one accelerator: the least time from
    L(v_{j-1}) (0 when j = 0) to L(v_i) as proved in the module docstring. With ``interval`` the
    run's subgraph holds I(j, i) and the colocation partners of its nodes (their memory always,
    their compute when q == 1: a partner shares the subgraph only when an accelerator has one)."""
    r = len(path)
    sup = supported(problem)
    acc = np.where(sup, problem.time, 0.0)
    size = node_bytes(problem)
    cap = float(problem.memory.max())
    tens = tensors(problem)
    if interval:
        first, last = _reach_positions(problem, path)
        groups = _groups(problem)
        singles = [np.array([v]) for v in range(problem.n)]
        g_mem = np.array([size[g].sum() for g in groups])
        g_bad = np.array([float((~sup[g]).any()) for g in groups])
        mem = _stairs(groups, g_mem, first, last, r)
        bad = _stairs(groups, g_bad, first, last, r)
        if q == 1:
            comp = _stairs(groups, np.array([acc[g].sum() for g in groups]), first, last, r)
        else:
            comp = _stairs(singles, acc, first, last, r)
        # reads: tensors made by an ancestor-or-self of v_{j-1}, read by a node of I(j, i)
        cons_of: list[list[int]] = [[] for _ in range(tens.producer.size)]
        for e, t in enumerate(tens.of_edge.tolist()):
            cons_of[t].append(int(problem.dst[e]))
        readers = [np.array(sorted(set(c)), dtype=np.int64) for c in cons_of]
        j_low = first[tens.producer] + 1
        comm = _stairs(readers, tens.cost, first, last, r, j_low)
        # writes: tensors made in I(j, i) (j <= last[p], i >= first[p]) read by a descendant-or-self
        # of v_{i+1} (i + 1 <= max last[w] over readers w)
        diff = np.zeros((r + 1, r + 1))
        for t, (p, c) in enumerate(zip(tens.producer.tolist(), tens.cost.tolist())):
            lc = int(last[readers[t]].max())
            if c > 0 and last[p] >= 0 and first[p] < r and lc - 1 >= first[p]:
                a, b0, b1 = int(last[p]), int(first[p]), lc - 1
                diff[0, b0] += c
                diff[a + 1, b0] -= c
                diff[0, b1 + 1] -= c
                diff[a + 1, b1 + 1] += c
        comm = comm + np.cumsum(np.cumsum(diff, axis=0), axis=1)[:r, :r]
    else:  # only the path's own nodes and tensors
        pv = np.asarray(path)
        cs = np.concatenate([[0.0], np.cumsum(acc[pv])])
        ms = np.concatenate([[0.0], np.cumsum(size[pv])])
        bs = np.concatenate([[0.0], np.cumsum((~sup[pv]).astype(float))])
        comp = cs[None, 1:] - cs[:-1, None]
        mem = ms[None, 1:] - ms[:-1, None]
        bad = bs[None, 1:] - bs[:-1, None]
        eid = {(int(u), int(v)): e for e, (u, v) in enumerate(zip(problem.src, problem.dst))}
        cost = [float(tens.cost[tens.of_edge[eid[(path[i], path[i + 1])]]]) for i in range(r - 1)]
        comm = np.zeros((r, r))
        for j in range(1, r):
            comm[j, j:] += cost[j - 1]
        for i in range(r - 1):
            comm[:i + 1, i] += cost[i]
    upper = np.triu(np.ones((r, r), dtype=bool))
    feasible = upper & (mem <= cap * (1 + 1e-12) + 1e-9) & (bad < 0.5)
    if interval and q == 1:
        feasible &= ~_splits_colocated(problem, path)
    return np.where(feasible, comm + comp, np.inf), feasible


def _splits_colocated(problem: Problem, path: list[int]) -> np.ndarray:
    """[j, i]: the run v_j..v_i holds some but not all path nodes of a colocation group. With one
    subgraph per accelerator such a run is impossible: the group's other path nodes would share
    its subgraph, which would then hold two runs."""
    r = len(path)
    col = problem.colocate[np.asarray(path)]
    bad = np.zeros((r, r), dtype=bool)
    jj, ii = np.meshgrid(np.arange(r), np.arange(r), indexing="ij")
    for g in np.unique(col[col >= 0]).tolist():
        idx = np.flatnonzero(col == g)
        if idx.size < 2:
            continue
        lo, hi = int(idx[0]), int(idx[-1])
        whole = (jj <= lo) & (ii >= hi)
        for t in idx.tolist():
            bad |= (jj <= t) & (ii >= t) & ~whole
    return bad


def path_min_latency(problem: Problem, path: list[int], interval: bool = True, q: int | None = 1) -> float:
    """Least completion time of ``path`` over all ways to cut it into CPU nodes and accelerator
    runs (at most k*q runs; q None: any number of subgraphs per accelerator), a lower bound of
    the latency of every split with at most q subgraphs per accelerator."""
    r = len(path)
    if r == 0:
        return 0.0
    cost, _ = run_costs(problem, path, interval, q)
    max_runs = None if q is None else problem.k * q
    cpu = cpu_time(problem)[path]
    runs = r if max_runs is None else max(0, min(int(max_runs), r))
    # best[c, i]: least L(v_i) with c accelerator runs among v_0..v_i (index i+1; 0 = empty prefix)
    best = np.full((runs + 1, r + 1), np.inf)
    best[0, 0] = 0.0
    for i in range(r):
        best[:, i + 1] = best[:, i] + cpu[i]  # v_i on a CPU
        if runs:
            # v_j..v_i one run: from best[c-1, j] for every j <= i
            cand = best[:runs, :i + 1] + cost[:i + 1, i][None, :]
            best[1:, i + 1] = np.minimum(best[1:, i + 1], cand.min(axis=1))
    return float(best[:, r].min())


def candidate_paths(problem: Problem, count: int = 12) -> list[list[int]]:
    n = problem.n
    w = np.minimum(np.where(supported(problem), problem.time, np.inf), cpu_time(problem))
    tens = tensors(problem)
    ecost = tens.cost[tens.of_edge] if problem.m else np.zeros(0)
    order = problem.topo_order.tolist()
    pptr, pnbr, pedge = problem.pred_ptr
    sptr, snbr, sedge = problem.succ_ptr
    down = np.zeros(n)  # longest path weight ending at v (inclusive), by w + edge cost
    dpar = np.full(n, -1)
    for v in order:
        best, arg = 0.0, -1
        for j in range(pptr[v], pptr[v + 1]):
            u = int(pnbr[j])
            val = down[u] + ecost[pedge[j]]
            if val > best:
                best, arg = val, u
        down[v] = best + w[v]
        dpar[v] = arg
    up = np.zeros(n)  # longest path weight starting at v (inclusive)
    upar = np.full(n, -1)
    for v in reversed(order):
        best, arg = 0.0, -1
        for j in range(sptr[v], sptr[v + 1]):
            x = int(snbr[j])
            val = up[x] + ecost[sedge[j]]
            if val > best:
                best, arg = val, x
        up[v] = best + w[v]
        upar[v] = arg

    def through(u: int, v: int) -> list[int]:
        head = []
        x = u
        while x >= 0:
            head.append(x)
            x = int(dpar[x])
        tail = []
        x = v
        while x >= 0:
            tail.append(x)
            x = int(upar[x])
        return head[::-1] + tail

    paths = []
    end = int(np.argmax(down))
    p = []
    x = end
    while x >= 0:
        p.append(x)
        x = int(dpar[x])
    paths.append(p[::-1])
    for e in np.argsort(-ecost)[:count].tolist():
        paths.append(through(int(problem.src[e]), int(problem.dst[e])))
    return paths


def latency_lower_bound(problem: Problem, count: int = 12, q: int | None = 1,
                        interval: bool = True) -> tuple[float, list[int]]:
    """(bound, the path that gives it) for splits with at most ``q`` subgraphs per accelerator
    (None: any number)."""
    best, arg = 0.0, []
    seen: set[tuple[int, ...]] = set()
    for path in candidate_paths(problem, count):
        key = tuple(path)
        if key in seen:
            continue
        seen.add(key)
        val = path_min_latency(problem, path, interval, q)
        if val > best:
            best, arg = val, path
    return best, arg
