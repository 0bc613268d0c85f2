"""Solve on fewer devices, then use the answer as a K-device placement (``fewer-devices``).

Why: a placement on K' < K devices is a placement on K devices (the other K - K' devices stay
empty), and a heuristic given K devices does not always find it: PARDNN's mapping balances the
work over every device it is given and pays the transfers that spreading costs. On the generated
10K CNN, PARDNN with memory heuristic II gives 501.7 on 4 devices, 518.6 on 8 and 600.8 on 16,
where the portfolio's best member was 518.6 (K = 8) and 541.4 (K = 16); on msr-fiddle's BERT-12
inference graph (K = 8), PARDNN gives 628.7 on 2 devices, the portfolio's best on 8 was 636.3
(bench/results_scale.md, "Session 10: fewer devices").

How (:func:`fewer_devices`): for each device count K' in :func:`device_counts` (K/2, K/4, ...
down to 2), the sub-problem keeps the K' devices with the most memory (ties: the lower index),
their capacities, and the same graph and transfer times (a transfer costs the same between any
two devices, so a sub-problem schedule is a K-device schedule). K' is skipped when
``memory_lower_bound`` for K' devices (placement/memory_bounds.py, static or peak) exceeds the
largest capacity kept: no K'-device placement can fit. Each method of DEFAULT_METHODS runs on the
sub-problem; its placement is mapped back to the kept devices with its device order (FIFO
without one), and the evaluator judges it on the K-device problem: the same schedule and the same
per-device memory, so what the sub-problem accepted fits. The answer is the best fitting one
(ties: the earlier count, then the earlier method).

Why PARDNN only by default: run on fewer devices, ETF and HEFT never beat the best member on all
K in the measurements (each node goes to the device where it finishes first, so they seldom
spread for nothing); opts.extra["fewer_methods"] may name them (and m-topo) all the same.

Time: a sub-run starts only when it is expected to end in the time left (RUN_SECONDS_PER_ELEMENT,
then the method's own last duration), and gets the time left and a stop that turns on at this
method's limit or on a stop request (:func:`_watched`), so a member that only watches its stop
event (the list schedulers) still stops in time. Deterministic: the methods are, and the runs' order is fixed.
"""
from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import replace
from typing import Callable, Iterator

import numpy as np

from placement.evaluator import evaluate
from placement.memory_bounds import memory_lower_bound
from placement.problem import Problem
from placement.solution import BestSoFar, Solution, SolveOptions

from .baselines import topo_fill
from .list_scheduling import etf, heft
from .pardnn import pardnn, pardnn_balanced

# The methods that may run on each smaller device count, by method name; DEFAULT_METHODS run unless
# opts.extra["fewer_methods"] names others. Chosen by measurement (bench/results_scale.md,
# "Session 10: fewer devices"): PARDNN's two variants are the ones that gain on fewer devices
# (10K CNN, K = 8: pardnn-balanced 501.7 on 4 devices against 518.6 on 8; BERT-12 inference,
# K = 8: pardnn 628.7 on 2 devices against the portfolio's best on 8, 636.3), because their
# mapping balances work over every device it is given; ETF's, HEFT's and m-topo's answers on
# fewer devices never beat the best member's on all K (generated 10K and 50K graphs, 11
# msr-fiddle graphs; K = 8 and 16).
METHODS: dict[str, Callable[[Problem, SolveOptions], Solution]] = {
    "pardnn-balanced": pardnn_balanced, "pardnn": pardnn, "etf": etf, "heft": heft, "m-topo": topo_fill}
DEFAULT_METHODS = ("pardnn-balanced", "pardnn")
MIN_DEVICES = 2  # one device is the portfolio's "single"
# Seconds per node + edge of one run and its evaluation before any run has been timed (PARDNN:
# about 2e-5 at low load, bench/results_pipeline.md "Warm-start members"; twice that to spare): a
# run is started only when it is expected to end in the time left, since PARDNN does not watch
# its stop everywhere (50K CNN: a 15 s limit was overrun). Once a method has run, its own last
# duration is the expectation.
RUN_SECONDS_PER_ELEMENT = 4e-5
WATCH_SECONDS = 0.02  # how often a sub-run's stop is checked against the clock


def device_counts(k: int) -> list[int]:
    """The smaller device counts tried for K devices: K/2, K/4, ... while at least MIN_DEVICES."""
    counts, c = [], k // 2
    while c >= MIN_DEVICES:
        counts.append(c)
        c //= 2
    return counts


def kept_devices(problem: Problem, count: int) -> np.ndarray:
    """The ``count`` devices with the most memory, in index order (ties: the lower index)."""
    rank = np.lexsort((np.arange(problem.k), -problem.memory))
    return np.sort(rank[:count])


def sub_problem(problem: Problem, devices: np.ndarray) -> Problem | None:
    """``problem`` on ``devices`` only (renumbered 0..len-1), or None when some node's allowed
    devices are all dropped."""
    new = {int(d): j for j, d in enumerate(devices)}
    allowed: list[tuple[int, ...] | None] = []
    for devs in problem.allowed:
        if devs is None:
            allowed.append(None)
            continue
        kept = tuple(new[d] for d in devs if d in new)
        if not kept:
            return None
        allowed.append(kept)
    sub = replace(problem, memory=problem.memory[devices].copy(), allowed=allowed,
                  device_names=[problem.device_names[int(d)] for d in devices])
    for name in ("index", "succ_ptr", "pred_ptr", "topo_order", "topo_rank", "groups"):
        if name in problem.__dict__:  # graph structure computed once: the same graph
            sub.__dict__[name] = problem.__dict__[name]
    return sub


