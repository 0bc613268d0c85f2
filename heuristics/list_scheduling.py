"""List-scheduling baselines with a memory check: ETF, HEFT, and Baechi's m-ETF.

- ``etf`` (Hwang et al. 1989, Earliest Time First): at every step, among all ready nodes and all
  devices, start the pair with the earliest possible start; ties go to the larger bottom level.
- ``m-etf`` (Baechi, Jeon et al. 2020): ETF whose memory check also charges, on the receiving
  device, every input tensor that arrives from another device (Baechi's accounting); the static
  model does not count those, so m-ETF is the more conservative of the two. When that accounting
  leaves some node with no device, m-ETF reruns with the static accounting (info
  ["input_accounting"] = False), i.e. it then equals ETF.
- ``heft`` (Topcuoglu et al. 2002): nodes by non-increasing upward rank (bottom level with comm;
  devices are identical so the mean costs are the costs), each to the device where it finishes
  earliest, filling idle gaps (insertion policy; the gap search looks at most ``GAP_SCAN``
  intervals past the ready time, then appends).

The memory check (all three): a node, or a colocation group at its first member, goes only to an
allowed device whose static memory (params + outputs of its nodes) stays within capacity x
(1 - opts.reserve). Under the peak model the check also charges received input tensors (as m-ETF
does): static + received bytes bound the Eq. 2 peak from above, so the answer is peak-feasible by
construction; if that leaves a node with no device, the method reruns with the static check and
the evaluator decides. A node that fits nowhere ends the method with status ``unknown``.
Every method returns the per-device order it built; the evaluator schedules that order, so the
reported makespan is the evaluator's (never later than the list schedule's own times).
"""
from __future__ import annotations

import bisect
import heapq
import time

from typing import Callable

import numpy as np

from placement.evaluator import evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .pardnn.graph import Graph, bottom_levels

GAP_SCAN = 64


class _Memory:
    """Static-memory bookkeeping with colocation groups reserved whole at their first member."""

    def __init__(self, problem: Problem, reserve: float, count_inputs: bool = False) -> None:
        self.p = problem
        self.cap = problem.memory * (1.0 - reserve)
        self.used = np.zeros(problem.k)
        self.need = problem.param_bytes + problem.out_bytes
        self.group_dev: dict[int, int] = {}
        self.group_need = [float(self.need[m].sum()) for m in problem.groups]
        self.mask = problem.allowed_mask()
        self.count_inputs = count_inputs
        self.received: set[tuple[int, int]] = set()
        self.pred = problem.pred_ptr

    def allowed(self, v: int) -> np.ndarray:
        g = int(self.p.colocate[v])
        if g >= 0 and g in self.group_dev:
            ok = np.zeros(self.p.k, dtype=bool)
            ok[self.group_dev[g]] = True
            return ok
        return self.mask[v]

    def cost(self, v: int, d: int, dev: np.ndarray) -> float:
        """Bytes placing v on d adds to d."""
        g = int(self.p.colocate[v])
        extra = 0.0
        if g < 0:
            extra = float(self.need[v])
        elif g not in self.group_dev:
            extra = self.group_need[g]
        if self.count_inputs:
            ptr, nbr, _ = self.pred
            for u in nbr[ptr[v]:ptr[v + 1]].tolist():
                if dev[u] != d and (u, d) not in self.received:
                    extra += float(self.p.out_bytes[u])
        return extra

    def fits(self, v: int, d: int, dev: np.ndarray) -> bool:
        return self.used[d] + self.cost(v, d, dev) <= self.cap[d] * (1 + 1e-12) + 1e-9

    def place(self, v: int, d: int, dev: np.ndarray) -> None:
        self.used[d] += self.cost(v, d, dev)
        g = int(self.p.colocate[v])
        if g >= 0:
            self.group_dev.setdefault(g, d)
        if self.count_inputs:
            ptr, nbr, _ = self.pred
            for u in nbr[ptr[v]:ptr[v + 1]].tolist():
                if dev[u] != d:
                    self.received.add((u, d))


