"""List-scheduling baselines with a memory check: ETF, HEFT, and Baechi's m-ETF.

- ``etf`` (Hwang et al. 1989, Earliest Time First): at every step, among all ready nodes and all
  devices, start the pair with the earliest possible start; ties go to the larger bottom level.
- ``m-etf`` (Baechi, Jeon et al. 2020): ETF whose memory check also charges, on the receiving
  device, every input tensor that arrives from another device (Baechi's accounting); the static
  model does not count those, so m-ETF is the more conservative of the two. When that accounting
  leaves some node with no device, m-ETF reruns with the static accounting (info["accounting"]
  says which one answered), i.e. it then equals ETF. Under the peak model it equals ETF (the exact
  tracking below charges received tensors for as long as they are held).
- ``readers-first`` (this project, session 38): ETF in which, on the device of a source that is slow
  to copy (heuristics/exclusive.py: an embedding read at every step of an unrolled loop), the
  source's readers go before any other ready node until a copy could have arrived elsewhere; the
  rest is ETF. It gives up at once on graphs without such a source.
- ``heft`` (Topcuoglu et al. 2002): nodes by non-increasing upward rank (bottom level with comm;
  devices are identical so the mean costs are the costs), each to the device where it finishes
  earliest, filling idle gaps (insertion policy; the gap search looks at most ``GAP_SCAN``
  intervals past the ready time, then appends).

The memory check (all three): a node, or a colocation group at its first member, goes only to an
allowed device whose memory stays within capacity x (1 - opts.reserve). Static model: params +
outputs of its nodes. Peak model: the device's live bytes over the schedule being built
(heuristics.peak_tracker: a tensor allocated when produced or received, freed after its last
consumer on the device), which is exactly what the evaluator measures for the returned order; if
that leaves a node with no device, the method reruns with the accountings it used before
(static + received tensors, then static) and the evaluator judges (see :func:`accountings`).
A node that fits nowhere ends the method with status ``unknown``.
Every method returns the per-device order it built; the evaluator schedules that order, so the
reported makespan is the evaluator's (never later than the list schedule's own times).
"""
from __future__ import annotations

import bisect
import heapq
import time

from typing import Callable

import numpy as np
from typing import NamedTuple

from placement.evaluator import evaluate
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .exclusive import COPY_OVER_READ, MIN_READERS, Exclusive, exclusive_sources
from .peak_tracker import PeakTracker
from .ready import data_ready

from .pardnn.graph import Graph, bottom_levels

GAP_SCAN = 64


def allowed_devices(problem: Problem, mask: np.ndarray, group_dev: dict[int, int], v: int) -> np.ndarray:
    """The devices node ``v`` may take: its group's device once a member is placed, else its mask."""
    g = int(problem.colocate[v])
    if g >= 0 and g in group_dev:
        ok = np.zeros(problem.k, dtype=bool)
        ok[group_dev[g]] = True
        return ok
    return mask[v]


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
        return allowed_devices(self.p, self.mask, self.group_dev, v)

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

    def fits(self, v: int, d: int, dev: np.ndarray, s: float = 0.0, f: float = 0.0) -> bool:
        return self.used[d] + self.cost(v, d, dev) <= self.cap[d] * (1 + 1e-12) + 1e-9

    def place(self, v: int, d: int, dev: np.ndarray, s: float = 0.0, f: float = 0.0) -> None:
        self.used[d] += self.cost(v, d, dev)
        g = int(self.p.colocate[v])
        if g >= 0:
            self.group_dev.setdefault(g, d)
        if self.count_inputs:
            ptr, nbr, _ = self.pred
            for u in nbr[ptr[v]:ptr[v + 1]].tolist():
                if dev[u] != d:
                    self.received.add((u, d))


