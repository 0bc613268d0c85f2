"""Restarts of the alternating search (solvers/pipeline.py) when it has stalled: when to give up
the placement it is polishing, and where to start again.

Why: the search's moves are local, and a start's basin can end far above another's. On the
30K-operator GRU seq2seq training step (bench/real_models3.py, K = 4, static model), the search
from PARDNN's schedule (69.79, the main line on one device) stalled at 69.55 after about 100 s
and gained nothing in the 500 s after; from band-repair's placement at a made-up peak capacity
of 1.3 x the memory lower bound (70.46, the main line cut into bands over the four devices), the
same search reached 68.57 in 120 s (bench/results_scale.md, session 29). Which basin is deeper
depends on the graph: on the 32K decoder the band start searched to 166.4 where PARDNN's reached
158.7. So a restart happens only when the search has stalled (:class:`StallWatch`), and the
answer is the best over every start. With a core to spare, the same starts are searched beside
the first track instead, from the beginning (solvers/side_track.py).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import numpy as np

from heuristics.band_repair import band_repair
from placement.memory_bounds import memory_lower_bound
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

# A track has stalled when its makespan fell by less than STALL_GAIN (a fraction) over the last
# STALL_SLICES slices' worth of seconds.
STALL_GAIN = 1e-3
STALL_SLICES = 3
# A restart needs at least this many slices' worth of seconds left: less does not get a new
# start past its first descents.
RESTART_MIN_SLICES = 3
# Nor when the pipeline's answer is within this fraction of the lower bound: no start can gain more
# (the 10K transformer stalled at a gap of 0.44%, and its restart gained nothing).
RESTART_MIN_GAP = 0.01
# A start more than this fraction above the pipeline's answer is passed over: from ETF's 591.98 the
# 50K LSTM (K = 8) restarted 28% above its 461.7 and never came back; the decoder's band start,
# 41% above, searched to 5.9% above (the GRU's band start was 1.3% above).
RESTART_MAX_ABOVE = 0.1
# The band start's capacity: this times the peak memory lower bound of the problem on its devices,
# where the user's own capacity is looser (else the portfolio's band-repair has run at it).
BAND_RATIO = 1.3
# band-repair's share of the time left at a restart (it watches the clock).
BAND_SHARE = 0.25


@dataclass
class StallWatch:
    """The makespan of the current track after each slice, and whether it has stalled."""
    window: float  # seconds looked back over
    gain: float = STALL_GAIN
    history: list[tuple[float, float]] = field(default_factory=list)

    def restart(self, now: float, makespan: float) -> None:
        """A new track starts at ``now`` from ``makespan``."""
        self.history = [(now, makespan)]

    def record(self, now: float, makespan: float) -> None:
        self.history.append((now, makespan))

    def stalled(self, now: float) -> bool:
        """True when the track is at least ``window`` seconds old and its makespan ``window``
        seconds ago was less than a ``gain`` fraction above its makespan now."""
        if not self.history or now - self.history[0][0] < self.window:
            return False
        then = [m for t, m in self.history if t <= now - self.window][-1]
        return then - self.history[-1][1] < self.gain * then


def band_start(problem: Problem, opts: SolveOptions, budget: float | None) -> Solution | None:
    """band-repair's answer (heuristics/band_repair.py) under the peak model at BAND_RATIO x the
    peak memory lower bound per device (never above the problem's own capacities), within
    ``budget`` seconds; None where that capacity is no tighter than the problem's under the peak
    model (the portfolio ran band-repair there) or nothing fitted."""
    k = problem.k
    lb = float(memory_lower_bound(problem.with_devices(k, math.inf), "peak", k)["best"])
    cap = BAND_RATIO * lb
    if not np.isfinite(cap) or cap <= 0.0 or (opts.memory_model == "peak" and float(np.max(problem.memory)) <= cap):
        return None
    tight = problem.with_devices(k, np.minimum(problem.memory, cap).tolist())
    sol = band_repair(tight, replace(opts, memory_model="peak", time_limit=budget, started=time.monotonic()))
    return sol if sol.placement is not None and sol.status in ("feasible", "heuristic") else None


def restart_starts(problem: Problem, opts: SolveOptions, candidates: list[Solution], labels: list[str],
                   left: Callable[[], float | None]) -> Iterator[tuple[str, Solution]]:
    """The starts of later tracks with their labels, each made when asked for, in order:
    band-repair's bands at a made-up capacity (:func:`band_start`), then the portfolio's other
    distinct placements (``candidates``, best first, named by ``labels``; the caller leaves out
    the one the first track started from). ``left()``: seconds left in the search (None: no limit)."""
    seconds = left()
    sol = band_start(problem, opts, None if seconds is None else BAND_SHARE * seconds)
    if sol is not None:
        yield f"band-repair at {BAND_RATIO:g} x the peak memory bound", sol
    yield from zip(labels, candidates)
