"""What the pipeline's sweeps over a schedule share (solvers/join_sweep.py, solvers/relist_sweep.py):
the best schedule so far and the waits it keeps, taking over a better schedule found by another
search, and the "dry" state of a sweep that kept nothing.

Why a base class: the alternating search (solvers/pipeline.py) drives its arms through the same
three calls (``run``, ``adopt``, ``converged``); the sweeps differ only in what one sweep tries.
"""
from __future__ import annotations

import numpy as np

from placement.evaluator import Evaluation, check
from placement.incremental import timing_graph
from placement.problem import Problem
from placement.solution import SolveOptions


class ScheduleSweep:
    """A sweep search from ``start`` (a schedule of ``placement`` meeting ``waits``: control
    dependencies every schedule of the search keeps, as refine and window LNS do). Subclasses
    set ``self.dry`` when a whole sweep kept nothing and may extend :meth:`_adopted`."""

    def __init__(self, problem: Problem, placement: np.ndarray, start: np.ndarray, opts: SolveOptions,
                 memory_model: str, stats: object, waits: list[tuple[int, int]] | None) -> None:
        self.p, self.opts, self.mm = problem, opts, memory_model
        self.graph = timing_graph(problem, waits)
        self.stats = stats
        self.best_ev = check(problem, np.asarray(placement, dtype=np.int64), np.asarray(start, dtype=float),
                             memory_model, check_memory=False)
        self.stats.start_makespan = self.stats.best_makespan = self.best_ev.makespan
        self.dry = False  # a whole sweep kept nothing, and nothing better was adopted since
        self.eval_seconds = 0.0  # the longest evaluation so far

    @property
    def waits(self) -> list[tuple[int, int]] | None:
        """The waits every schedule of this search meets (None: none)."""
        return self.graph.wait_list

    def adopt(self, ev: Evaluation, waits: list[tuple[int, int]] | None = None) -> bool:
        """Go on from the schedule ``ev`` (meeting ``waits``, kept from here on) when it is
        shorter than this search's best."""
        if ev.makespan >= self.best_ev.makespan - 1e-9 * max(1.0, self.best_ev.makespan):
            return False
        if (list(map(tuple, waits)) if waits else None) != self.waits:
            self.graph = timing_graph(self.p, waits)
        self.best_ev = ev
        self.stats.best_makespan = ev.makespan
        self.dry = False
        self._adopted()
        return True

    def _adopted(self) -> None:
        """What a subclass forgets when it takes over another schedule."""

    @property
    def converged(self) -> bool:
        """A whole sweep kept nothing (and no better schedule was adopted since)."""
        return self.dry