class _PeakMemory:
    """The peak model's exact accounting (heuristics.peak_tracker) behind _Memory's interface:
    whether v fits on d depends on when it runs, [s, f)."""

    def __init__(self, problem: Problem, reserve: float, headroom: float = 0.0) -> None:
        self.p = problem
        self.tracker = PeakTracker(problem, problem.memory * (1.0 - reserve))
        self.mask = problem.allowed_mask()
        self.free_choice = self.mask.sum(axis=1) > 1
        self.group_dev = self.tracker.group_dev
        self.soft = self.tracker.cap * (1.0 - headroom)
        self.headroom = headroom

    def allowed(self, v: int) -> np.ndarray:
        return allowed_devices(self.p, self.mask, self.group_dev, v)

    def fits(self, v: int, d: int, dev: np.ndarray, s: float = 0.0, f: float = 0.0) -> bool:
        """Within capacity; a node free to choose its device (not in a colocation group already
        placed, more than one device allowed) must also leave ``headroom`` x capacity, which the
        nodes that have no choice may use."""
        peak = self.tracker.peak_if(v, d, s, f)
        g = int(self.p.colocate[v])
        forced = not self.free_choice[v] or (g >= 0 and g in self.group_dev)
        cap = self.tracker.cap[d] if forced or self.headroom <= 0 else self.soft[d]
        return peak <= cap * (1 + 1e-12) + 1e-9

    def place(self, v: int, d: int, dev: np.ndarray, s: float = 0.0, f: float = 0.0) -> None:
        self.tracker.place(v, d, s, f)


def memory_book(problem: Problem, reserve: float, accounting: str) -> "_Memory | _PeakMemory":
    """The memory check of a list scheduler: "peak" (exact peak-model tracking over the schedule
    being built; "peak:H" keeps a headroom of H x capacity that only nodes without a choice of
    device may use, so that colocated members arriving late still fit), "inputs" (static +
    received tensors, Baechi's m-ETF) or "static"."""
    if accounting.startswith("peak"):
        return _PeakMemory(problem, reserve, float(accounting.partition(":")[2] or 0.0))
    return _Memory(problem, reserve, accounting == "inputs")


class Scheduled(NamedTuple):
    """A list schedule: device per node, per-device order, the first node that fitted nowhere
    (-1 when all were placed), and per device the peak the memory check accepted (peak
    accounting only, else None)."""

    dev: np.ndarray
    order: list[list[int]]
    bad: int
    accepted_peak: np.ndarray | None = None


def _accepted(mem: "_Memory | _PeakMemory") -> np.ndarray | None:
    return mem.tracker.peak() if isinstance(mem, _PeakMemory) else None


def _result(problem: Problem, opts: SolveOptions, name: str, dev: np.ndarray, order: list[list[int]], t0: float,
            info: dict) -> Solution:
    ev = evaluate(problem, dev, order=order, memory_model=opts.memory_model)
    if not ev.feasible(problem):
        over = ev.overflow(problem)
        return Solution(name, "unknown", reason=f"{name}: placement exceeds {opts.memory_model} memory by {over.tolist()} bytes per device",
                        seconds=time.monotonic() - t0, info={**info, "overflow": over.tolist(), "placement": dev})
    return Solution(name, "heuristic", placement=ev.placement, order=order, start=ev.start, objective=ev.makespan,
                    seconds=time.monotonic() - t0, info=info)


def _fail(name: str, problem: Problem, v: int, t0: float) -> Solution:
    return Solution(name, "unknown", reason=f"{name}: node {problem.ids[v]!r} fits on no allowed device with memory left",
                    seconds=time.monotonic() - t0)


class Stopped(Exception):
    """A stop was requested (Ctrl-C, SIGTERM, the time limit) while scheduling: no schedule."""


def _check(stop: Callable[[], bool] | None, count: int) -> None:
    if stop is not None and count % 256 == 0 and stop():
        raise Stopped


