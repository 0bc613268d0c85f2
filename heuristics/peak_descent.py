"""Lower the largest device peaks of a placement one unit at a time (the peak descent), under the
peak memory model.

Why: min-memory (heuristics/min_memory.py) places node by node along one memory-light order and
never goes back. On imported training steps (bench/real_models2.py) its lowest pass stayed
1.10-1.47 x the memory lower bound (U-Net K = 4 1.33, EfficientNet K = 8 1.24, MoE K = 8 1.47),
so at 1.05-1.2 x the bound no member answered at all. Moving single holders of the largest peak
to another device, keeping each move only when the evaluator says the peaks fell, took those to
1.21, 1.07 and 1.36 in 0.2-8 s (bench/results_scale.md, session 27).

How: every device runs its nodes in the order of one topological ``sequence`` (so any placement
has a valid order, heuristics.peak_holders.device_orders). A placement is judged by its devices'
peak / capacity ratios, each at least 1 (a device within its capacity counts as exactly full),
sorted from the largest down and compared lexicographically: the largest ratio first, then the
next, so a move that lowers one of two equal tops is progress. A step takes the devices above
their capacity, largest ratio first; on each, the units (colocation groups) holding bytes at its
peak moment (heuristics.peak_holders.peak_holders) and those with parameters there (held all
along: on the U-Net at K = 4 they took the descent from 1.21 to 1.15), most bytes first, the first
HOLDERS of them; each is tried on every other device it may run on, emptiest (lowest ratio) first. The first move
whose evaluation is better is kept and the next step begins. The descent ends when everything
fits, when no tried move is better (a local minimum), at ``max_evaluations``, or when ``stop()``
turns true. Every peak is the evaluator's on the order returned.

Deterministic: no randomness; ties go to the lower device and to the order of the holders.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from placement.evaluator import Evaluation, buffers, evaluate, peak_profile, schedule_order
from placement.problem import Problem

from .memory_order import lower_peak_order
from .peak_holders import Mover, device_orders, peak_holders

REORDER_ROUNDS = 4  # memory-aware reorders of a descent's end, each followed by a descent in that order
HOLDERS = 100  # units tried per device and step, most bytes at its peak first (24: EfficientNet K = 4 at 1.05 x
# its memory bound ended at 1.010 x the capacity, 100: fits)


@dataclass
class Descended:
    """Where the descent ended: the placement, its evaluation on ``order`` (each device in the
    sequence's order), the moves kept, the evaluations made, and why it stopped."""

    placement: np.ndarray
    evaluation: Evaluation
    order: list[list[int]]
    moves: int
    evaluations: int
    reason: str


def pressure(problem: Problem, ev: Evaluation) -> tuple[float, ...]:
    """Each device's peak / capacity, at least 1, largest first: smaller (lexicographically) is
    better, and all ones means the placement fits."""
    ratio = np.maximum(ev.peak_memory / problem.memory, 1.0)
    return tuple(np.sort(ratio)[::-1].tolist())


def descend(problem: Problem, placement: np.ndarray, sequence: np.ndarray, stop: Callable[[], bool] | None = None,
            max_evaluations: int | None = None) -> Descended:
    """Move units off the devices above capacity while it lowers their peaks (module docstring),
    each device running its nodes in the order of ``sequence`` (a topological order of all nodes)."""
    stop = stop or (lambda: False)
    k = problem.k
    mover = Mover(problem)
    pl = np.asarray(placement, dtype=np.int64).copy()
    ev = evaluate(problem, pl, order=device_orders(pl, sequence, k), memory_model="peak")
    key = pressure(problem, ev)
    moves = evaluations = 0
    reason = "fits"
    while key[0] > 1.0:
        better, evaluations, why = _better_move(problem, mover, pl, ev, key, sequence, stop, max_evaluations, evaluations)
        if better is None:
            reason = why
            break
        pl, ev, key = better
        moves += 1
    return Descended(pl, ev, device_orders(pl, sequence, k), moves, evaluations, reason)


def _holders(problem: Problem, mover: Mover, pl: np.ndarray, ev: Evaluation, buf, when: float, d: int) -> list[np.ndarray]:
    """The units worth moving off device d, most bytes first (ties: lowest node): the bytes each
    holds at d's peak moment ``when`` (nan: the peak is parameters alone) plus its parameters."""
    credit: dict[int, tuple[np.ndarray, float]] = {}
    held = peak_holders(mover, pl, ev, buf, when, d) if np.isfinite(when) else {}
    for v in sorted(set(held) | set(np.flatnonzero((pl == d) & (problem.param_bytes > 0)).tolist())):
        u = mover.unit(v)
        first = int(u.min())
        bytes_ = credit.get(first, (u, float(problem.param_bytes[u].sum())))[1] + held.get(v, 0.0)
        credit[first] = (u, bytes_)
    ranked = sorted(credit.items(), key=lambda item: (-item[1][1], item[0]))[:HOLDERS]
    return [u for _, (u, _) in ranked]


def _better_move(problem: Problem, mover: Mover, pl: np.ndarray, ev: Evaluation, key: tuple[float, ...],
                 sequence: np.ndarray, stop: Callable[[], bool], max_evaluations: int | None,
                 evaluations: int) -> tuple[tuple | None, int, str]:
    """The first single-unit move with a lower pressure: ((placement, evaluation, pressure) or
    None, the evaluations counted so far, why none was taken)."""
    k = problem.k
    buf = buffers(problem, pl, ev.start, ev.finish)
    _, when = peak_profile(problem, pl, ev.start, ev.finish, buf)
    ratio = ev.peak_memory / problem.memory
    for d in np.argsort(-ratio, kind="stable").tolist():
        if ratio[d] <= 1.0:
            break
        targets = [e for e in np.argsort(ratio, kind="stable").tolist() if e != d]
        for unit in _holders(problem, mover, pl, ev, buf, float(when[d]), d):
            for e in targets:
                if not mover.can_go(unit, e):
                    continue
                if stop():
                    return None, evaluations, "stopped"
                if max_evaluations is not None and evaluations >= max_evaluations:
                    return None, evaluations, "evaluation budget spent"
                trial = pl.copy()
                trial[unit] = e
                got = evaluate(problem, trial, order=device_orders(trial, sequence, k, lists=False), memory_model="peak")
                evaluations += 1
                got_key = pressure(problem, got)
                if got_key < key:
                    return (trial, got, got_key), evaluations, ""
    return None, evaluations, "no move of a peak holder lowers the peaks"


def descend_and_reorder(problem: Problem, placement: np.ndarray, sequence: np.ndarray,
                        stop: Callable[[], bool] | None = None) -> Descended:
    """:func:`descend`; where it ends above capacity, the memory-aware order of where it ended
    (heuristics.memory_order.lower_peak_order) and another descent in that order, for at most
    REORDER_ROUNDS rounds and while each lowers the pressure.

    Why: the descent keeps one sequence for every placement it tries, and a move that only pays in
    another order is invisible to it. On an imported 2-layer LSTMP (bench/real_models6.py
    ``lstm_proj``, K = 4, 1.3 x its memory bound) every descent ended at 1.0014 x the capacity
    or above; the memory-aware order of the best took it to 1.0001, and one move in that order to
    0.9998: it fits, where no member found a placement (session 38)."""
    stop = stop or (lambda: False)
    got = descend(problem, placement, sequence, stop=stop)
    for _ in range(REORDER_ROUNDS):
        if got.evaluation.feasible(problem) or stop():
            break
        again = lower_peak_order(problem, got.placement, stop=stop)
        nxt = descend(problem, got.placement, schedule_order(problem, again.evaluation.start), stop=stop)
        if pressure(problem, nxt.evaluation) >= pressure(problem, got.evaluation):
            break
        got = Descended(nxt.placement, nxt.evaluation, nxt.order, got.moves + nxt.moves,
                        got.evaluations + nxt.evaluations, nxt.reason)
    return got


def descents(problem: Problem, starts: Sequence[tuple[np.ndarray, np.ndarray]],
             stop: Callable[[], bool] | None = None) -> Iterator[tuple[int, Descended, float]]:
    """The descent from each start (placement, sequence) in the order given, nearest to fitting
    first by the caller's measure, skipping a placement already descended from (two orders that
    placed alike), until ``stop()``: yields (the start's index, where it ended, its seconds). The
    caller stops at the first that fits (min-memory's passes, chain-split's splits)."""
    stop = stop or (lambda: False)
    seen: set[bytes] = set()
    for i, (placement, sequence) in enumerate(starts):
        if stop():
            return
        placed = np.asarray(placement, dtype=np.int64).tobytes()
        if placed in seen:
            continue
        seen.add(placed)
        t = time.monotonic()
        got = descend_and_reorder(problem, placement, sequence, stop=stop)
        yield i, got, time.monotonic() - t
