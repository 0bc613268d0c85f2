"""Segment search: refine on consecutive time slices of a big schedule, one sub-problem at a time.

Why: at 200K nodes every move of refine and every window of the LNS pays passes over the whole
graph (a full evaluation is about a second, re-basing the incremental schedule half of one), so
in 540 s both gain 0.03-0.25% of the makespan per minute (bench/results_scale.md, "Session 9").
On graphs of 10K nodes the same refine gains several percent in its first slice. Here the
incumbent's schedule is cut into segments of about ``SEGMENT_NODES`` consecutive nodes in
(start, topological rank) order, and refine runs on a sub-problem that holds one segment only,
where its moves cost what they cost on a 10K-node graph.

The sub-problem of the nodes at positions [lo, hi) (the window, as in formulations/window_lns.py):

- the window's nodes with their times, bytes and the edges among them;
- per device d, a *release* node pinned to d whose time is how long after the window's first
  start T0 the last node before the window on d runs (the window's nodes on d queue behind it);
- per node u before the window with an edge into it, a zero-time *input* node pinned to u's
  device, with u's edges into the window and their transfer times (paid when the consumer is
  elsewhere). It queues behind its device's release node, so it delivers no earlier than the
  real input does (u finished by then) and at most the release's length later;
- a colocation group with a member outside the window pins its window members to that member's
  device; static capacity is what the nodes outside the window leave. Under the peak model the
  sub-problem has no capacity: a segment's peak depends on the whole schedule, so memory is
  judged there, after the splice (session 21).

Nodes after the window are left out: the sub-problem's makespan is when the segment's last node
ends, which is where the rest of the schedule resumes. So the sub-problem is an approximation of
the segment's share of the makespan, not a bound of anything; every answer is put back into the
whole schedule (before the window: unchanged; the window: the sub-problem's placement and order;
after it: the incumbent's devices and order), re-timed and checked by the evaluator on the
original graph, and kept only when the makespan falls and memory fits.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from formulations.window_lns import timed
from placement.evaluator import Evaluation, check, schedule_order
from placement.problem import Problem
from placement.solution import SolveOptions

from .refine import RefineSearch, RefineStats

SEGMENT_NODES = 10000  # refine's moves are cheap up to about this size (bench/results_scale.md)
SEGMENT_SECONDS = 20.0  # refine's time per segment (CNN 200K: 13 of 21 segments of 10K nodes improved in 20 s each)
SEGMENT_MIN_SECONDS = 4.0  # below this a segment's refine barely passes its set-up
# Smaller graphs are refined whole: at 50K nodes refine on the whole graph still gains most
# (bench/results_scale.md, session 8); at 200K its slices after the first gained 0.00%.
SEGMENT_GRAPH_NODES = 100000


@dataclass
class SegmentStats:
    """What a segment search did; ``best_makespan`` is live (progress lines read it)."""

    segments: int = 0
    improved: int = 0
    sub_evaluations: int = 0
    start_makespan: float = 0.0
    best_makespan: float | None = None
    sweeps: int = 0
    log: list[str] = field(default_factory=list)


@dataclass
class Segment:
    """A sub-problem and how its nodes map to the original: ``nodes[i]`` is the original index of
    sub-problem node ``offset + i`` (the window's nodes come after the release and input nodes)."""

    problem: Problem
    nodes: np.ndarray
    offset: int
    placement: np.ndarray  # the incumbent's, in the sub-problem's indices
    start: np.ndarray  # the incumbent's start times shifted by T0, in the sub-problem's indices


def segment_problem(problem: Problem, placement: np.ndarray, start: np.ndarray, finish: np.ndarray,
                    seq: np.ndarray, lo: int, hi: int, static: bool = True) -> Segment:
    """The sub-problem of the nodes at positions [lo, hi) of ``seq`` (the schedule's nodes in
    (start, topological rank) order); see the module doc. ``static=False``: no memory capacity
    (the peak model's search judges memory on the whole schedule after the splice)."""
    p = problem
    n, k = p.n, p.k
    win = seq[lo:hi]
    where = np.empty(n, dtype=np.int64)
    where[seq] = np.arange(n)
    before = where < lo
    in_win = (where >= lo) & (where < hi)
    t0 = float(start[win].min()) if win.size else 0.0
    release = np.zeros(k)
    np.maximum.at(release, placement[before], finish[before] - t0)
    e_in = np.flatnonzero(in_win[p.dst] & before[p.src])
    feeders = np.unique(p.src[e_in])
    e_ww = np.flatnonzero(in_win[p.src] & in_win[p.dst])
    # Sub-problem indices: K release nodes, then the input nodes, then the window.
    offset = k + feeders.size
    sub_of = np.full(n, -1, dtype=np.int64)
    sub_of[feeders] = k + np.arange(feeders.size)
    sub_of[win] = offset + np.arange(win.size)
    q_n = offset + win.size
    time_q = np.zeros(q_n)
    time_q[:k] = release
    time_q[offset:] = p.time[win]
    out_b = np.zeros(q_n)
    par_b = np.zeros(q_n)
    out_b[offset:] = p.out_bytes[win]
    par_b[offset:] = p.param_bytes[win]
    allowed: list[tuple[int, ...] | None] = [(d,) for d in range(k)]
    allowed += [(int(placement[u]),) for u in feeders.tolist()]
    colocate = np.full(q_n, -1, dtype=np.int64)
    names: list[str] = []
    group_of: dict[int, int] = {}
    for v in win.tolist():
        devs = p.allowed[v]
        g = int(p.colocate[v])
        if g >= 0:
            members = p.groups[g]
            out = members[~in_win[members]]
            if out.size:
                devs = (int(placement[out[0]]),)  # stays with the member outside the window
            else:
                if g not in group_of:
                    group_of[g] = len(names)
                    names.append(p.colocate_names[g] if g < len(p.colocate_names) else str(g))
                colocate[sub_of[v]] = group_of[g]
        allowed.append(devs)
    src = np.r_[sub_of[p.src[e_in]], sub_of[p.src[e_ww]]]
    dst = np.r_[sub_of[p.dst[e_in]], sub_of[p.dst[e_ww]]]
    comm = np.r_[p.comm[e_in], p.comm[e_ww]]
    need = p.param_bytes + p.out_bytes
    outside = np.bincount(placement[~in_win], weights=need[~in_win], minlength=k)
    memory = np.maximum(p.memory - outside, 0.0) if static else np.full(k, np.inf)
    ids = list(range(q_n))
    q = Problem(name=f"{p.name}[{lo}:{hi}]", ids=ids, names=[str(i) for i in ids], time=time_q, out_bytes=out_b,
                param_bytes=par_b, colocate=colocate, allowed=allowed, src=src.astype(np.int64),
                dst=dst.astype(np.int64), comm=comm.astype(float), memory=memory, device_names=list(p.device_names),
                colocate_names=names)
    pl_q = np.empty(q_n, dtype=np.int64)
    pl_q[:k] = np.arange(k)
    pl_q[k:offset] = placement[feeders]
    pl_q[offset:] = placement[win]
    st_q = np.empty(q_n)
    st_q[:k] = 0.0
    st_q[k:offset] = release[placement[feeders]]
    st_q[offset:] = start[win] - t0
    return Segment(q, win, offset, pl_q, st_q)


def splice(problem: Problem, base_order: list[list[int]], seq: np.ndarray, lo: int, hi: int, placement: np.ndarray,
           seg: Segment, sub_pl: np.ndarray, sub_start: np.ndarray) -> tuple[np.ndarray, list[list[int]]]:
    """The whole placement and per-device order with the window replaced by the sub-problem's
    answer: on each device the nodes before the window, the window's nodes in the sub-schedule's
    order, then the nodes after the window, as in the incumbent."""
    n = problem.n
    where = np.empty(n, dtype=np.int64)
    where[seq] = np.arange(n)
    new_pl = placement.copy()
    new_pl[seg.nodes] = sub_pl[seg.offset:]
    starts = sub_start[seg.offset:]
    rank = problem.topo_rank[seg.nodes]
    by_time = seg.nodes[np.lexsort((rank, starts))]
    order: list[list[int]] = []
    for d, nodes in enumerate(base_order):
        a = np.asarray(nodes, dtype=np.int64)
        pos = where[a] if a.size else a
        mine = by_time[new_pl[by_time] == d]
        order.append(np.r_[a[pos < lo], mine, a[pos >= hi]].astype(np.int64).tolist())
    return new_pl, order


class SegmentSearch:
    """Refine on one segment of the schedule at a time (module doc), sweeping from the start of
    the schedule to its end and again, until a deadline; resumable like the other searches
    (``run`` again later, ``adopt`` a better schedule found meanwhile)."""

    def __init__(self, problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions, *,
                 memory_model: str = "static", size: int = SEGMENT_NODES, seconds: float = SEGMENT_SECONDS,
                 stats: SegmentStats | None = None, say: Callable[[str], None] | None = None) -> None:
        if memory_model not in ("static", "peak"):
            raise ValueError(f"segment search: unknown memory model {memory_model!r}")
        self.p, self.opts, self.mm, self.say = problem, opts, memory_model, say
        self.seconds = seconds
        self.splice_seconds = 0.0  # the longest re-timing of the whole schedule so far
        self.size = max(2, min(size, problem.n))
        self.stats = stats or SegmentStats()
        self.best_ev = check(problem, np.asarray(placement, dtype=np.int64), np.asarray(start, dtype=float),
                             memory_model, check_memory=False)
        self.stats.start_makespan = self.stats.best_makespan = self.best_ev.makespan
        self.pos = 0  # where the next segment starts, in the current schedule's (start, rank) order

    def adopt(self, ev: Evaluation) -> bool:
        """Go on from the schedule ``ev`` when it is shorter than this search's best."""
        if ev.makespan >= self.best_ev.makespan - 1e-9 * max(1.0, self.best_ev.makespan):
            return False
        self.best_ev = ev
        self.stats.best_makespan = ev.makespan
        return True

    def run(self, deadline: float) -> Evaluation:
        """Segments until ``deadline`` (time.monotonic()), each refined for ``seconds`` (less when
        the deadline is nearer, never under SEGMENT_MIN_SECONDS or ``seconds``), each one starting
        where the last ended; the best schedule so far."""
        p, st = self.p, self.stats
        while not self.opts.stop.is_set():
            left = deadline - time.monotonic() - self.splice_seconds
            if left < min(SEGMENT_MIN_SECONDS, self.seconds):
                break
            base = self.best_ev
            seq = schedule_order(p, base.start)
            lo = self.pos
            hi = min(p.n, lo + self.size)
            if p.n - hi < self.size // 4:
                hi = p.n  # no sliver at the end
            seg_end = time.monotonic() + min(self.seconds, left)
            seg = segment_problem(p, base.placement, base.start, base.finish, seq, lo, hi, static=self.mm == "static")
            rs = RefineStats()
            sub_opts = SolveOptions(memory_model="static", workers=self.opts.workers, seed=self.opts.seed + st.segments,
                                    stop=self.opts.stop)
            search = RefineSearch(seg.problem, seg.placement, sub_opts, memory_model="static", stats=rs,
                                  keep_order=True, start=seg.start)
            sub_pl, sub_ev = search.run(seg_end)
            st.segments += 1
            st.sub_evaluations += rs.evaluations
            gained = ""
            if rs.end_makespan < rs.start_makespan * (1 - 1e-12) and not self.opts.stop.is_set():
                on = base.placement[seq]
                order = [seq[on == d].tolist() for d in range(p.k)]
                new_pl, new_order = splice(p, order, seq, lo, hi, base.placement, seg, sub_pl, sub_ev.start)
                t = time.monotonic()
                ev = timed(p, new_pl, new_order, self.mm)
                ok = ev is not None and ev.makespan < base.makespan * (1 - 1e-12) and ev.feasible(p)
                self.splice_seconds = max(self.splice_seconds, time.monotonic() - t)  # with the peak, when measured
                if ok:
                    st.improved += 1
                    self.best_ev = ev
                    st.best_makespan = ev.makespan
                gained = (f" sub {rs.start_makespan:.6g} -> {rs.end_makespan:.6g}, whole "
                          f"{'-' if ev is None else f'{ev.makespan:.6g}'}{' kept' if ok else ''}")
            st.log.append(f"[{lo}:{hi}] {rs.evaluations} moves{gained}")
            if self.say is not None:
                self.say(f"segments: {st.log[-1]}")
            self.pos = 0 if hi >= p.n else hi
            if self.pos == 0:
                st.sweeps += 1
        return self.best_ev
