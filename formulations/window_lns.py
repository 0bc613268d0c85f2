"""Large-neighbourhood search with CP-SAT on the original graph, one time window at a time.

Why: on graphs of 10K+ nodes the exact model cannot take the whole graph, and a coarsened graph
is a caricature whose optimum maps back worse than the heuristics (issue 16). Here the exact
model works on the real nodes: most of the incumbent stays fixed, a window of a hundred or so
nodes is re-placed and re-sequenced optimally against its boundary, and the one evaluator
confirms the result before it is accepted.

The window is a slice of the incumbent's schedule: sort the nodes by (start, topological rank),
an order every edge and every device chain follows; the nodes at positions [lo, hi) are free,
those before keep their device, order and start times (nothing of theirs depends on the window),
those after keep their device and order and are re-timed. On each device the order is then:
the nodes before, the window's nodes in the model's order, the nodes after.

The model (CP-SAT, times scaled to integers): each window node chooses an allowed device
(colocation groups move together, or stay with members outside the window) and a start; one
NoOverlap per device; an input from a node before the window arrives at its fixed finish plus the
transfer time if the devices differ; a window node on device d starts after the last node before
the window on d; static memory per device within what the fixed nodes leave. The objective M is
the makespan the schedule will have: it is at least every finish in the window, every path into
the nodes after the window (a window node's finish, the transfer if the devices differ, then the
longest path from the entered node in the incumbent: that part of the schedule keeps its devices
and order, so its paths keep their lengths), and the same for the entries from before the window
(constants). With exact integer data M equals the evaluator's makespan of the answer; when one
window holds the whole graph the model is the exact problem (static memory).

Windows are centred on nodes of the critical path (where the makespan is decided), in a seeded
random order, or swept along it in time order, optionally freeing the devices of only part of the
window (``select``: docs/scale.md, "Which windows pay"); an improving window moves the search to
the new schedule. On big graphs, windows over the stretches of the bypass bound's chain where the
incumbent lost the most time against the bound take turns with them (:func:`loss_stretches`;
docs/scale.md, "Targeted windows").
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from ortools.sat.python import cp_model

from placement.bypass_bound import chain_bound
from placement.comm_bound import heads
from placement.evaluator import Evaluation, ScheduleError, check, evaluate, zero_time_first
from placement.incremental import IncrementalSchedule, TimingGraph, timing_graph
from placement.memory_path_bound import best_path
from placement.problem import Problem
from placement.solution import SolveOptions
from placement.window_boundary import window_boundary

from .common import retime
from .cpsolver import cp_solver
from .cpsolver import solve as run_cp

MODEL_UNITS = 1e8  # integer units per incumbent makespan when the data are not integers (1e6: rounding ate the gains)
# Targeted windows (session 21): stretches of the bypass bound's chain where the incumbent lost
# the most against the bound, each a window of at most TARGET_NODES nodes given TARGET_SECONDS of
# CP-SAT, taking turns with the critical windows (half the time each; all of it once the critical
# windows run dry: target_turn) on graphs of
# TARGET_GRAPH_NODES or more. From the 200K CNN's 600 s answer, 150 s of them alone: 400 nodes and
# 30 s -1.27, 600 and 30 s -1.05, 300 and 20 s -1.02 (bench/results_scale.md, session 21)
TARGET_NODES = 400
TARGET_SECONDS = 30.0
TARGET_GRAPH_NODES = 10_000
TARGET_MIN_LOSS = 1e-5  # of the makespan: stretches that lost less are not targeted
# Critical windows in a row that improved nothing, after which the targeted windows take every turn
# while stretches are left (session 22: in a 600 s run on the 200K CNN, 3 of 3 targeted windows
# improved, 17 of 176 critical ones)
CRITICAL_DRY = 10


def target_turn(spent_target: float, spent_critical: float, critical_fails: int) -> bool:
    """Whether the next window is a targeted one (when a stretch is left): the two kinds share
    the model time half and half, and once CRITICAL_DRY critical windows in a row improved
    nothing, the targeted windows take every turn until one of either kind improves."""
    return spent_target <= spent_critical or critical_fails >= CRITICAL_DRY


@dataclass
class LnsStats:
    """What an LNS run did; ``best_makespan`` is live (progress lines read it)."""

    windows: int = 0
    improved: int = 0
    closed: int = 0  # windows CP-SAT proved optimal within its limit
    targeted: int = 0  # windows on the stretches of the bound's chain that lost the most (WindowSearch._target)
    targets_improved: int = 0
    model_seconds: float = 0.0
    start_makespan: float = 0.0
    best_makespan: float | None = None
    stopped: str = ""
    log: list[str] = field(default_factory=list)


def schedule_positions(base: IncrementalSchedule) -> tuple[np.ndarray, np.ndarray]:
    """The base schedule's nodes in (start, tie) order (placement.evaluator.schedule_ties), and each
    node's position in it."""
    seq = np.lexsort((base.graph.ties(base.problem, base.start), base.start))
    where = np.empty(seq.size, dtype=np.int64)
    where[seq] = np.arange(seq.size)
    return seq, where


