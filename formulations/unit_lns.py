"""Large-neighbourhood search over colocation units: CP-SAT re-places a few units and re-schedules
the whole graph, every other unit keeping its device.

Why: on a training graph each backward layer is colocated with its forward layer, so a unit spans
the whole schedule (forward early, backward late). The time-window LNS (formulations/window_lns.py)
frees a slice of the schedule and keeps every unit with a member outside the slice on its device,
so on a layer graph it can only re-sequence: on NASNet (457 nodes, peak model, 0.4 x the one-device
peak) it converged in 12 s without a gain. The full CP-SAT model, on the other hand, is too big to
search well at a few hundred nodes (NASNet: 8.81 -> 8.34 in 450 s, where refine reached 7.40).

Here a neighbourhood is a set of units (a run of consecutive layers in forward order around a
critical unit of the incumbent, or critical units scattered along the critical path): the model
is the CP-SAT scheduling model of formulations/cpsat.py built once without memory constraints,
with the placement of every other unit fixed and the incumbent as the hint, solved for a few
seconds. Its answer is only a candidate: it is re-timed with the real data in its device order
(`common.best_schedule`) and, under the peak model when that overflows, ordered by the
memory-aware scheduler (heuristics/memory_order.py); the evaluator's verdict decides, and only a
shorter schedule within the memory capacities replaces the incumbent. So memory never needs to be
in the model (on NASNet at 0.4 x the peak no device runs over 92% of its capacity in the answers
found), and nothing here is a bound or a proof: the search only finds schedules.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
from ortools.sat.python import cp_model

from heuristics.memory_order import lower_peak_order
from placement.evaluator import check
from placement.problem import Problem
from placement.solution import SolveOptions

from .common import best_schedule, canonical_placement
from .cpsolver import cp_solver
from .cpsolver import solve as run_cp
from .units import Units, units

WINDOW_UNITS = 10  # units freed per neighbourhood (forward and backward layer each)
WINDOW_SECONDS = 4.0  # CP-SAT's limit per neighbourhood
MAX_WINDOW_UNITS = 24  # the window grows up to this when neighbourhoods close without a gain


@dataclass
class UnitLnsStats:
    """What a run did."""

    windows: int = 0
    improved: int = 0
    closed: int = 0  # neighbourhoods CP-SAT proved optimal (no better schedule with the rest fixed)
    scattered: int = 0  # neighbourhoods of critical units along the path (the others: runs of layers)
    scattered_improved: int = 0
    start_makespan: float = 0.0
    best_makespan: float = 0.0
    seconds: float = 0.0


def critical_units(problem: Problem, placement: np.ndarray, start: np.ndarray, un: Units) -> list[int]:
    """Units holding a node of zero slack in the schedule (its latest finish, given the schedule's
    device orders, placement and makespan, equals its finish)."""
    fin = start + problem.time
    mk = float(fin.max(initial=0.0))
    eps = 1e-9 * max(1.0, mk)
    latest = np.full(problem.n, mk)
    rank = problem.topo_rank
    order = sorted(range(problem.n), key=lambda i: (start[i], rank[i]))
    nxt = np.full(problem.n, -1)
    last_on: dict[int, int] = {}
    for v in order:
        if problem.time[v] <= 0:
            continue
        d = int(placement[v])
        if d in last_on:
            nxt[last_on[d]] = v
        last_on[d] = v
    sptr, snbr, seid = problem.succ_ptr
    for v in reversed(order):  # successors start later (or at the same time and later rank)
        lf = latest[v]
        for j in range(sptr[v], sptr[v + 1]):
            w, e = int(snbr[j]), int(seid[j])
            c = problem.comm[e] if placement[w] != placement[v] else 0.0
            lf = min(lf, latest[w] - problem.time[w] - c)
        if nxt[v] >= 0:
            w = int(nxt[v])
            lf = min(lf, latest[w] - problem.time[w])
        latest[v] = lf
    crit = np.flatnonzero(fin >= latest - eps)
    return sorted({int(un.of[v]) for v in crit})


class UnitSearch:
    """The search state: the memory-free model, the incumbent, the seeded random stream."""

    def __init__(self, problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions, memory_model: str,
                 build: Callable[[Problem], Any], hint: Callable[[Problem, Any, np.ndarray, np.ndarray], object],
                 window: int = WINDOW_UNITS, window_seconds: float = WINDOW_SECONDS) -> None:
        self.p, self.opts, self.mm = problem, opts, memory_model
        self.un = units(problem)
        self.b = build(replace(problem, memory=np.full(problem.k, np.inf)))  # cpsat's model, memory left out
        self.hint = hint
        self.factor = self.b.scale.factor
        rank = problem.topo_rank
        self.forward = sorted(range(self.un.count), key=lambda g: int(rank[self.un.members[g]].min()))
        self.pos = {g: i for i, g in enumerate(self.forward)}
        self.rng = np.random.default_rng(opts.seed)
        self.window, self.window_seconds = window, window_seconds
        self.placement = canonical_placement(problem, np.asarray(placement, dtype=np.int64), self.un)
        self.start = np.asarray(start, dtype=float)
        self.makespan = float((self.start + problem.time).max(initial=0.0))
        self.stats = UnitLnsStats(start_makespan=self.makespan, best_makespan=self.makespan)
        self.stale = 0  # neighbourhoods closed without a gain since the last gain or growth
        self.converged = False

    def _neighbourhood(self) -> tuple[set[int], bool]:
        """The units to free, and whether they are scattered critical units (else a run of layers)."""
        crit = critical_units(self.p, self.placement, self.start, self.un)
        w = min(self.window, self.un.count)
        if self.rng.random() < 0.5 or len(crit) <= w:  # a run of layers around a critical unit
            c = self.pos[int(crit[int(self.rng.integers(len(crit)))])] if crit else int(self.rng.integers(self.un.count))
            lo = max(0, min(c - w // 2, self.un.count - w))
            return set(self.forward[lo:lo + w]), False
        return {int(g) for g in self.rng.choice(crit, size=w, replace=False)}, True  # critical units along the path

    def step(self, seconds: float) -> bool:
        """One neighbourhood within ``seconds``; True if the incumbent improved."""
        p, b, un = self.p, self.b, self.un
        win, scattered = self._neighbourhood()
        self.stats.scattered += scattered
        model = b.model.clone()
        for (g, d), lit in b.x.items():
            if g not in win:
                model.add(model.get_bool_var_from_proto_index(lit.index) == int(self.placement[un.members[g][0]] == d))
        self.hint(p, b, self.placement, self.start)  # canonical placement: the relabelling is the identity
        model.clear_hints()
        model.proto.solution_hint.copy_from(b.model.proto.solution_hint)
        solver = cp_solver(self.opts)
        solver.parameters.max_time_in_seconds = max(seconds, 0.01)
        status = run_cp(solver, model, self.opts)
        self.stats.windows += 1
        if status == cp_model.OPTIMAL:
            self.stats.closed += 1
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return False
        pl = np.empty(p.n, dtype=np.int64)
        for (g, d), lit in b.x.items():
            if solver.boolean_value(model.get_bool_var_from_proto_index(lit.index)):
                pl[un.members[g]] = d
        st = np.array([solver.value(model.get_int_var_from_proto_index(v.index)) for v in b.start], dtype=float) / self.factor
        got = best_schedule(p, pl, st, self.mm)
        if got is None and self.mm == "peak":
            o = lower_peak_order(p, pl)
            if o.evaluation.feasible(p):
                got = (float(o.evaluation.makespan), o.evaluation.start)
        if got is None or got[0] >= self.makespan * (1 - 1e-12):
            if status == cp_model.OPTIMAL and len(win) == un.count:
                self.converged = True  # every unit was free: nothing else to try
            elif status == cp_model.OPTIMAL:
                self.stale += 1
                if self.stale >= 4 and self.window < MAX_WINDOW_UNITS:
                    self.window, self.stale = self.window + 2, 0
            return False
        ev = check(p, pl, got[1], self.mm)
        self.placement = canonical_placement(p, ev.placement, un)
        self.start = ev.start.copy()
        self.makespan = float(ev.makespan)
        self.stats.improved += 1
        self.stats.scattered_improved += scattered
        self.stats.best_makespan = self.makespan
        self.stale = 0
        return True

    def run(self, deadline: float) -> None:
        """Neighbourhoods until ``deadline`` (time.monotonic()) or a stop request."""
        t0 = time.monotonic()
        while not self.opts.stop.is_set() and not self.converged:
            left = deadline - time.monotonic()
            if left < 0.5:
                break
            self.step(min(self.window_seconds, left - 0.2))
        self.stats.seconds += time.monotonic() - t0


def unit_lns(problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions, deadline: float,
             memory_model: str, build: Callable[[Problem], Any], hint: Callable[[Problem, Any, np.ndarray, np.ndarray], object],
             window: int = WINDOW_UNITS, window_seconds: float = WINDOW_SECONDS) -> tuple[np.ndarray, np.ndarray, float, UnitLnsStats]:
    """Improve the schedule (``placement``, ``start``: within the capacities of ``memory_model``)
    until ``deadline``. ``build`` makes formulations/cpsat.py's model of a problem (here one
    without memory limits) and ``hint`` hints it with a schedule (cpsat.add_hint): passed in, as
    cpsat runs this search. Returns (placement, start, makespan, stats), never worse than the input."""
    s = UnitSearch(problem, placement, start, opts, memory_model, build, hint, window, window_seconds)
    s.run(deadline)
    return s.placement, s.start, s.makespan, s.stats
