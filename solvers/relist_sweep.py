"""Relist sweep: list re-scheduling (heuristics/window_relist.py) of the windows that end at the
critical joins a transfer holds up, all of a sweep's answers put in at once.

Why: at a wide join the incumbent's order can leave the join waiting for a branch's return trip
that a better launch order would hide (heuristics/window_relist.py has the pattern); each such
join gains a little (0.005-0.025 per block on the generated 200K CNN), a plateau for refine's
moves and seconds of CP-SAT each. A list scheduler on the window ending at the join finds it in
milliseconds, and windows far apart barely touch each other, so one evaluation judges a whole
sweep of them: on the 200K CNN's 600 s answer (3159.38) the first sweep put in 75 windows and
gained 0.78 in 19 s.

A sweep: on the current schedule, the critical nodes with two or more inputs whose start a remote
input decides, latest first; for each, the window of RELIST_NODES positions of the schedule's
(start, rank) order ending at it, unless it overlaps a window already kept in this sweep; the
windows whose list schedule beats the incumbent by the window judge are merged into one placement
and order, which the evaluator times (with the search's waits) and the sweep keeps if it is
shorter and fits. When the merge is not shorter, the half with the largest promised gains is
tried, and so on down to one window. The first sweep that gains less than PLAIN_GAIN (0.01%)
turns on the fork windows: a join that ends a wide fork-join (heuristics/fork_join.py) gets the
window from its fork, with the path-by-path layouts among its plans (0.3-0.7 s a window at 200K
nodes, ten times a plain one: tried only once the plain windows run nearly dry, so a short run
keeps its cheap early gains). Before each sweep with fork windows the schedule's slack
colocation groups (a weight and its update) leave the devices that run the critical chain when
that is no longer (solvers/rehome.py): where they fill the chain's idle gaps they hold the
fork-joins' layouts in place. A sweep with fork windows that keeps nothing ends the search until
a better schedule is adopted.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from formulations.window_lns import schedule_positions, timed
from heuristics.fork_join import fork_join, layouts
from heuristics.window_relist import merged_order, relist
from placement.evaluator import Evaluation
from placement.incremental import IncrementalSchedule
from placement.problem import Problem
from placement.solution import SolveOptions
from placement.window_boundary import window_boundary

from .rehome import rehome
from .schedule_search import ScheduleSweep

RELIST_NODES = 80  # positions per window (on the 200K CNN: 40 found 0.0133 at a block's join, 80 0.0136, 20 0.001)
RELIST_TRIES = 8  # list schedules per window besides one per sibling (heuristics/window_relist.py)
FORK_NODES = 1000  # positions before a join searched for its fork (the 200K CNN's blocks: 290-590)
RESERVE = 8  # evaluations' time a sweep leaves before its deadline for the merge and its halvings
PLAIN_GAIN = 1e-4  # a sweep of plain windows gaining less (relative) turns the fork windows on


@dataclass
class RelistStats:
    """What the sweeps did, for the report's ``relist`` phase."""
    sweeps: int = 0  # sweeps finished
    windows: int = 0  # windows list-scheduled
    forks: int = 0  # of them, windows from a wide fork to its join, with layout plans
    promising: int = 0  # windows whose list schedule beat the incumbent by the window judge
    kept: int = 0  # windows put in by a kept merge
    rehomed: int = 0  # colocation groups moved off the busy devices (solvers/rehome.py)
    start_makespan: float = float("nan")
    best_makespan: float = float("nan")


def held_joins(problem: Problem, base: IncrementalSchedule) -> np.ndarray:
    """The critical nodes of ``base`` with two or more inputs whose start a remote input decides
    (its finish plus transfer is the node's start), latest position first."""
    g = base.graph
    pl, start, finish = base.placement, base.start, base.finish
    eps = 1e-9 * max(1.0, base.makespan)
    remote = pl[g.src] != pl[g.dst]
    holds = remote & (finish[g.src] + g.comm >= start[g.dst] - eps)
    held = np.zeros(problem.n, dtype=bool)
    held[g.dst[holds]] = True
    inputs = np.bincount(g.dst, minlength=problem.n)
    critical = start + problem.time + base.tail >= base.makespan - eps
    nodes = np.flatnonzero(held & critical & (inputs >= 2))
    return nodes[np.argsort(-start[nodes], kind="stable")]


