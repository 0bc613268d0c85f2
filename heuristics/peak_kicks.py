"""Kicks out of the peak descent's local minima: move one random peak holder of an over-capacity
device to one of the emptiest devices, descend again, keep the result when its peaks are lower
(an iterated local search around heuristics/peak_descent.py).

Why: the descent keeps a move only when the peaks fall, so it ends where every single move of a
peak holder raises them. On imported and generated graphs at tight peak memory those ends stayed
above capacity and the run answered "unknown" (bench/results_peak.md, session 40: the LSTMP at
1.2 x its memory bound ended at 1.119 x the capacity). Moving a big holder away anyway and
descending from there reaches placements no descent path from the minimum did.

How: from the current placement (at first the start, a descent's end), pick an over-capacity
device uniformly, one of its first KICK_HOLDERS peak holders (most bytes first, as the descent
ranks them) uniformly, and one of the KICK_TARGETS emptiest devices it may run on uniformly; move
it and run :func:`heuristics.peak_descent.descend` from there in the current placement's order.
The result becomes the current placement when its largest peak / capacity is within KICK_SLACK
of the best's (a walk among near-best minima: kept only when better, the kicks stayed at one
minimum's neighbours; on the imported U-Net at 1.1 x its bound and a generated 300-node CNN at
1.05 x, two of seven seeded 30 s runs each fitted with the slack, none without), and the best
when its pressure (peak_descent.pressure) is lower; the best is returned, so the answer is never
worse than the start. Kicks go on until everything fits, ``stop()`` turns true, ``max_kicks``
is spent or KICK_PATIENCE kicks in a row lowered nothing. The random choices come from
``numpy.random.default_rng(seed)`` (min-memory passes the run's seed and the kicks made before, so
a rescue run does not repeat the warm start's choices) and the descent is deterministic, so a run
is repeatable given the seed and the same number of kicks.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from placement.evaluator import buffers, peak_profile, schedule_order
from placement.problem import Problem

from .peak_descent import Descended, _holders, descend, pressure
from .peak_holders import Mover

KICK_HOLDERS = 20  # a kick moves one of the device's this many largest peak holders
KICK_TARGETS = 3  # ... to one of this many emptiest devices it may run on
KICK_SLACK = 0.01  # a kicked descent's end is walked on when its top ratio is within this share of the best's
KICK_PATIENCE = 200  # kicks in a row that lower nothing end the search (without it an instance
# that cannot fit, or a run with no time limit, would kick forever)


def kick(problem: Problem, mover: Mover, at: Descended, rng: np.random.Generator) -> np.ndarray | None:
    """The placement ``at`` with one random peak holder of an over-capacity device moved to one of
    the emptiest devices it may run on (None when no such move exists)."""
    pl, ev = at.placement, at.evaluation
    ratio = ev.peak_memory / problem.memory
    over = np.flatnonzero(ratio > 1.0)
    if len(over) == 0:
        return None
    buf = buffers(problem, pl, ev.start, ev.finish)
    _, when = peak_profile(problem, pl, ev.start, ev.finish, buf)
    emptiest = np.argsort(ratio, kind="stable").tolist()
    for d in rng.permutation(over).tolist():
        units = _holders(problem, mover, pl, ev, buf, float(when[d]), d)[:KICK_HOLDERS]
        for i in rng.permutation(len(units)).tolist():
            unit = units[i]
            targets = [e for e in emptiest if e != d and mover.can_go(unit, e)]
            if targets:
                trial = pl.copy()
                trial[unit] = targets[int(rng.integers(min(KICK_TARGETS, len(targets))))]
                return trial
    return None


def kick_descend(problem: Problem, start: Descended, seed: int | Sequence[int] = 0, stop: Callable[[], bool] | None = None,
                 max_kicks: int | None = None, patience: int | None = None) -> tuple[Descended, int]:
    """Kicks and descents from ``start`` (module docstring): the best placement found, never worse
    than ``start`` by :func:`pressure` (its ``moves`` and ``evaluations`` count all the work, the
    start's and every kick's, whether or not it led to the best), and the number of kicks made."""
    stop = stop or (lambda: False)
    patience = KICK_PATIENCE if patience is None else patience
    rng = np.random.default_rng(seed)
    mover = Mover(problem)
    best, key = start, pressure(problem, start.evaluation)
    current, sequence = start, schedule_order(problem, start.evaluation.start)
    kicks = idle = moves = evaluations = 0
    while key[0] > 1.0 and not stop() and (max_kicks is None or kicks < max_kicks) and idle < patience:
        trial = kick(problem, mover, current, rng)
        if trial is None:
            break
        kicks += 1
        got = descend(problem, trial, sequence, stop=stop)
        moves, evaluations = moves + got.moves + 1, evaluations + got.evaluations
        got_key = pressure(problem, got.evaluation)
        idle += 1
        if got_key[0] <= key[0] * (1.0 + KICK_SLACK):
            current, sequence = got, schedule_order(problem, got.evaluation.start)
        if got_key < key:
            idle = 0
            best, key = got, got_key
    reason = "fits" if key[0] <= 1.0 else "stopped" if stop() else \
        "kick budget spent" if max_kicks is not None and kicks >= max_kicks else \
        f"{patience} kicks in a row lowered nothing" if idle >= patience else "no kick left"
    return Descended(best.placement, best.evaluation, best.order, start.moves + moves, start.evaluations + evaluations,
                     reason), kicks