def embed(problem: Problem, sol: Solution, devices: np.ndarray) -> Solution:
    """A sub-problem answer as an answer on all of ``problem``'s devices: node on sub-device j goes
    to ``devices[j]``, each device keeps its order, the other devices get nothing."""
    assert sol.placement is not None
    placement = devices[np.asarray(sol.placement, dtype=np.int64)]
    order = None
    if sol.order is not None:
        order = [[] for _ in range(problem.k)]
        for j, seq in enumerate(sol.order):
            order[int(devices[j])] = list(seq)
    return Solution(sol.method, sol.status, placement=placement, start=sol.start, order=order,
                    objective=sol.objective, seconds=sol.seconds)


@contextlib.contextmanager
def _watched(opts: SolveOptions) -> Iterator[SolveOptions]:
    """Options for a sub-run: the time left of ``opts`` and a stop event of its own, set once
    ``opts`` is out of time or stopped (checked every WATCH_SECONDS by a thread), so that methods
    that only watch ``opts.stop`` (the list schedulers) stop at this limit too."""
    stop = threading.Event()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(WATCH_SECONDS):
            if opts.out_of_time():
                stop.set()
                return

    sub = replace(opts, time_limit=opts.remaining(), started=time.monotonic(), stop=stop, hint=None,
                  best_so_far=BestSoFar())  # a sub-problem answer is not an answer to the user's problem
    if opts.out_of_time():
        stop.set()
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield sub
    finally:
        done.set()
        thread.join()


def fewer_devices(problem: Problem, opts: SolveOptions) -> Solution:
    """The best answer of DEFAULT_METHODS (or opts.extra["fewer_methods"]) on each count of
    :func:`device_counts` (or opts.extra["fewer_device_counts"]) of the devices with the most
    memory, used on all of ``problem``'s devices and judged there by the evaluator; "unknown"
    when none fits. info["tried"]: every count and method with its status, makespan on the K
    devices (None without a fitting answer), seconds and why it was skipped or failed."""
    t0 = time.monotonic()
    counts = [int(c) for c in opts.extra.get("fewer_device_counts", device_counts(problem.k)) if 1 <= int(c) < problem.k]
    names = list(opts.extra.get("fewer_methods", DEFAULT_METHODS))
    unknown = [name for name in names if name not in METHODS]
    if unknown:
        raise ValueError(f"fewer_methods: unknown method {unknown[0]!r}; known: {', '.join(METHODS)}")
    tried: list[dict] = []
    took: dict[str, float] = {}  # each method's last duration (with its evaluation below, about the same)
    best: tuple[Solution, np.ndarray, str] | None = None
    cap = float(np.max(problem.memory)) if problem.k else 0.0
    for count in counts:
        if opts.out_of_time():
            tried.append({"devices": count, "status": "skipped", "reason": "out of time"})
            continue
        devices = kept_devices(problem, count)
        sub = sub_problem(problem, devices)
        if sub is None:
            tried.append({"devices": count, "status": "skipped", "reason": "a node's allowed devices are all dropped"})
            continue
        need = float(memory_lower_bound(sub, opts.memory_model)["best"]) if np.isfinite(cap) else 0.0
        if need > float(np.max(sub.memory)) * (1 + 1e-12):
            tried.append({"devices": count, "status": "skipped",
                          "reason": f"memory lower bound {need:.6g} bytes per device > {float(np.max(sub.memory)):.6g}"})
            continue
        for name in names:
            left = opts.remaining()
            expect = took.get(name, RUN_SECONDS_PER_ELEMENT * (problem.n + problem.m))
            if left is not None and (left <= 0.0 or expect > left):
                tried.append({"devices": count, "method": name, "status": "skipped",
                              "reason": f"expected {expect:.3g} s > {left:.3g} s left"})
                continue
            t = time.monotonic()
            with _watched(opts) as sub_opts:
                sol = METHODS[name](sub, sub_opts)
            took[name] = time.monotonic() - t
            row = {"devices": count, "method": name, "status": sol.status, "makespan": None, "seconds": took[name]}
            tried.append(row)
            if sol.placement is None or sol.status not in ("heuristic", "feasible", "optimal"):
                row["reason"] = sol.reason
                continue
            got = embed(problem, sol, devices)
            # The sub-run's schedule is its device order, or FIFO without one (what the methods
            # of METHODS return): the same schedule on the K devices.
            ev = evaluate(problem, got.placement, order=got.order, memory_model=opts.memory_model)
            if not ev.feasible(problem):
                row["status"], row["reason"] = "unknown", "overflows on the K devices by the evaluator"
                continue
            row["makespan"] = ev.makespan
            if best is None or ev.makespan < best[0].objective - 1e-12:
                best = (Solution("fewer-devices", "heuristic", placement=ev.placement, order=got.order, start=ev.start,
                                 objective=ev.makespan), devices, name)
    info = {"tried": tried}
    if best is None:
        why = "fewer-devices: " + ("no smaller device count to try" if not counts else "no answer on fewer devices fits")
        return Solution("fewer-devices", "unknown", reason=why, seconds=time.monotonic() - t0, info=info)
    sol, devices, name = best
    sol.info = {**info, "devices": devices.tolist(), "method": name}
    sol.seconds = time.monotonic() - t0
    return sol