def data_ready(problem: Problem, v: int, dev: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """Per device, when all of v's inputs could be there (same-device inputs pay no comm)."""
    ptr, nbr, eid = problem.pred_ptr
    a, b = ptr[v], ptr[v + 1]
    if a == b:
        return np.zeros(problem.k)
    u = nbr[a:b]
    f = finish[u]
    fc = f + problem.comm[eid[a:b]]
    on = dev[u][:, None] == np.arange(problem.k)[None, :]
    return np.where(on, f[:, None], fc[:, None]).max(axis=0)


def _result(problem: Problem, opts: SolveOptions, name: str, dev: np.ndarray, order: list[list[int]], t0: float,
            info: dict) -> Solution:
    ev = evaluate(problem, dev, order=order, memory_model=opts.memory_model)
    if not ev.feasible(problem):
        over = ev.overflow(problem)
        return Solution(name, "unknown", reason=f"{name}: placement exceeds {opts.memory_model} memory by {over.tolist()} bytes per device",
                        seconds=time.monotonic() - t0, info={**info, "overflow": over.tolist(), "placement": dev})
    return Solution(name, "heuristic", placement=ev.placement, order=order, objective=ev.makespan,
                    seconds=time.monotonic() - t0, info=info)


def _fail(name: str, problem: Problem, v: int, t0: float) -> Solution:
    return Solution(name, "unknown", reason=f"{name}: node {problem.ids[v]!r} fits on no allowed device with memory left",
                    seconds=time.monotonic() - t0)


class Stopped(Exception):
    """A stop was requested (Ctrl-C, SIGTERM, the time limit) while scheduling: no schedule."""


def _check(stop: Callable[[], bool] | None, count: int) -> None:
    if stop is not None and count % 256 == 0 and stop():
        raise Stopped


def etf_schedule(problem: Problem, reserve: float = 0.0, count_inputs: bool = False,
                 stop: Callable[[], bool] | None = None) -> tuple[np.ndarray, list[list[int]], int]:
    """ETF with the memory check. Returns (device per node, per-device order, failed node or -1).
    Raises Stopped when ``stop()`` becomes true (checked every 256 nodes)."""
    n, k = problem.n, problem.k
    g = Graph.of(problem)
    bl = bottom_levels(g, problem.comm)
    rank = problem.topo_rank
    mem = _Memory(problem, reserve, count_inputs)
    dev = np.full(n, -1, dtype=np.int64)
    finish = np.zeros(n)
    free = [0.0] * k
    arrive: list[list[tuple[float, float, int, int]]] = [[] for _ in range(k)]  # (ready at d, -bl, rank, v)
    avail: list[list[tuple[float, int, int]]] = [[] for _ in range(k)]  # (-bl, rank, v): ready by free[d]
    indeg = np.bincount(problem.dst, minlength=n).tolist()
    sp, sn, _ = problem.succ_ptr
    sp_l, sn_l = sp.tolist(), sn.tolist()
    order: list[list[int]] = [[] for _ in range(k)]

    def release(v: int) -> None:
        dr = data_ready(problem, v, dev, finish)
        ok = mem.allowed(v)
        for d in np.flatnonzero(ok).tolist():
            heapq.heappush(arrive[d], (float(dr[d]), -float(bl[v]), int(rank[v]), v))

    for v in range(n):
        if indeg[v] == 0:
            release(v)
    done = 0
    while done < n:
        _check(stop, done)
        best = None
        for d in range(k):
            A, B = arrive[d], avail[d]
            while A and A[0][0] <= free[d]:
                _, nb, r, v = heapq.heappop(A)
                heapq.heappush(B, (nb, r, v))
            cand = None
            while B:
                nb, r, v = B[0]
                if dev[v] >= 0 or not mem.allowed(v)[d] or not mem.fits(v, d, dev):
                    heapq.heappop(B)
                    continue
                cand = (free[d], nb, r, d, v)
                break
            if cand is None:
                while A:
                    s, nb, r, v = A[0]
                    if dev[v] >= 0 or not mem.allowed(v)[d] or not mem.fits(v, d, dev):
                        heapq.heappop(A)
                        continue
                    cand = (s, nb, r, d, v)
                    break
            if cand is not None and (best is None or cand < best):
                best = cand
        if best is None:
            stuck = [v for v in range(n) if dev[v] < 0 and indeg[v] == 0]
            return dev, order, (stuck[0] if stuck else 0)
        s, _, _, d, v = best
        # v stays in the other devices' heaps; dev[v] >= 0 discards it there lazily
        mem.place(v, d, dev)
        dev[v] = d
        f = s + float(problem.time[v])
        finish[v] = f
        free[d] = f
        order[d].append(v)
        done += 1
        for j in range(sp_l[v], sp_l[v + 1]):
            w = sn_l[j]
            indeg[w] -= 1
            if indeg[w] == 0:
                release(w)
    return dev, order, -1


def insertion_schedule(problem: Problem, priority: np.ndarray, reserve: float = 0.0, insertion: bool = True,
                       pinned: np.ndarray | None = None, count_inputs: bool = False,
                       stop: Callable[[], bool] | None = None) -> tuple[np.ndarray, list[list[int]], int]:
    """Schedule nodes in the given (topological) priority order, each on the device giving the
    earliest finish (gaps filled when ``insertion``). ``pinned[v] >= 0`` forces a device when it
    is allowed and has room. Returns (device per node, per-device order, failed node or -1)."""
    n, k = problem.n, problem.k
    mem = _Memory(problem, reserve, count_inputs)
    dev = np.full(n, -1, dtype=np.int64)
    finish = np.zeros(n)
    starts: list[list[float]] = [[] for _ in range(k)]
    ends: list[list[float]] = [[] for _ in range(k)]
    nodes: list[list[int]] = [[] for _ in range(k)]
    dur = problem.time
    for count, v in enumerate(priority.tolist()):
        _check(stop, count)
        dr = data_ready(problem, v, dev, finish)
        ok = mem.allowed(v).copy()
        if pinned is not None and pinned[v] >= 0 and ok[pinned[v]] and mem.fits(v, int(pinned[v]), dev):
            ok[:] = False
            ok[pinned[v]] = True
        best = None
        t = float(dur[v])
        for d in np.flatnonzero(ok).tolist():
            if not mem.fits(v, d, dev):
                continue
            r = float(dr[d])
            S, E = starts[d], ends[d]
            pos = len(S)
            s = max(r, E[-1]) if E else r
            if insertion and S:
                # ends are sorted (disjoint, ordered intervals); scan after every interval ending by r,
                # which includes all of v's predecessors on d, even zero-time ones ending exactly at r
                i = bisect.bisect_right(E, r)
                prev_end = E[i - 1] if i > 0 else 0.0
                for j in range(i, min(len(S), i + GAP_SCAN)):
                    cand = max(r, prev_end)
                    if cand + t <= S[j]:
                        s, pos = cand, j
                        break
                    prev_end = E[j]
            key = (s + t, d)
            if best is None or key < best[0]:
                best = (key, d, s, pos)
        if best is None:
            return dev, [], v
        _, d, s, pos = best
        mem.place(v, d, dev)
        dev[v] = d
        finish[v] = s + t
        starts[d].insert(pos, s)
        ends[d].insert(pos, s + t)
        nodes[d].insert(pos, v)
    return dev, nodes, -1


def upward_rank_order(problem: Problem) -> np.ndarray:
    """Nodes by non-increasing bottom level (with comm), ties in topological order: a valid
    topological order since a predecessor's bottom level is never smaller."""
    bl = bottom_levels(Graph.of(problem), problem.comm)
    return np.lexsort((problem.topo_rank, -bl))


def run_with_accounting(schedule, problem: Problem, opts: SolveOptions, inputs_first: bool) -> tuple[np.ndarray, list[list[int]], int, dict]:
    """Schedule with input-tensor accounting first when asked (m-ETF, or any list scheduler under
    the peak model, where static + received tensors bounds the peak), else or on failure with the
    static accounting."""
    if inputs_first:
        dev, order, bad = schedule(count_inputs=True)
        if bad < 0:
            return dev, order, bad, {"input_accounting": True}
    dev, order, bad = schedule(count_inputs=False)
    return dev, order, bad, {"input_accounting": False}


def _stopped(name: str, t0: float) -> Solution:
    return Solution(name, "unknown", reason=f"{name}: stopped before its schedule was complete", seconds=time.monotonic() - t0)


def etf(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    try:
        dev, order, bad, info = run_with_accounting(
            lambda count_inputs: etf_schedule(problem, opts.reserve, count_inputs, stop=opts.stop.is_set),
            problem, opts, opts.memory_model == "peak")
    except Stopped:
        return _stopped("etf", t0)
    if bad >= 0:
        return _fail("etf", problem, bad, t0)
    return _result(problem, opts, "etf", dev, order, t0, info)


def m_etf(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    try:
        dev, order, bad, info = run_with_accounting(
            lambda count_inputs: etf_schedule(problem, opts.reserve, count_inputs, stop=opts.stop.is_set), problem, opts, True)
    except Stopped:
        return _stopped("m-etf", t0)
    if bad >= 0:
        return _fail("m-etf", problem, bad, t0)
    return _result(problem, opts, "m-etf", dev, order, t0, info)


def heft(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    prio = upward_rank_order(problem)
    try:
        dev, order, bad, info = run_with_accounting(
            lambda count_inputs: insertion_schedule(problem, prio, opts.reserve, True, None, count_inputs, stop=opts.stop.is_set),
            problem, opts, opts.memory_model == "peak")
    except Stopped:
        return _stopped("heft", t0)
    if bad >= 0:
        return _fail("heft", problem, bad, t0)
    return _result(problem, opts, "heft", dev, order, t0, info)


def m_topo(problem: Problem, opts: SolveOptions) -> Solution:
    """Baechi's m-TOPO walks a topological order and fills each device up to total memory / K,
    which is exactly ``topo-fill`` in heuristics/baselines.py; this is that method under its name."""
    from .baselines import topo_fill

    sol = topo_fill(problem, opts)
    sol.method = "m-topo"
    sol.reason = sol.reason.replace("topo-fill", "m-topo")
    return sol
