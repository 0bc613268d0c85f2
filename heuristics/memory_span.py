"""Makespan under moderate memory (``mem-span``): a faster schedule at 1.2-2 x the smallest memory
per device, under the peak model.

Why: between the smallest memory (where ``min-memory`` answers along a memory-light order, with
little parallelism) and unlimited memory (where ETF or PARDNN answer), neither side does well. The
list schedulers fill a device with forward activations while it is free and find out at the
backward pass that it cannot hold them (10K CNN, K = 4, at 1.5 x its smallest memory: ETF 605,
greedy-fill 546, against 452 for PARDNN with unlimited memory), and min-memory's order runs the
graph nearly sequentially.

How: min-memory's placement along a different sequence (heuristics.min_memory.place_along: nodes
taken in a fixed sequence, each device running its nodes in that order as early as inputs allow,
live bytes tracked exactly, so the peak accepted is the evaluator's; a node goes to a device within
a level of the capacity where it adds the fewest bytes x time). The sequence blends a fast order
with a memory-light one: node ``v`` is keyed ``(1 - alpha) x pos_fast(v) + alpha x pos_light(v)``,
where ``pos_fast`` is its rank by start time in ETF's answer with unlimited memory and
``pos_light`` its rank in rule "net"'s single-device order (placement.light_order). Both orders
are topological, so every blend is (along an edge both ranks grow strictly). alpha = 0 keeps ETF's
parallelism and piles memory up; alpha = 1 is min-memory's own order.

:func:`memory_span` tries the passes of :data:`PASSES` (alpha x level) and keeps the feasible
schedule with the smallest makespan (the evaluator's; FIFO order when the same placement also fits
in FIFO order with a shorter makespan). Deterministic: no randomness, ties go to the lower device.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from placement.evaluator import evaluate, schedule_order
from placement.light_order import net_sequence
from placement.problem import Problem
from placement.solution import Solution, SolveOptions

from .list_scheduling import Stopped, etf_schedule
from .min_memory import fifo_if_better, place_along

# (alpha, level) in the order tried, the most often best first. Measured at 1.5 x the smallest
# memory (bench/results_peak.md, level 1): 10K CNN K = 4, alpha 0.1 / 0.15 / 0.25 / 0.4 / 0.6 ->
# 604 / 570 / 531 / 552 / 611; K = 8, 0.1 / 0.15 / 0.25 / 0.4 -> 553 / 558 / 577 / 608; 50K CNN
# K = 8, 0.1 / 0.15 / 0.25 / 0.4 -> 1350 / 1339 / 1318 / 1318. The lower levels leave room for what
# the ratchet would let rise; alpha 0.8 is near min-memory's order, for when memory is tighter.
PASSES: tuple[tuple[float, float], ...] = (
    (0.25, 1.0), (0.15, 1.0), (0.4, 1.0), (0.1, 1.0), (0.6, 1.0),
    (0.25, 0.95), (0.15, 0.95), (0.4, 0.95), (0.8, 1.0), (0.8, 0.9),
)


def fast_sequence(problem: Problem, stop: Callable[[], bool] | None = None) -> np.ndarray | None:
    """Every node by its start time in ETF's schedule with unlimited memory (ties: topological
    rank), a topological order; None when stopped."""
    free = problem.with_devices(problem.k, float("inf"))
    try:
        dev, order, _, _ = etf_schedule(free, 0.0, "static", stop=stop)
    except Stopped:
        return None
    ev = evaluate(free, dev, order=order, memory_model="static")
    return schedule_order(problem, ev.start)


def blend(problem: Problem, fast: np.ndarray, light: np.ndarray, alpha: float) -> np.ndarray:
    """The sequence keyed ``(1 - alpha) x rank in fast + alpha x rank in light`` (ties: topological
    rank); topological when both are (along an edge both ranks grow strictly)."""
    n = problem.n
    pos_f = np.empty(n)
    pos_f[fast] = np.arange(n)
    pos_l = np.empty(n)
    pos_l[light] = np.arange(n)
    return np.lexsort((problem.topo_rank, (1 - alpha) * pos_f + alpha * pos_l))


def memory_span(problem: Problem, opts: SolveOptions) -> Solution:
    """min-memory's placement (bytes x time within the level, ratchet) along blends of ETF's
    unlimited-memory order and rule "net"'s order, one pass per (alpha, level) of :data:`PASSES`
    (or ``opts.extra["mem_span_passes"]``) while time is left; the feasible one with the smallest
    makespan (module docstring)."""
    t0 = time.monotonic()
    if opts.memory_model != "peak":
        return Solution("mem-span", "unknown", reason="mem-span: built for the peak memory model (--memory-model peak)",
                        seconds=time.monotonic() - t0)
    passes = opts.extra.get("mem_span_passes", PASSES)
    if not np.all(np.isfinite(problem.memory)):
        passes = passes[:1]  # nothing binds: the passes differ only in memory
    stop = opts.out_of_time
    fast = fast_sequence(problem, stop=stop)
    light = net_sequence(problem) if fast is not None else None
    tried: list[dict] = []
    best = None
    for alpha, level in passes:
        if fast is None or stop():
            break
        t = time.monotonic()
        got = place_along(problem, blend(problem, fast, light, alpha), level, by_area=True, ratchet=True, stop=stop)
        if got is None:
            break
        ev = evaluate(problem, got.placement, order=got.order, memory_model=opts.memory_model)
        ok = ev.feasible(problem)
        tried.append({"alpha": alpha, "level": level, "fits": ok, "makespan": ev.makespan,
                      "memory_over_capacity": float(np.max(ev.memory / problem.memory)),
                      "seconds": round(time.monotonic() - t, 3)})
        if ok and (best is None or ev.makespan < best[1].makespan):
            best = (got, ev, tried[-1])
    info: dict = {"passes": tried}
    if best is None:
        why = "out of time" if stop() else "no pass fitted the capacity"
        return Solution("mem-span", "unknown", reason=f"mem-span: {why}", seconds=time.monotonic() - t0, info=info)
    got, ev, row = best
    order, ev = fifo_if_better(problem, got.placement, got.order, ev, opts.memory_model)
    info.update(alpha=row["alpha"], level=row["level"], accepted_peak=got.peak.tolist(), fifo=order is None)
    return Solution("mem-span", "heuristic", placement=ev.placement, order=order, start=ev.start, objective=ev.makespan,
                    seconds=time.monotonic() - t0, info=info)