def etf_schedule(problem: Problem, reserve: float = 0.0, accounting: str = "static",
                 stop: Callable[[], bool] | None = None, first: Exclusive | None = None) -> Scheduled:
    """ETF with the memory check (see memory_book). Returns (device per node, per-device order,
    failed node or -1).

    ETF starts nodes in non-decreasing time and each device's memory profile is empty from its
    free time on, so a node that does not fit on a device at its candidate start will not fit there
    later either (buffers only grow): dropping it from that device's heaps loses nothing.
    Raises Stopped when ``stop()`` becomes true (checked every 256 nodes)."""
    n, k = problem.n, problem.k
    g = Graph.of(problem)
    bl = bottom_levels(g, problem.comm)
    rank = problem.topo_rank
    mem = memory_book(problem, reserve, accounting)
    dur = problem.time.tolist()
    seen: dict[tuple[int, int], tuple[int, float]] = {}  # (v, d) -> (device version, start) known to fit
    version = [0] * k

    def fits(v: int, d: int, s: float) -> bool:
        if seen.get((v, d)) == (version[d], s):
            return True
        if mem.fits(v, d, dev, s, s + dur[v]):
            seen[(v, d)] = (version[d], s)
            return True
        return False
    dev = np.full(n, -1, dtype=np.int64)
    finish = np.zeros(n)
    free = [0.0] * k
    arrive: list[list[tuple[float, float, float, int, int]]] = [[] for _ in range(k)]  # (ready at d, tier, -bl, rank, v)
    avail: list[list[tuple[float, float, int, int]]] = [[] for _ in range(k)]  # (tier, -bl, rank, v): ready by free[d]
    indeg = np.bincount(problem.dst, minlength=n).tolist()
    sp, sn, _ = problem.succ_ptr
    sp_l, sn_l = sp.tolist(), sn.tolist()
    order: list[list[int]] = [[] for _ in range(k)]

    def release(v: int) -> None:
        dr = data_ready(problem, v, dev, finish)
        ok = mem.allowed(v)
        for d in np.flatnonzero(ok).tolist():
            tier = first.tier(v, d, float(dr[d])) if first is not None else 0.0
            heapq.heappush(arrive[d], (float(dr[d]), tier, -float(bl[v]), int(rank[v]), v))

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
                _, tier, nb, r, v = heapq.heappop(A)
                heapq.heappush(B, (tier, nb, r, v))
            cand = None
            while B:
                tier, nb, r, v = B[0]
                if dev[v] >= 0 or not mem.allowed(v)[d] or not fits(v, d, free[d]):
                    heapq.heappop(B)
                    continue
                cand = (free[d], tier, nb, r, d, v)
                break
            if cand is None:
                while A:
                    s, tier, nb, r, v = A[0]
                    if dev[v] >= 0 or not mem.allowed(v)[d] or not fits(v, d, s):
                        heapq.heappop(A)
                        continue
                    cand = (s, tier, nb, r, d, v)
                    break
            if cand is not None and (best is None or cand < best):
                best = cand
        if best is None:
            stuck = [v for v in range(n) if dev[v] < 0 and indeg[v] == 0]
            return Scheduled(dev, order, (stuck[0] if stuck else 0), _accepted(mem))
        s, _, _, _, d, v = best
        # v stays in the other devices' heaps; dev[v] >= 0 discards it there lazily
        f = s + float(problem.time[v])
        mem.place(v, d, dev, s, f)
        version[d] += 1
        dev[v] = d
        finish[v] = f
        free[d] = f
        order[d].append(v)
        if first is not None:
            first.placed(v, d, f)
        done += 1
        for j in range(sp_l[v], sp_l[v + 1]):
            w = sn_l[j]
            indeg[w] -= 1
            if indeg[w] == 0:
                release(w)
    return Scheduled(dev, order, -1, _accepted(mem))


def insertion_schedule(problem: Problem, priority: np.ndarray, reserve: float = 0.0, insertion: bool = True,
                       pinned: np.ndarray | None = None, accounting: str = "static",
                       stop: Callable[[], bool] | None = None) -> Scheduled:
    """Schedule nodes in the given (topological) priority order, each on the device giving the
    earliest finish (gaps filled when ``insertion``) among those where it fits (memory_book; under
    the peak accounting a gap that does not fit falls back to the end of the device's schedule).
    ``pinned[v] >= 0`` forces a device when it is allowed and v fits there at the end of its
    schedule. Returns (device per node, per-device order, failed node or -1)."""
    n, k = problem.n, problem.k
    mem = memory_book(problem, reserve, accounting)
    timed = accounting.startswith("peak")
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
        t = float(dur[v])
        if pinned is not None and pinned[v] >= 0 and ok[pinned[v]]:
            p = int(pinned[v])
            s_end = max(float(dr[p]), ends[p][-1]) if ends[p] else float(dr[p])
            if mem.fits(v, p, dev, s_end, s_end + t):
                ok[:] = False
                ok[p] = True
        best = None
        for d in np.flatnonzero(ok).tolist():
            r = float(dr[d])
            S, E = starts[d], ends[d]
            pos = len(S)
            s = max(r, E[-1]) if E else r
            gap = None
            if insertion and S:
                # ends are sorted (disjoint, ordered intervals); scan after every interval ending by r,
                # which includes all of v's predecessors on d, even zero-time ones ending exactly at r
                i = bisect.bisect_right(E, r)
                prev_end = E[i - 1] if i > 0 else 0.0
                for j in range(i, min(len(S), i + GAP_SCAN)):
                    cand = max(r, prev_end)
                    if cand + t <= S[j]:
                        gap = (cand, j)
                        break
                    prev_end = E[j]
            if gap is not None and mem.fits(v, d, dev, gap[0], gap[0] + t):
                s, pos = gap
            elif (gap is not None and not timed) or not mem.fits(v, d, dev, s, s + t):
                continue  # the static check does not depend on the slot
            key = (s + t, d)
            if best is None or key < best[0]:
                best = (key, d, s, pos)
        if best is None:
            return Scheduled(dev, [], v, _accepted(mem))
        _, d, s, pos = best
        mem.place(v, d, dev, s, s + t)
        dev[v] = d
        finish[v] = s + t
        starts[d].insert(pos, s)
        ends[d].insert(pos, s + t)
        nodes[d].insert(pos, v)
    return Scheduled(dev, nodes, -1, _accepted(mem))