def window_at(base: IncrementalSchedule, center: int, size: int) -> tuple[int, int, np.ndarray]:
    """Positions [lo, hi) of about ``size`` nodes around ``center`` in the base schedule's
    (start, topological rank) order, and that order."""
    p = base.problem
    seq, where = schedule_positions(base)
    pos = int(where[center])
    lo = max(0, min(pos - size // 2, p.n - size))
    return lo, min(p.n, lo + size), seq


def loss_stretches(base: IncrementalSchedule, chain: np.ndarray, fin: np.ndarray, size: int,
                   used: np.ndarray | None = None) -> list[tuple[float, int, int]]:
    """Stretches of ``chain`` (the bypass bound's chain, placement/bypass_bound.py), as (loss, i, j)
    with chain positions i < j, largest loss first and disjoint: the nodes starting from S(p_i) to
    S(p_j) in ``base`` are at most ``size``, and the loss is how much more the base's finish times
    run ahead of the bound's ``fin`` (a lower bound on each chain node's finish in every schedule)
    for good at p_j (the least lead at p_j or after it) than at p_i: the time the base lost there
    against the bound. ``used`` (bool per chain position): positions no stretch may cover."""
    if len(chain) < 2:
        return []
    pos = schedule_positions(base)[1][chain]
    # The time lost up to p_j for good: the least gap at p_j or later (a chain node may finish late
    # against the bound inside a block and the block's end catch up).
    gap = np.minimum.accumulate((base.finish[chain] - fin)[::-1])[::-1]
    far = np.searchsorted(pos, pos + size, side="left") - 1  # the last j with pos[j] < pos[i] + size
    far = np.maximum(far, np.arange(len(chain)))
    loss = gap[far] - gap
    out: list[tuple[float, int, int]] = []
    used = np.zeros(len(chain), dtype=bool) if used is None else used.copy()
    for i in np.argsort(-loss, kind="stable").tolist():
        j = int(far[i])
        if j <= i or loss[i] <= 0 or used[i:j + 1].any():
            continue
        used[i:j + 1] = True
        out.append((float(loss[i]), i, j))
    return out


def _scale(values: list[np.ndarray], makespan: float) -> float:
    """1 when every value is an integer (the model is then exact), else MODEL_UNITS per makespan."""
    if all(np.all(np.abs(v - np.round(v)) <= 1e-9) for v in values):
        return 1.0
    return MODEL_UNITS / max(makespan, 1e-12)


def _hint_starts(g: TimingGraph, win: np.ndarray, dur: np.ndarray, pl: np.ndarray, finish_int: np.ndarray,
                 comm_int: np.ndarray, last_before: np.ndarray, in_win: np.ndarray) -> dict[int, int]:
    """Integer starts of the window's nodes on the incumbent's placement and order, earliest under
    the model's (rounded-up) data: a feasible solution of the window model to hint it with. ``g``:
    the timing graph (the problem's edges and the waits, placement.incremental.TimingGraph)."""
    d_of = {v: int(dur[i]) for i, v in enumerate(win.tolist())}
    ptr, nbr, eid = g.pred_ptr
    s: dict[int, int] = {}
    e: dict[int, int] = {}
    free = {d: (int(finish_int[b]) if b >= 0 else 0) for d, b in enumerate(last_before.tolist())}
    for v in win.tolist():  # in (start, rank) order: inputs and device predecessors come first
        dv = int(pl[v])
        t = free[dv]
        for j in range(int(ptr[v]), int(ptr[v + 1])):
            u = int(nbr[j])
            c = int(comm_int[eid[j]]) if pl[u] != dv else 0
            t = max(t, (e[u] if in_win[u] else int(finish_int[u])) + c)
        s[v], e[v] = t, t + d_of[v]
        free[dv] = e[v]
    return s


def _hint_makespan(p: Problem, g: TimingGraph, win: np.ndarray, hint: dict[int, int], dur: np.ndarray, pl: np.ndarray,
                   up: Callable[[float], np.ndarray], tail: np.ndarray, first_after: np.ndarray, e_out: np.ndarray,
                   const_int: int) -> int:
    """The objective of the hinted solution (the model's M under the incumbent's placement)."""
    end = {v: hint[v] + int(dur[i]) for i, v in enumerate(win.tolist())}
    best = max([const_int] + list(end.values()))
    for j in e_out.tolist():
        u, w = int(g.src[j]), int(g.dst[j])
        c = int(up(g.comm[j])) if pl[u] != pl[w] else 0
        best = max(best, end[u] + c + int(up(p.time[w] + tail[w])))
    last: dict[int, int] = {}
    for v in win.tolist():
        last[int(pl[v])] = max(last.get(int(pl[v]), 0), end[v])
    for d, e in last.items():
        a = int(first_after[d])
        if a >= 0:
            best = max(best, e + int(up(p.time[a] + tail[a])))
    return best


def solve_window(problem: Problem, base: IncrementalSchedule, lo: int, hi: int, seq: np.ndarray, opts: SolveOptions,
                 memory_model: str = "static", info: dict | None = None,
                 movable: np.ndarray | None = None,
                 mask: np.ndarray | None = None) -> tuple[np.ndarray, list[list[int]], float] | None:
    """Re-place and re-sequence the nodes at positions [lo, hi) of ``seq`` (see the module doc).
    ``movable`` (bool per node, optional): window nodes outside it keep their device and are only
    re-sequenced (with their colocation group); a smaller model CP-SAT can close on a wider window.
    ``mask``: ``problem.allowed_mask()`` when the caller has it already.

    Returns (placement, per-device order, the model's makespan in time units: at least the makespan
    of :func:`timed` on that order) or None when the model found nothing within ``opts``' time."""
    p = problem
    pl, finish = base.placement, base.finish
    tail = base.tail
    k = p.k
    bd = window_boundary(base, lo, hi, seq)
    win, in_win, before, after = bd.win, bd.in_win, bd.before, bd.after
    last_before, first_after = bd.last_before, bd.first_after
    e_in, e_ww, e_out = bd.e_in, bd.e_ww, bd.e_out
    # The edges the model times: the graph's and the incumbent's waits (zero bytes, the wait's
    # latency across devices as their transfer), so each wait is a constraint of the model, as in
    # the evaluator; static memory counts nodes only, which waits do not change.
    tg = base.graph
    src, dst, comm = tg.src, tg.dst, tg.comm
    f = _scale([p.time[win], comm[np.r_[e_in, e_ww, e_out]], finish[before], tail[after], p.time[after]],
               base.makespan)

    def up(x: float | np.ndarray) -> np.ndarray:  # conservative integers: the model never promises too much
        return np.ceil(np.asarray(x, dtype=float) * f - 1e-9).astype(np.int64)

    const = bd.const  # the constant part of the makespan: paths that never touch the window
    dur = up(p.time[win])
    hint = _hint_starts(tg, win, dur, pl, up(finish), up(comm), last_before, in_win)
    rest_max = int(up(float((p.time[after] + tail[after]).max(initial=0.0)))) + int(up(float(comm.max(initial=0.0))))
    horizon = int(max(hint.values(), default=0)) + int(dur.sum()) + 1

    m = cp_model.CpModel()
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    s_var: dict[int, cp_model.IntVar] = {}
    e_var: dict[int, cp_model.IntVar] = {}
    intervals: list[list] = [[] for _ in range(k)]
    mask = p.allowed_mask() if mask is None else mask  # a caller's copy: 0.26 s per window at 200K nodes
    # Colocation: a group with a member outside the window stays on that member's device.
    pinned: dict[int, int] = {}
    group_rep: dict[int, int] = {}
    for v in win.tolist():
        g = int(p.colocate[v])
        if g >= 0:
            members = p.groups[g]
            out = members[~in_win[members]]
            if out.size:
                pinned[v] = int(pl[out[0]])
            elif movable is not None and not movable[members].all():
                pinned[v] = int(pl[v])
        elif movable is not None and not movable[v]:
            pinned[v] = int(pl[v])
    for i, v in enumerate(win.tolist()):
        s_var[v] = m.new_int_var(0, horizon, f"s{v}")
        e_var[v] = m.new_int_var(0, horizon, f"e{v}")
        m.add(e_var[v] == s_var[v] + int(dur[i]))
        devs = [pinned[v]] if v in pinned else [d for d in range(k) if mask[v, d]]
        lits = []
        for d in devs:
            on_d = m.new_bool_var(f"x{v}_{d}")
            x[v, d] = on_d
            lits.append(on_d)
            intervals[d].append(m.new_optional_interval_var(s_var[v], int(dur[i]), e_var[v], on_d, f"i{v}_{d}"))
            b = last_before[d]
            if b >= 0:
                m.add(s_var[v] >= int(up(finish[b]))).only_enforce_if(on_d)
        m.add_exactly_one(lits)
        g = int(p.colocate[v])
        if g >= 0 and v not in pinned:
            rep = group_rep.setdefault(g, v)
            if rep != v:
                for d in devs:
                    m.add(x[v, d] == x[rep, d])

    def lit(v: int, d: int) -> cp_model.IntVar | int:
        """v's placement literal for device d, or 0 when d is not one of v's devices."""
        return x.get((v, d), 0)

    for d in range(k):
        m.add_no_overlap(intervals[d])
    for j in e_in.tolist():
        u, v = int(src[j]), int(dst[j])
        t = int(up(finish[u]))
        c = int(up(comm[j]))
        m.add(s_var[v] >= t + c - c * lit(v, int(pl[u])))  # no transfer when v joins u's device
    for j in e_ww.tolist():
        u, v = int(src[j]), int(dst[j])
        c = int(up(comm[j]))
        if c == 0:
            m.add(s_var[v] >= e_var[u])
            continue
        same = []
        for d in range(k):
            if (u, d) in x and (v, d) in x:
                y = m.new_bool_var(f"y{j}_{d}")
                m.add_implication(y, x[u, d])
                m.add_implication(y, x[v, d])
                m.add_hint(y, int(pl[u] == d and pl[v] == d))
                same.append(y)
        m.add(s_var[v] >= e_var[u] + c - c * sum(same))
    mk = m.new_int_var(0, horizon + rest_max + int(up(const)) + 1, "M")
    m.add(mk >= int(up(const)))
    for v in win.tolist():
        m.add(mk >= e_var[v])
    for j in e_out.tolist():
        u, w = int(src[j]), int(dst[j])
        rest = int(up(p.time[w] + tail[w]))
        c = int(up(comm[j]))
        dw = int(pl[w])
        m.add(mk >= e_var[u] + c + rest - c * lit(u, dw))
    for d in range(k):
        a = first_after[d]
        if a >= 0:
            rest = int(up(p.time[a] + tail[a]))
            for v in win.tolist():
                if (v, d) in x:
                    m.add(mk >= e_var[v] + rest).only_enforce_if(x[v, d])
    if memory_model == "static":
        need = p.param_bytes + p.out_bytes
        gcd = max(1, int(np.gcd.reduce(np.ceil(need - 1e-9).astype(np.int64))))
        out_load = np.bincount(pl[~in_win], weights=need[~in_win], minlength=k)
        for d in range(k):
            if not math.isfinite(p.memory[d]):
                continue
            room = int(math.floor((p.memory[d] * (1 + 1e-12) - out_load[d]) / gcd))
            terms = [int(math.ceil(need[v] / gcd - 1e-9)) * x[v, d] for v in win.tolist() if (v, d) in x and need[v] > 0]
            if terms:
                m.add(sum(terms) <= room)
    m.minimize(mk)
    m.add_hint(mk, _hint_makespan(p, tg, win, hint, dur, pl, up, tail, first_after, e_out, const_int=int(up(const))))
    where_w = {v: i for i, v in enumerate(win.tolist())}
    for v in win.tolist():  # hint: the incumbent, re-timed with the model's integers
        m.add_hint(s_var[v], int(hint[v]))
        m.add_hint(e_var[v], int(hint[v]) + int(dur[where_w[v]]))
        for d in range(k):
            if (v, d) in x:
                m.add_hint(x[v, d], int(pl[v] == d))
    solver = cp_solver(opts)
    status = run_cp(solver, m, opts)
    if info is not None:
        info["optimal"] = status == cp_model.OPTIMAL
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    new_pl = pl.copy()
    for (v, d), lit_v in x.items():
        if solver.boolean_value(lit_v):
            new_pl[v] = d
    s_win = {v: solver.value(s_var[v]) for v in win.tolist()}
    rank = zero_time_first(p, tg.rank)  # the model timed a zero-time node at a busy one's start before it
    order: list[list[int]] = []
    for d in range(k):
        nodes = np.asarray(base.order[d], dtype=np.int64)
        mine = [v for v in win.tolist() if new_pl[v] == d]
        mine.sort(key=lambda v: (s_win[v], rank[v]))
        order.append(nodes[before[nodes]].tolist() + mine + nodes[after[nodes]].tolist() if nodes.size else mine)
    return new_pl, order, solver.objective_value / f


def timed(problem: Problem, placement: np.ndarray, order: list[list[int]], memory_model: str,
          waits: list[tuple[int, int]] | None = None) -> Evaluation | None:
    """The schedule running each device's positive-time nodes in ``order`` as early as possible
    (zero-time nodes start when their inputs arrive: the contract lets them coincide with anything),
    measured by the evaluator's checker; None if the order contradicts the graph.

    With ``waits``: the evaluator's ordered schedule of the whole ``order`` with the waits (zero-time
    nodes then keep their place in the order too), None if they close a cycle with it."""
    if waits:
        try:
            return evaluate(problem, placement, order=order, memory_model=memory_model, waits=waits)
        except ScheduleError:
            return None
    busy = []
    for seq in order:
        nodes = np.asarray(seq, dtype=np.int64)
        busy.append(nodes[problem.time[nodes] > 0].tolist())
    start = retime(problem, placement, busy)
    return None if start is None else check(problem, placement, start, memory_model, check_memory=False)


SELECT = ("critical", "sweep", "focus", "pair")


def _movable_near(p: Problem, crit: np.ndarray) -> np.ndarray:
    """Critical nodes and their graph neighbours: where a device change can shorten the path."""
    mov = np.zeros(p.n, dtype=bool)
    mov[crit] = True
    on_src, on_dst = mov[p.src], mov[p.dst]
    mov[p.dst[on_src]] = True
    mov[p.src[on_dst]] = True
    return mov


def _movable_pair(p: Problem, base: IncrementalSchedule, window: np.ndarray, crit: np.ndarray) -> np.ndarray:
    """The window's nodes on the two devices that exchange the most transfer time along the
    critical path inside the window (critical nodes and neighbours when no critical transfer)."""
    inside = np.zeros(p.n, dtype=bool)
    inside[window] = True
    is_crit = np.zeros(p.n, dtype=bool)
    is_crit[crit] = True
    pl = base.placement
    e = np.flatnonzero(inside[p.src] & inside[p.dst] & is_crit[p.src] & is_crit[p.dst] & (pl[p.src] != pl[p.dst]))
    if e.size == 0:
        return _movable_near(p, crit)
    a, b = np.minimum(pl[p.src[e]], pl[p.dst[e]]), np.maximum(pl[p.src[e]], pl[p.dst[e]])
    load = np.bincount(a * p.k + b, weights=p.comm[e], minlength=p.k * p.k)
    pair = int(np.argmax(load))
    return (pl == pair // p.k) | (pl == pair % p.k)


class WindowSearch:
    """Window LNS that can stop at a deadline and go on later, possibly from another schedule:
    the pipeline alternates it with refine (solvers/pipeline.py, "search") and hands it the
    incumbent whenever refine found a better one. State: the base schedule, the window size, the
    critical nodes already tried since the last improvement, the seeded random stream."""

    def __init__(self, problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions, *,
                 memory_model: str = "static", window: int = 300, window_seconds: float = 5.0,
                 stats: LnsStats | None = None, say: Callable[[str], None] | None = None,
                 select: str = "critical", waits: list[tuple[int, int]] | None = None,
                 target_seconds: float | None = None) -> None:
        if select not in SELECT:
            raise ValueError(f"lns: select must be one of {SELECT}, got {select!r}")
        self.p, self.opts, self.memory_model = problem, opts, memory_model
        self.window_seconds, self.select, self.say = window_seconds, select, say
        self.stats = stats or LnsStats()
        self.rng = np.random.default_rng(opts.seed)
        self.base = IncrementalSchedule(problem, placement, start, timing_graph(problem, waits))
        self.best_ev = timed(problem, self.base.placement, self.base.order, memory_model, self.waits)
        self.stats.start_makespan = self.stats.best_makespan = self.best_ev.makespan
        self.size = min(window, problem.n)
        self.tried: set[int] = set()
        self.mask = problem.allowed_mask()  # (n, K): the same for every window
        if target_seconds is None:
            target_seconds = TARGET_SECONDS if problem.n >= TARGET_GRAPH_NODES else 0.0
        self.target_seconds = target_seconds
        # The bound's chain and its finish floors (computed at the first targeted window), the
        # stretches still to try (None: to be ranked again on the current base) and the chain
        # positions already covered by a targeted window.
        self.chain: np.ndarray | None = None
        self.fin: np.ndarray | None = None
        self.targets: list[tuple[float, int, int]] | None = None
        self.covered: np.ndarray | None = None
        self.spent = {"target": 0.0, "critical": 0.0}  # model seconds of each kind: they take turns
        self.critical_fails = 0  # critical windows in a row that improved nothing (target_turn)

    @property
    def waits(self) -> list[tuple[int, int]] | None:
        """The waits every window keeps (model constraints, and the evaluator's with the answer's order)."""
        return self.base.graph.wait_list

    def adopt(self, ev: Evaluation, waits: list[tuple[int, int]] | None = None) -> bool:
        """Continue from the schedule ``ev`` (placement and start times, meeting ``waits``, which the
        search keeps from here on) when it is shorter than the search's own best; True if adopted."""
        eps = 1e-9 * max(1.0, self.best_ev.makespan)
        if ev.makespan >= self.best_ev.makespan - eps:
            return False
        if (waits or self.waits is not None) and (list(map(tuple, waits)) if waits else None) != self.waits:
            self.base = IncrementalSchedule(self.p, ev.placement, ev.start, timing_graph(self.p, waits))
        else:
            self.base.reset(ev.placement, ev.start)
        self.best_ev = ev
        self.stats.best_makespan = ev.makespan
        self.tried.clear()
        self.critical_fails = 0
        self.targets = None
        return True

    def _target(self) -> tuple[int, int, np.ndarray] | None:
        """The next targeted window (positions [lo, hi) of the base's (start, rank) order and that
        order): the untried stretch of the bound's chain with the largest loss, if any is left."""
        base = self.base
        if self.chain is None:
            chain = best_path(self.p, self.p.time, np.zeros(self.p.m))
            detail: dict[str, list[float]] = {}
            chain_bound(self.p, chain, heads(self.p), heads(self.p, reverse=True), detail)
            self.chain, self.fin = np.asarray(chain, dtype=np.int64), np.asarray(detail["fin"], dtype=float)
            self.covered = np.zeros(len(chain), dtype=bool)
        assert self.fin is not None and self.covered is not None
        if self.targets is None:
            floor = TARGET_MIN_LOSS * base.makespan
            ranked = loss_stretches(base, self.chain, self.fin, TARGET_NODES, self.covered)
            self.targets = [t for t in ranked if t[0] > floor][::-1]  # popped from the end: largest first
        if not self.targets:
            return None
        _, i, j = self.targets.pop()
        self.covered[i:j + 1] = True
        seq, where = schedule_positions(base)
        lo, hi = int(where[self.chain[i]]), int(where[self.chain[j]]) + 1
        return lo, min(hi, lo + TARGET_NODES), seq

    def run(self, deadline: float) -> Evaluation:
        """Try windows until ``deadline`` (time.monotonic()); the best schedule so far."""
        p, opts, stats, base = self.p, self.opts, self.stats, self.base
        while True:
            left = deadline - time.monotonic()
            if opts.stop.is_set() or left < 0.5:
                stats.stopped = "stopped" if opts.stop.is_set() else "deadline"
                break
            eps = 1e-9 * max(1.0, base.makespan)
            turn = target_turn(self.spent["target"], self.spent["critical"], self.critical_fails)
            target = self._target() if turn and self.target_seconds > 0 and left > 2 * self.window_seconds else None
            if target is not None:
                lo, hi, seq = target
                t = time.monotonic()
                left = deadline - t  # the first call computes the bound's chain (seconds at 200K nodes)
                if opts.stop.is_set() or left < 0.5:
                    continue
                sub = SolveOptions(memory_model=self.memory_model, time_limit=min(self.target_seconds, max(0.1, left - 0.3)),
                                   workers=opts.workers, seed=opts.seed, stop=opts.stop)
                got = solve_window(p, base, lo, hi, seq, sub, self.memory_model, {}, None, self.mask)
                stats.model_seconds += time.monotonic() - t
                self.spent["target"] += time.monotonic() - t
                stats.windows += 1
                stats.targeted += 1
                if got is not None and not opts.stop.is_set() and self._take(got, hi - lo):
                    stats.targets_improved += 1
                continue
            crit = np.flatnonzero(base.start + p.time + base.tail >= base.makespan - eps)
            fresh = [int(v) for v in crit if int(v) not in self.tried]
            if not fresh:
                if self.size >= p.n:
                    stats.stopped = "converged"
                    break
                self.tried.clear()
                self.size = min(p.n, self.size * 2)  # every critical window tried: widen
                continue
            if self.select == "sweep":
                center = min(fresh, key=lambda v: (base.start[v], p.topo_rank[v]))
            else:
                center = fresh[int(self.rng.integers(len(fresh)))]
            lo, hi, seq = window_at(base, center, self.size)
            if self.select == "sweep" and hi < p.n:  # the next window starts half-way through this one
                self.tried.update(int(v) for v in seq[lo:(lo + hi) // 2 + 1])
            else:
                self.tried.update(int(v) for v in seq[lo:hi])
            t = time.monotonic()
            sub = SolveOptions(memory_model=self.memory_model, time_limit=min(self.window_seconds, max(0.1, left - 0.3)),
                               workers=opts.workers, seed=opts.seed, stop=opts.stop)
            info: dict = {}
            movable = _movable_near(p, crit) if self.select == "focus" else \
                _movable_pair(p, base, seq[lo:hi], crit) if self.select == "pair" else None
            got = solve_window(p, base, lo, hi, seq, sub, self.memory_model, info, movable, self.mask)
            stats.model_seconds += time.monotonic() - t
            self.spent["critical"] += time.monotonic() - t
            stats.windows += 1
            stats.closed += int(info.get("optimal", False))
            if got is None:
                self.critical_fails += 1
                continue
            if opts.stop.is_set():  # re-timing the whole graph (about a second at 200K nodes) would delay the stop
                stats.stopped = "stopped"
                break
            if not self._take(got, hi - lo):
                self.critical_fails += 1
        return self.best_ev

    def _take(self, got: tuple[np.ndarray, list[list[int]], float], nodes: int) -> bool:
        """Keep a window's answer when the evaluator's schedule of it is shorter and fits."""
        p, stats = self.p, self.stats
        eps = 1e-9 * max(1.0, self.base.makespan)
        new_pl, order, promised = got
        if promised >= self.best_ev.makespan - eps:  # the model's makespan bounds the re-timed one from above
            return False
        ev = timed(p, new_pl, order, self.memory_model, self.waits)
        if ev is None or ev.makespan >= self.best_ev.makespan - eps or not ev.feasible(p):
            return False  # the makespan first: under the peak model the fit measures the peak
        stats.improved += 1
        self.best_ev = ev
        stats.best_makespan = ev.makespan
        self.base.reset(ev.placement, ev.start)
        self.tried.clear()
        self.critical_fails = 0
        self.targets = None  # ranked again on the new schedule
        if self.say is not None:
            self.say(f"lns: window {stats.windows} ({nodes} nodes) -> {ev.makespan:.6g}")
        return True


def lns(problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions, *, deadline: float,
        memory_model: str = "static", window: int = 300, window_seconds: float = 5.0, stats: LnsStats | None = None,
        say: Callable[[str], None] | None = None, select: str = "critical",
        waits: list[tuple[int, int]] | None = None) -> tuple[np.ndarray, Evaluation]:
    """Improve the schedule (``placement``, ``start``: a valid schedule of it) window by window
    until ``deadline`` (time.monotonic()). Returns the best placement and its evaluation (the
    schedule of :func:`timed`), never worse than that of the input's order. Deterministic given
    ``opts.seed`` and enough time per window.

    ``select``: "critical" centres each window on a random untried critical node; "sweep" walks
    the critical nodes in time order; "focus" is "critical" with only the critical nodes and their
    neighbours free to change device (the rest of the window is re-sequenced only); "pair" frees
    the devices of only the two devices exchanging the most critical transfer time in the window.

    ``waits`` (met by ``start``): control dependencies every window keeps, as model constraints
    and in the evaluator's schedule of the answer (docs/peak.md, "Waits in the search")."""
    search = WindowSearch(problem, placement, start, opts, memory_model=memory_model, window=window,
                          window_seconds=window_seconds, stats=stats, say=say, select=select, waits=waits)
    best = search.run(deadline)
    return best.placement, best
