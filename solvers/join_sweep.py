"""Join sweep: bring the remote inputs that hold up a join back onto its device, join by join.

Why: a node with many producers (a block's gradient sum over its 32-64 paths, a concat) starts
when the last input lands. A schedule that sends a few producers away pays a dear transfer each,
and when two or more land together, moving any one of them home gains nothing: refine's single
moves see a plateau, and its random walk along a critical chain of thousands of nodes reaches
each join rarely. On the 200K CNN at K = 8 the 600 s answer kept 211 such producers away;
from it, refine with join moves (solvers/refine.py ``join_moves``) gained 0.1% in 120 s, this
sweep 0.27% in 29 s (bench/results_scale.md, "Session 19").

One sweep visits the joins (nodes with two or more inputs over edges with a transfer time) on the
schedule's critical chain, earliest start first.
Where a remote input decides the node's start, it tries refine's join moves largest first (all
remote inputs, then the latest 2^j): each a placement re-timed in the current schedule's order
and judged by the evaluator's checker, kept at once when the makespan falls and memory fits.
The next visit sees the schedule that made. A sweep that keeps nothing ends the search until a
better schedule is adopted.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from formulations.window_lns import timed
from placement.evaluator import Evaluation
from placement.problem import Problem
from placement.solution import SolveOptions

from .refine import Units, critical_chain, join_moves, order_of
from .schedule_search import ScheduleSweep


@dataclass
class JoinStats:
    """What a sweep did, for the report's ``joins`` phase."""
    sweeps: int = 0  # sweeps finished
    tried: int = 0  # join moves judged
    improved: int = 0  # join moves kept
    start_makespan: float = float("nan")
    best_makespan: float = float("nan")


def joins(problem: Problem) -> np.ndarray:
    """The nodes with at least two inputs over edges with a transfer time: the only ones a join
    move can help."""
    dear = problem.comm > 0
    count = np.bincount(problem.dst[dear], minlength=problem.n)
    return np.flatnonzero(count >= 2)


class JoinSweep(ScheduleSweep):
    """The sweep of the module docstring as a search the pipeline runs in slices: ``run`` goes on
    where the last call stopped, ``adopt`` takes over a better schedule found elsewhere."""

    def __init__(self, problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions, *,
                 memory_model: str = "static", stats: JoinStats | None = None,
                 waits: list[tuple[int, int]] | None = None) -> None:
        """``start``: a schedule of ``placement`` meeting ``waits`` (control dependencies every
        schedule of this search keeps, as refine and window LNS do)."""
        super().__init__(problem, placement, start, opts, memory_model, stats or JoinStats(), waits)
        self.units = Units(problem)
        self.is_join = np.zeros(problem.n, dtype=bool)
        self.is_join[joins(problem)] = True
        self.queue: list[int] = []  # this sweep's joins still to visit, next last
        self.kept_in_sweep = 0

    def _adopted(self) -> None:
        self.queue = []  # the next visit starts a sweep on this schedule's critical chain

    def run(self, deadline: float) -> Evaluation:
        """Visit joins until ``deadline`` (time.monotonic()), a stop request or a dry sweep; the
        best schedule so far."""
        p, st = self.p, self.stats
        while not self.dry and not self.opts.stop.is_set():
            if not self.queue:  # a new sweep: the joins on the current critical chain, latest last
                chain = np.asarray(critical_chain(p, self.best_ev, self.graph), dtype=np.int64)
                self.queue = chain[self.is_join[chain]].tolist()  # critical_chain lists the last node first
                self.kept_in_sweep = 0
                if not self.queue:
                    self.dry = True
                    break
            g = self.queue.pop()
            base = self.best_ev
            moves = join_moves(p, base, g, self.units.of, self.units.mask, p.pred_ptr)
            for units, devs in reversed(moves):
                if self.opts.stop.is_set() or time.monotonic() + self.eval_seconds >= deadline:
                    self.queue.append(g)  # visited again next time
                    return self.best_ev
                pl = base.placement.copy()
                for u, d in zip(units, devs):
                    pl[self.units.members[u]] = d
                t = time.monotonic()
                ev = timed(p, pl, order_of(p, pl, base.start, graph=self.graph), self.mm, self.waits)
                self.eval_seconds = max(self.eval_seconds, time.monotonic() - t)
                st.tried += 1
                if ev is not None and ev.makespan < base.makespan * (1 - 1e-12) and ev.feasible(p):
                    self.best_ev = ev
                    st.improved += 1
                    st.best_makespan = ev.makespan
                    self.kept_in_sweep += 1
                    break
            if not self.queue:
                st.sweeps += 1
                self.dry = self.kept_in_sweep == 0
        return self.best_ev