class RelistSweep(ScheduleSweep):
    """The sweep of the module docstring as a search the pipeline runs in slices: ``run`` sweeps
    until its deadline or a dry sweep, ``adopt`` takes over a better schedule found elsewhere."""

    def __init__(self, problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions, *,
                 memory_model: str = "static", stats: RelistStats | None = None,
                 waits: list[tuple[int, int]] | None = None, size: int = RELIST_NODES,
                 tries: int = RELIST_TRIES) -> None:
        """``start``: a schedule of ``placement`` meeting ``waits`` (kept by every schedule here)."""
        super().__init__(problem, placement, start, opts, memory_model, stats or RelistStats(), waits)
        self.size, self.tries = size, tries
        self.rng = np.random.default_rng(opts.seed)
        self.mask = problem.allowed_mask()
        self.failed: dict[int, int] = {}  # join -> its fork window's layout when the plans found nothing there
        self.forks = False  # fork windows are tried once a sweep of the plain ones gained under PLAIN_GAIN
        self.homed = float("nan")  # the makespan of the schedule last re-homed
        self.homed_ev: Evaluation | None = None  # the last schedule the re-homing changed

    def run(self, deadline: float, once: bool = False) -> Evaluation:
        """Sweep until ``deadline`` (time.monotonic()), a stop request or a dry sweep (``once``:
        after one sweep); the best schedule so far."""
        while not self.dry and not self.opts.stop.is_set() and time.monotonic() < deadline:
            if not self._sweep(deadline) or once:
                break
        return self.best_ev

    def _sweep(self, deadline: float) -> bool:
        """One sweep; False when it was cut short by the deadline or a stop (nothing kept then
        but what its merge kept)."""
        p, st = self.p, self.stats
        if self.forks and self.best_ev.makespan != self.homed:
            self._rehome(deadline)
        base = IncrementalSchedule(p, self.best_ev.placement, self.best_ev.start, self.graph)
        if self.opts.stop.is_set():
            return False
        seq, where = schedule_positions(base)
        answers: list[tuple[float, tuple[int, int, np.ndarray, np.ndarray]]] = []
        edge = p.n + 1  # windows kept so far all start at or after this position
        finished = True
        for v in held_joins(p, base).tolist():
            if self.opts.stop.is_set() or time.monotonic() + RESERVE * self.eval_seconds >= deadline:
                finished = False
                break
            hi = int(where[v]) + 1
            if hi > edge:
                continue
            lo, got = self._fork(base, seq, where, v, hi, deadline) if self.forks else (hi, None)
            if got is None and not self.opts.stop.is_set():
                lo = max(0, hi - self.size)
                st.windows += 1
                got = relist(p, base, window_boundary(base, lo, hi, seq, where), self.rng, self.tries, self.mask)
            if got is not None:
                answers.append((base.makespan - got[2], (lo, hi, got[0], got[1])))
                edge = lo
        st.promising += len(answers)
        before = self.best_ev.makespan
        kept = self._merge(base, seq, answers, deadline)
        if finished:
            st.sweeps += 1
            if not self.forks and self.best_ev.makespan > before * (1 - PLAIN_GAIN):
                self.forks = True  # the cheap windows ran (nearly) dry: now the fork-joins' layouts too
            else:
                self.dry = not kept
        return finished

    def _rehome(self, deadline: float) -> None:
        """Before a sweep with fork windows: the slack colocation groups moved off the devices that
        run the critical path (solvers/rehome.py), when that is no longer. The updates that fill
        the critical device's idle gaps hold its fork-joins' layouts in place; once they are gone
        the fork windows find what they could not (bench/results_scale.md, "Session 39")."""
        def stop() -> bool:
            return self.opts.stop.is_set() or time.monotonic() + RESERVE * self.eval_seconds >= deadline

        ev = rehome(self.p, self.best_ev, self.mm, self.waits, stop=stop)
        if ev is None and stop():
            return  # cut short: tried again at the next sweep
        if ev is not None:
            self.stats.rehomed += int(np.unique(self.p.colocate[ev.placement != self.best_ev.placement]).size)
            self.best_ev = self.homed_ev = ev
            self.stats.best_makespan = ev.makespan
            self.dry = False
        self.homed = self.best_ev.makespan

    def _fork(self, base: IncrementalSchedule, seq: np.ndarray, where: np.ndarray, join: int, hi: int,
              deadline: float) -> tuple[int, tuple[np.ndarray, np.ndarray, float] | None]:
        """When ``join`` ends a wide fork-join within FORK_NODES positions (heuristics/fork_join.py):
        the window from the fork on, list-scheduled with the layout plans, and its answer if it beats
        the incumbent. Skipped (None) when the same window, laid out as now relative to its fork,
        found nothing before."""
        p = self.p
        fj = fork_join(p, join, seq[max(0, hi - FORK_NODES):hi - 1])
        if fj is None:
            return hi, None
        lo = int(where[fj.fork]) + 1
        win = seq[lo:hi]
        pl, start = base.placement, base.start
        sig = hash((pl[win].tobytes(), np.round(start[win] - start[fj.fork], 9).tobytes()))
        if self.failed.get(join) == sig:
            return lo, None
        self.stats.forks += 1
        self.stats.windows += 1
        plans = layouts(p, fj, int(pl[fj.fork]), int(pl[join]))
        until = deadline - RESERVE * self.eval_seconds  # the sweep's merge still needs its evaluations
        got = relist(p, base, window_boundary(base, lo, hi, seq, where), self.rng, 0, self.mask, plans,
                     until, self.opts.stop)
        if got is None and time.monotonic() < until and not self.opts.stop.is_set():
            self.failed[join] = sig  # (a window cut short is tried again)
        return lo, got

    def _merge(self, base: IncrementalSchedule, seq: np.ndarray,
               answers: list[tuple[float, tuple[int, int, np.ndarray, np.ndarray]]], deadline: float) -> bool:
        """Put the answers in together, then the better half of them, ...: the first merge the
        evaluator finds shorter (and fitting) becomes the best schedule; True if one did."""
        answers = sorted(answers, key=lambda a: -a[0])
        while answers and not self.opts.stop.is_set() and time.monotonic() + self.eval_seconds < deadline:
            pl, order = merged_order(base, seq, [a for _, a in answers])
            t = time.monotonic()
            ev = timed(self.p, pl, order, self.mm, self.waits)
            self.eval_seconds = max(self.eval_seconds, time.monotonic() - t)
            if self.opts.stop.is_set():
                return False  # measuring the peak (about a second at 200K nodes) would delay the stop
            if ev is not None and ev.makespan < self.best_ev.makespan * (1 - 1e-12) and ev.feasible(self.p):
                self.best_ev = ev
                self.stats.kept += len(answers)
                self.stats.best_makespan = ev.makespan
                return True
            answers = answers[: len(answers) // 2]
        return False