def upward_rank_order(problem: Problem) -> np.ndarray:
    """Nodes by non-increasing bottom level (with comm), ties in topological order: a valid
    topological order since a predecessor's bottom level is never smaller."""
    bl = bottom_levels(Graph.of(problem), problem.comm)
    return np.lexsort((problem.topo_rank, -bl))


def accountings(memory_model: str, inputs_first: bool) -> tuple[str, ...]:
    """The memory checks a list scheduler tries, in order, until one places every node.

    Peak model: the exact peak tracking first, then with 10% and 25% headroom for the nodes that
    have no choice of device (a colocation group whose first member filled its device); then, so
    that no answer found before the tracking was added is lost, static + received tensors (an upper bound of the peak) and the static check, whose
    answers the evaluator judges. Static model: received tensors first for m-ETF, then static."""
    if memory_model == "peak":
        return ("peak", "peak:0.1", "peak:0.25", "inputs", "static")
    return ("inputs", "static") if inputs_first else ("static",)


def run_with_accounting(schedule, problem: Problem, opts: SolveOptions, inputs_first: bool) -> tuple[np.ndarray, list[list[int]], int, dict]:
    """Run ``schedule(accounting)`` with each accounting of :func:`accountings` until one places
    every node (under the peak model, also until the evaluator finds the answer within capacity)."""
    tried = accountings(opts.memory_model, inputs_first)
    for acc in tried:
        dev, order, bad, peak = schedule(acc)
        if bad < 0:
            if acc.startswith("peak"):
                return dev, order, bad, {"accounting": acc, "accepted_peak": peak.tolist()}
            if acc == tried[-1] or opts.memory_model != "peak":
                return dev, order, bad, {"accounting": acc}
            if evaluate(problem, dev, order=order, memory_model="peak").feasible(problem):
                return dev, order, bad, {"accounting": acc}
    return dev, order, bad, {"accounting": tried[-1]}


def _stopped(name: str, t0: float) -> Solution:
    return Solution(name, "unknown", reason=f"{name}: stopped before its schedule was complete", seconds=time.monotonic() - t0)


def etf(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    try:
        dev, order, bad, info = run_with_accounting(
            lambda acc: etf_schedule(problem, opts.reserve, acc, stop=opts.stop.is_set),
            problem, opts, False)
    except Stopped:
        return _stopped("etf", t0)
    if bad >= 0:
        return _fail("etf", problem, bad, t0)
    return _result(problem, opts, "etf", dev, order, t0, info)


def readers_first(problem: Problem, opts: SolveOptions) -> Solution:
    """ETF whose slow-to-copy sources' devices run those sources' readers first until a copy could
    arrive elsewhere (heuristics/exclusive.py); gives up at once on a graph without such a source."""
    t0 = time.monotonic()
    name = "readers-first"
    sources = exclusive_sources(problem)
    if not sources:
        return Solution(name, "unknown", seconds=time.monotonic() - t0,
                        reason=f"{name}: no source read by {MIN_READERS}+ nodes whose copy costs {COPY_OVER_READ:g}+ x their time")
    try:
        dev, order, bad, info = run_with_accounting(
            lambda acc: etf_schedule(problem, opts.reserve, acc, stop=opts.stop.is_set, first=Exclusive(sources)),
            problem, opts, False)
    except Stopped:
        return _stopped(name, t0)
    if bad >= 0:
        return _fail(name, problem, bad, t0)
    return _result(problem, opts, name, dev, order, t0, info | {"sources": len(sources)})


def m_etf(problem: Problem, opts: SolveOptions) -> Solution:
    t0 = time.monotonic()
    try:
        dev, order, bad, info = run_with_accounting(
            lambda acc: etf_schedule(problem, opts.reserve, acc, stop=opts.stop.is_set),
            problem, opts, True)
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
            lambda acc: insertion_schedule(problem, prio, opts.reserve, True, None, acc, stop=opts.stop.is_set),
            problem, opts, False)
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
